package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.LeaseConfig;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.ServiceConfig;
import java.time.Duration;

/**
 * Everything the dispatcher reads at start-up, validated here so a bad value stops it at once.
 *
 * @param service database, ops port, shutdown timeout, migration switch
 * @param lease lease timing of the {@code scheduler} role
 * @param batchSize jobs completed per transaction ({@code BATCH_SIZE})
 * @param jobsRetention completed jobs are deleted once completed longer ago than this
 *     ({@code JOBS_RETENTION})
 */
public record DispatcherConfig(ServiceConfig service, LeaseConfig lease, int batchSize, Duration jobsRetention) {

    public static final String ROLE = "scheduler";
    public static final String BATCH_SIZE = "BATCH_SIZE";
    public static final int DEFAULT_BATCH_SIZE = 500;
    public static final String JOBS_RETENTION = "JOBS_RETENTION";
    public static final Duration DEFAULT_JOBS_RETENTION = Duration.ofDays(7);

    /** With the default retention of completed jobs. */
    public DispatcherConfig(ServiceConfig service, LeaseConfig lease, int batchSize) {
        this(service, lease, batchSize, DEFAULT_JOBS_RETENTION);
    }

    public DispatcherConfig {
        ServiceConfig.requireBatchSize(BATCH_SIZE, batchSize);
        Settings.requirePositive(JOBS_RETENTION, jobsRetention);
        lease.requireTimeoutsWithin(service.database());
        // The leader stops starting batches one statement timeout before its local deadline; after a
        // renewal it must still have time to work before the next one.
        if (lease.renewInterval().plus(service.database().statementTimeout()).compareTo(lease.duration()) >= 0) {
            throw new ConfigException(LeaseConfig.RENEW_INTERVAL, "plus " + DatabaseConfig.STATEMENT_TIMEOUT + " ("
                    + lease.renewInterval() + " + " + service.database().statementTimeout() + ") must be shorter than "
                    + LeaseConfig.DURATION + " (" + lease.duration() + "), or the leader would idle between renewals");
        }
    }

    public static DispatcherConfig from(Settings settings) {
        return new DispatcherConfig(ServiceConfig.from(settings), LeaseConfig.from(settings),
                settings.integer(BATCH_SIZE, DEFAULT_BATCH_SIZE), settings.duration(JOBS_RETENTION, DEFAULT_JOBS_RETENTION));
    }

    /** Local margin before the lease's deadline at which the leader stops starting batches. */
    public Duration safetyMargin() {
        return service.database().statementTimeout();
    }
}
