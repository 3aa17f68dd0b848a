package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.Settings;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.ServiceConfig;
import java.time.Duration;

/**
 * Everything the dispatcher reads at start-up, validated here so a bad value stops it at once.
 *
 * @param service database, ops port, shutdown timeout, migration switch
 * @param lease lease timing of the {@code scheduler} role
 * @param batchSize jobs completed per transaction ({@code BATCH_SIZE})
 * @param jobsRetention completed and cancelled jobs are deleted once completed or cancelled longer
 *     ago than this ({@code JOBS_RETENTION})
 * @param misfireGrace a schedule's occurrence found older than this when a leader comes to it was
 *     missed, and its schedule's misfire policy decides it ({@code SCHEDULE_MISFIRE_GRACE})
 */
public record DispatcherConfig(
        ServiceConfig service, LeaseConfig lease, int batchSize, Duration jobsRetention, Duration misfireGrace) {

    public static final String ROLE = "scheduler";
    public static final String BATCH_SIZE = "BATCH_SIZE";
    public static final int DEFAULT_BATCH_SIZE = 500;
    public static final String JOBS_RETENTION = "JOBS_RETENTION";
    public static final Duration DEFAULT_JOBS_RETENTION = Duration.ofDays(7);
    public static final String SCHEDULE_MISFIRE_GRACE = "SCHEDULE_MISFIRE_GRACE";
    public static final Duration DEFAULT_MISFIRE_GRACE = Duration.ofMinutes(1);

    /** With the default retention of completed jobs and the default misfire grace. */
    public DispatcherConfig(ServiceConfig service, LeaseConfig lease, int batchSize) {
        this(service, lease, batchSize, DEFAULT_JOBS_RETENTION);
    }

    /** With the default misfire grace. */
    public DispatcherConfig(ServiceConfig service, LeaseConfig lease, int batchSize, Duration jobsRetention) {
        this(service, lease, batchSize, jobsRetention, DEFAULT_MISFIRE_GRACE);
    }

    public DispatcherConfig {
        ServiceConfig.requireBatchSize(BATCH_SIZE, batchSize);
        Settings.requirePositive(JOBS_RETENTION, jobsRetention);
        Settings.requirePositive(SCHEDULE_MISFIRE_GRACE, misfireGrace);
        lease.requireTimeoutsWithin(service.database());
        lease.requireWorkBetweenRenewals(service.database());
    }

    public static DispatcherConfig from(Settings settings) {
        return new DispatcherConfig(
                ServiceConfig.from(settings),
                LeaseConfig.from(settings),
                settings.integer(BATCH_SIZE, DEFAULT_BATCH_SIZE),
                settings.duration(JOBS_RETENTION, DEFAULT_JOBS_RETENTION),
                settings.duration(SCHEDULE_MISFIRE_GRACE, DEFAULT_MISFIRE_GRACE));
    }

    /** Local margin before the lease's deadline at which the leader stops starting batches. */
    public Duration safetyMargin() {
        return service.database().statementTimeout();
    }
}
