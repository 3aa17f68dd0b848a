package dev.fencedjobs.runtime.internal;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Shards;
import dev.fencedjobs.lease.LeaseSession;
import dev.fencedjobs.runtime.ServiceConfig;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.core.instrument.composite.CompositeMeterRegistry;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;
import java.util.Map;
import java.util.function.BiConsumer;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import javax.sql.DataSource;
import org.jooq.DSLContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What every service stands on, the dispatcher, the relay and the consumer alike: its meters, its
 * pool, its migrations, its LISTEN connection and its ops endpoint; each either its own or lent by
 * an application that embeds it ({@link Embedding}). {@link #close()} closes what the service made
 * and leaves what it was lent.
 *
 * <p>The order of a stop is the caller's: stop the work, wait for what is in flight, then close
 * this.
 */
public final class ServiceRuntime implements AutoCloseable {

    /** Start-up waits for an unreachable database for about a minute and a half before it gives up. */
    private static final int MIGRATE_CONNECT_RETRIES = 12;

    private static final Logger log = LoggerFactory.getLogger(ServiceRuntime.class);

    private final String service;
    private final ServiceConfig config;
    private final Embedding embedding;
    private final MeterRegistry registry;
    private final PrometheusMeterRegistry prometheus;
    private final HikariDataSource ownPool;
    private final DataSource dataSource;
    private final DSLContext dsl;
    private volatile OpsServer ops;
    private volatile Dashboard dashboard;

    private ServiceRuntime(String service, ServiceConfig config, Embedding embedding) {
        this.service = service;
        this.config = config;
        this.embedding = embedding;
        if (embedding.meterRegistry() == null) {
            this.prometheus = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
            prometheus.config().commonTags("service", service);
            new JvmMemoryMetrics().bindTo(prometheus);
            this.registry = prometheus;
        } else {
            // The tag goes on our meters only: a composite in front of the application's registry.
            this.prometheus = null;
            CompositeMeterRegistry ours = new CompositeMeterRegistry();
            ours.config().commonTags("service", service);
            ours.add(embedding.meterRegistry());
            this.registry = ours;
        }
        if (embedding.dataSource() == null) {
            this.ownPool = Database.pool(config.database(), service);
            this.dataSource = ownPool;
        } else {
            this.ownPool = null;
            this.dataSource = embedding.dataSource();
        }
        this.dsl = Database.dsl(dataSource);
    }

    /**
     * Makes (or takes) the registry and the pool, and applies the migrations in {@code migrations}
     * when the configuration asks for it.
     */
    public static ServiceRuntime open(
            String service, ServiceConfig config, Embedding embedding, String migrations, String historyTable) {
        ServiceRuntime runtime = new ServiceRuntime(service, config, embedding);
        try {
            if (config.migrate()) {
                if (runtime.ownPool != null) {
                    Database.migrate(
                            config.database(), migrations, historyTable, MIGRATE_CONNECT_RETRIES, Shards.DEFAULT_COUNT);
                } else {
                    // On the application's pool, a new database starts with one shard: each shard a replica
                    // follows keeps two of the pool's connections (docs/shards.md, "What it costs").
                    Database.migrate(runtime.dataSource, migrations, historyTable, MIGRATE_CONNECT_RETRIES, 1);
                }
            }
            return runtime;
        } catch (RuntimeException e) {
            runtime.close();
            throw e;
        }
    }

    /** Where and as whom, fit for a log line. */
    public String describeDatabase() {
        return ownPool != null
                ? config.database().safeUrl() + " as " + config.database().user()
                : "the application's DataSource";
    }

    public MeterRegistry registry() {
        return registry;
    }

    public DataSource dataSource() {
        return dataSource;
    }

    public DSLContext dsl() {
        return dsl;
    }

    public ServiceConfig config() {
        return config;
    }

    /** A LISTEN connection of its own, or, on a lent pool, one of the pool's connections kept for it. */
    public PgListener listener(List<String> channels, BiConsumer<String, String> onNotification, Runnable onConnected) {
        if (ownPool != null) {
            return new PgListener(config.database(), service, channels, onNotification, onConnected);
        }
        return new PgListener(
                () -> {
                    Connection c = dataSource.getConnection();
                    c.setAutoCommit(
                            true); // LISTEN takes effect at commit, and notifications arrive only between transactions
                    return unlistenOnClose(c);
                },
                service,
                channels,
                onNotification,
                onConnected);
    }

    /**
     * Where a long-lived session of the service comes from (the lease session, the holder watch): a
     * connection of its own, set up as the pool's are, or, on a lent pool, one of the pool's kept
     * for it until the service stops.
     */
    public LeaseSession.Connections sessions(String purpose) {
        if (ownPool != null) {
            return () -> Database.session(config.database(), service + "-" + purpose);
        }
        return () -> {
            Connection c = dataSource.getConnection();
            c.setAutoCommit(true);
            return c;
        };
    }

    /**
     * The connection, which on close first ends its LISTENs: a pool does not reset them, and the
     * application's next borrower would otherwise be a session that listens and never reads, which
     * holds back the server's notification queue until it fills.
     */
    static Connection unlistenOnClose(Connection c) {
        return (Connection) Proxy.newProxyInstance(
                Connection.class.getClassLoader(), new Class<?>[] {Connection.class}, (proxy, method, args) -> {
                    if ("close".equals(method.getName()) && method.getParameterCount() == 0) {
                        try {
                            if (!c.isClosed()) {
                                try (Statement s = c.createStatement()) {
                                    s.execute("UNLISTEN *");
                                }
                            }
                        } catch (SQLException e) {
                            log.debug(
                                    "UNLISTEN before returning the LISTEN connection to the application's pool failed "
                                            + "(the pool drops a broken one): {}",
                                    e.toString());
                        } finally {
                            c.close();
                        }
                        return null;
                    }
                    try {
                        return method.invoke(c, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
    }

    /**
     * Starts the ops endpoint with its dashboard, unless the embedding turned it off.
     *
     * @param consumer for the dashboard, a consumer's own series; null for the leased services
     */
    public void serve(BooleanSupplier ready, Supplier<Map<String, Object>> status, Dashboard.ConsumerSide consumer) {
        if (embedding.opsServer()) {
            dashboard = new Dashboard(service, dataSource, consumer);
            ops = OpsServer.start(
                    config.httpPort(),
                    config.ops(),
                    prometheus == null ? null : prometheus::scrape,
                    ready,
                    status,
                    dashboard::snapshot,
                    dashboard::job);
        }
    }

    /** The ops endpoint's port, or -1 when there is none. */
    public int httpPort() {
        OpsServer o = ops;
        return o == null ? -1 : o.port();
    }

    /** Closes the ops endpoint and the pool the service made; a lent pool stays open. */
    @Override
    public void close() {
        OpsServer o = ops;
        if (o != null) {
            o.close();
        }
        Dashboard d = dashboard;
        if (d != null) {
            d.close();
        }
        if (ownPool != null) {
            ownPool.close();
        }
        if (registry instanceof CompositeMeterRegistry ours) {
            // Takes our meters off the application's registry (a stopped service reports nothing),
            // and leaves the registry itself open: closing the composite would close it too.
            for (io.micrometer.core.instrument.Meter meter : List.copyOf(ours.getMeters())) {
                ours.remove(meter);
            }
            ours.remove(embedding.meterRegistry());
        }
        log.debug("{}: runtime closed", service);
    }
}
