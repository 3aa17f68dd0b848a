package dev.fencedjobs.runtime;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.runtime.internal.Embedding;
import io.micrometer.core.instrument.MeterRegistry;
import io.opentelemetry.api.OpenTelemetry;
import java.time.Duration;
import java.util.Objects;
import javax.sql.DataSource;

/**
 * What the dispatcher's, the relay's and the consumer's builders share: where the database is
 * (a {@link DatabaseConfig} for a pool of the service's own, or the application's
 * {@link DataSource}), where the meters go, and whether there is an ops endpoint. An embedded
 * service has none unless asked ({@link #opsServer(int)}): the application has its own endpoints.
 *
 * @param <B> the concrete builder, for chaining
 */
public abstract class ServiceBuilder<B extends ServiceBuilder<B>> {

    private DatabaseConfig database;
    private DataSource dataSource;
    private MeterRegistry meterRegistry;
    private OpenTelemetry openTelemetry;
    private Integer httpPort;
    private Duration shutdownTimeout = ServiceConfig.DEFAULT_SHUTDOWN_TIMEOUT;
    private boolean migrate = true;
    private OpsAccess opsAccess = OpsAccess.OPEN;

    protected ServiceBuilder() {}

    @SuppressWarnings("unchecked")
    private B self() {
        return (B) this;
    }

    /** A pool of the service's own (closed when it stops), with these server-side timeouts on every connection. */
    public B database(DatabaseConfig database) {
        this.database = Objects.requireNonNull(database, "database");
        this.dataSource = null;
        return self();
    }

    /**
     * The application's pool; the service borrows connections from it and leaves it open when it
     * stops. The dispatcher and the relay each keep three of its connections for as long as they
     * run: one for LISTEN notifications, and with the lease's fast path (on by default) one for the
     * lease session and one for the follower's watch; size the pool for them. The consumer keeps none.
     */
    public B dataSource(DataSource dataSource) {
        this.dataSource = Objects.requireNonNull(dataSource, "dataSource");
        this.database = null;
        return self();
    }

    /** The application's registry for the service's meters (each tagged {@code service}); they are removed when it stops. */
    public B meterRegistry(MeterRegistry meterRegistry) {
        this.meterRegistry = Objects.requireNonNull(meterRegistry, "meterRegistry");
        return self();
    }

    /**
     * The application's OpenTelemetry for the service's spans (docs/tracing.md); without it they go
     * to {@code GlobalOpenTelemetry}, which is what the OpenTelemetry Java agent installs, and a
     * no-op without one.
     */
    public B openTelemetry(OpenTelemetry openTelemetry) {
        this.openTelemetry = Objects.requireNonNull(openTelemetry, "openTelemetry");
        return self();
    }

    /**
     * An ops endpoint on {@code port} (0 picks a free one): health, status, the dashboard, and
     * {@code /metrics} when no registry was lent.
     */
    public B opsServer(int port) {
        this.httpPort = port;
        return self();
    }

    /**
     * Who may reach the ops endpoint: its interface ({@code HTTP_BIND_ADDRESS}, default all) and the
     * bearer token {@code /status}, {@code /dashboard.json} and {@code /metrics} need ({@code OPS_TOKEN}, default none).
     */
    public B opsAccess(OpsAccess access) {
        this.opsAccess = Objects.requireNonNull(access, "access");
        return self();
    }

    /** How long {@code close()} waits for work in flight (default 10 s). */
    public B shutdownTimeout(Duration shutdownTimeout) {
        this.shutdownTimeout = Objects.requireNonNull(shutdownTimeout, "shutdownTimeout");
        return self();
    }

    /** Whether to apply the schema migrations at start (default true). */
    public B migrate(boolean migrate) {
        this.migrate = migrate;
        return self();
    }

    /**
     * Takes every setting of {@code service}, as {@code …Config.from(Settings)} reads them from the
     * environment: a pool of the service's own, its ops endpoint on {@code HTTP_PORT} (0: a free
     * port), its shutdown timeout, migrations and ops access. The builders' {@code builder(config)} use it.
     */
    protected B service(ServiceConfig service) {
        if (service.database() != null) {
            database(service.database());
        }
        this.httpPort = service.httpPort();
        this.shutdownTimeout = service.shutdownTimeout();
        this.migrate = service.migrate();
        this.opsAccess = service.ops();
        return self();
    }

    /** A lent pool, or none. */
    protected Embedding embedding() {
        return new Embedding(dataSource, meterRegistry, httpPort != null, openTelemetry);
    }

    /**
     * The service's settings. With a lent pool, {@code sessionsMustBeBounded} reads its sessions'
     * timeouts ({@link DatabaseConfig#ofSessions}), which a leased service's arithmetic needs; the
     * consumer's does not, and gets no {@code DatabaseConfig}.
     */
    protected ServiceConfig serviceConfig(boolean sessionsMustBeBounded) {
        DatabaseConfig db;
        if (dataSource != null) {
            db = sessionsMustBeBounded ? DatabaseConfig.ofSessions(dataSource) : null;
        } else if (database != null) {
            db = database;
        } else {
            throw new ConfigException(
                    DatabaseConfig.URL,
                    "give the builder a database(DatabaseConfig.of(url, user, password)) "
                            + "or the application's dataSource(…)");
        }
        return new ServiceConfig(db, httpPort == null ? 0 : httpPort, shutdownTimeout, migrate, opsAccess);
    }
}
