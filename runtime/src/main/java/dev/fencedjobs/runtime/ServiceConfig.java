package dev.fencedjobs.runtime;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Settings;
import java.time.Duration;
import java.util.Objects;

/**
 * What every service reads the same way.
 *
 * @param database connection and server-side timeouts
 * @param httpPort health, metrics and status endpoint ({@code HTTP_PORT}; 0 picks a free port)
 * @param shutdownTimeout how long a graceful stop waits for work in flight ({@code SHUTDOWN_TIMEOUT})
 * @param migrate apply schema migrations at start-up ({@code DATABASE_MIGRATE})
 * @param ops the endpoint's interface and bearer token ({@code HTTP_BIND_ADDRESS}, {@code OPS_TOKEN})
 */
public record ServiceConfig(
        DatabaseConfig database, int httpPort, Duration shutdownTimeout, boolean migrate, OpsAccess ops) {

    public static final String HTTP_PORT = "HTTP_PORT";
    public static final String SHUTDOWN_TIMEOUT = "SHUTDOWN_TIMEOUT";
    public static final String MIGRATE = "DATABASE_MIGRATE";

    public static final int DEFAULT_HTTP_PORT = 8080;
    public static final Duration DEFAULT_SHUTDOWN_TIMEOUT = Duration.ofSeconds(10);

    public ServiceConfig {
        if (httpPort < 0 || httpPort > 65_535) {
            throw new ConfigException(HTTP_PORT, "must be a TCP port (0 for any free port), got " + httpPort);
        }
        Settings.requirePositive(SHUTDOWN_TIMEOUT, shutdownTimeout);
        Objects.requireNonNull(ops, "ops");
    }

    /** On every interface, with no token. */
    public ServiceConfig(DatabaseConfig database, int httpPort, Duration shutdownTimeout, boolean migrate) {
        this(database, httpPort, shutdownTimeout, migrate, OpsAccess.OPEN);
    }

    public static ServiceConfig from(Settings settings) {
        return new ServiceConfig(
                DatabaseConfig.from(settings),
                settings.integer(HTTP_PORT, DEFAULT_HTTP_PORT),
                settings.duration(SHUTDOWN_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT),
                settings.bool(MIGRATE, true),
                OpsAccess.from(settings));
    }

    /** The bounds every service puts on its {@code BATCH_SIZE}: 1 to 10,000. */
    public static int requireBatchSize(String name, int value) {
        if (value < 1 || value > 10_000) {
            throw new ConfigException(name, "must be between 1 and 10000, got " + value);
        }
        return value;
    }
}
