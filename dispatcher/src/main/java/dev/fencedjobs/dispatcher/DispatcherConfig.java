package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.LeaseConfig;
import dev.fencedjobs.db.Settings;
import java.time.Duration;

/**
 * Everything the dispatcher reads at start-up, validated here so a bad value stops it at once.
 *
 * @param database connection and server-side timeouts
 * @param lease lease timing of the {@code scheduler} role
 * @param batchSize jobs completed per transaction ({@code BATCH_SIZE})
 * @param httpPort health, metrics and status endpoint ({@code HTTP_PORT}; 0 picks a free port)
 * @param shutdownTimeout how long a graceful stop waits for the batch in flight ({@code SHUTDOWN_TIMEOUT})
 * @param migrate apply schema migrations at start-up ({@code DATABASE_MIGRATE})
 */
public record DispatcherConfig(
        DatabaseConfig database, LeaseConfig lease, int batchSize, int httpPort, Duration shutdownTimeout, boolean migrate) {

    public static final String ROLE = "scheduler";

    public static final String BATCH_SIZE = "BATCH_SIZE";
    public static final String HTTP_PORT = "HTTP_PORT";
    public static final String SHUTDOWN_TIMEOUT = "SHUTDOWN_TIMEOUT";
    public static final String MIGRATE = "DATABASE_MIGRATE";

    public static final int DEFAULT_BATCH_SIZE = 500;
    public static final int MAX_BATCH_SIZE = 10_000;
    public static final int DEFAULT_HTTP_PORT = 8080;
    public static final Duration DEFAULT_SHUTDOWN_TIMEOUT = Duration.ofSeconds(10);

    public DispatcherConfig {
        if (batchSize < 1 || batchSize > MAX_BATCH_SIZE) {
            throw new ConfigException(BATCH_SIZE, "must be between 1 and " + MAX_BATCH_SIZE + ", got " + batchSize);
        }
        if (httpPort < 0 || httpPort > 65_535) {
            throw new ConfigException(HTTP_PORT, "must be a TCP port (0 for any free port), got " + httpPort);
        }
        Settings.requirePositive(SHUTDOWN_TIMEOUT, shutdownTimeout);
        lease.requireTimeoutsWithin(database);
        // The leader stops starting batches one statement timeout before its local deadline; after a
        // renewal it must still have time to work before the next one.
        if (lease.renewInterval().plus(database.statementTimeout()).compareTo(lease.duration()) >= 0) {
            throw new ConfigException(LeaseConfig.RENEW_INTERVAL, "plus " + DatabaseConfig.STATEMENT_TIMEOUT + " ("
                    + lease.renewInterval() + " + " + database.statementTimeout() + ") must be shorter than "
                    + LeaseConfig.DURATION + " (" + lease.duration() + "), or the leader would idle between renewals");
        }
    }

    public static DispatcherConfig from(Settings settings) {
        return new DispatcherConfig(
                DatabaseConfig.from(settings),
                LeaseConfig.from(settings),
                settings.integer(BATCH_SIZE, DEFAULT_BATCH_SIZE),
                settings.integer(HTTP_PORT, DEFAULT_HTTP_PORT),
                settings.duration(SHUTDOWN_TIMEOUT, DEFAULT_SHUTDOWN_TIMEOUT),
                bool(settings, MIGRATE, true));
    }

    static boolean bool(Settings settings, String name, boolean defaultValue) {
        String raw = settings.string(name, String.valueOf(defaultValue));
        switch (raw.toLowerCase(java.util.Locale.ROOT)) {
            case "true":
            case "yes":
            case "1":
                return true;
            case "false":
            case "no":
            case "0":
                return false;
            default:
                throw new ConfigException(name, "must be true or false, got '" + raw + "'");
        }
    }

    /** Local margin before the lease's deadline at which the leader stops starting batches. */
    public Duration safetyMargin() {
        return database.statementTimeout();
    }
}
