package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.HolderId;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.lease.LeaseOps;
import dev.fencedjobs.runtime.ServiceBuilder;
import dev.fencedjobs.runtime.internal.Embedding;
import dev.fencedjobs.runtime.internal.LeaderService;
import dev.fencedjobs.runtime.internal.LeasedService;
import java.time.Duration;
import java.util.List;
import java.util.function.UnaryOperator;

/**
 * One dispatcher replica: leadership of the {@code scheduler} role and the {@link DispatchLoop}
 * that completes due jobs while this replica leads, woken by {@code jobs_due} notifications, with
 * the {@link ScheduleFirer} beside it that turns schedules' occurrences into jobs.
 *
 * <p>In an application of its own:
 *
 * <pre>{@code
 * Dispatcher dispatcher = Dispatcher.builder()
 *         .database(DatabaseConfig.of(url, "fj_dispatcher", password)) // or .dataSource(pool)
 *         .meterRegistry(registry)                                    // optional
 *         .start();
 * ...
 * dispatcher.close(); // finishes the batch in hand, releases the lease
 * }</pre>
 */
public final class Dispatcher extends LeasedService {

    static final String JOBS_DUE = "jobs_due";

    private Dispatcher(LeaderService service) {
        super(service);
    }

    /** A replica to embed in an application: no ops endpoint unless asked, the defaults of the environment variables otherwise. */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * A replica with every setting of {@code config} ({@link DispatcherConfig#from} reads them from the
     * environment): its own pool, registry and ops endpoint, as {@code DispatcherMain} runs it.
     */
    public static Builder builder(DispatcherConfig config) {
        return Builder.of(config);
    }

    /** Starts a replica whose lease operations and batches pass through the given decorators. */
    static Dispatcher start(
            DispatcherConfig config,
            Embedding embedding,
            String holderId,
            Ticker ticker,
            UnaryOperator<LeaseOps> leaseOps,
            UnaryOperator<JobBatches> jobBatches) {
        LeaderService.Spec spec = new LeaderService.Spec(
                "dispatcher",
                DispatcherConfig.ROLE,
                holderId,
                config.service(),
                embedding,
                config.lease(),
                config.safetyMargin(),
                List.of(JOBS_DUE, ScheduleFirer.SCHEDULES_CHANGED),
                ticker,
                leaseOps,
                true);
        return new Dispatcher(LeaderService.start(
                spec,
                parts -> new DispatchLoop(
                        parts.leadership(),
                        jobBatches.apply(new FencedJobBatches(parts.dsl(), parts.lease(), parts.shard())),
                        config.batchSize(),
                        config.jobsRetention(),
                        parts.ticker(),
                        parts.registry(),
                        // The schedules are shard 0's holder's: their occurrences go to whichever shard they fall in.
                        parts.shard() == 0
                                ? new ScheduleFirer(
                                        parts.leadership(),
                                        parts.lease(),
                                        parts.dsl(),
                                        config.misfireGrace(),
                                        parts.ticker(),
                                        parts.registry())
                                : Schedules.NONE,
                        parts.tracing(),
                        parts.shard())));
    }

    /** Builds a {@link Dispatcher}; each setting as its environment variable in docs/dispatcher.md. */
    public static final class Builder extends ServiceBuilder<Builder> {

        private LeaseConfig lease = new LeaseConfig(LeaseConfig.DEFAULT_DURATION, LeaseConfig.DEFAULT_RENEW_INTERVAL);
        private int batchSize = DispatcherConfig.DEFAULT_BATCH_SIZE;
        private Duration jobsRetention = DispatcherConfig.DEFAULT_JOBS_RETENTION;
        private Duration misfireGrace = DispatcherConfig.DEFAULT_MISFIRE_GRACE;

        private static Builder of(DispatcherConfig config) {
            Builder b = new Builder();
            b.service(config.service());
            b.lease = config.lease();
            b.batchSize = config.batchSize();
            b.jobsRetention = config.jobsRetention();
            b.misfireGrace = config.misfireGrace();
            return b;
        }

        private Builder() {}

        /** {@code LEASE_DURATION} and {@code RENEW_INTERVAL}. */
        public Builder lease(LeaseConfig lease) {
            this.lease = lease;
            return this;
        }

        /** {@code BATCH_SIZE}. */
        public Builder batchSize(int batchSize) {
            this.batchSize = batchSize;
            return this;
        }

        /** {@code JOBS_RETENTION}. */
        public Builder jobsRetention(Duration jobsRetention) {
            this.jobsRetention = jobsRetention;
            return this;
        }

        /** {@code SCHEDULE_MISFIRE_GRACE}. */
        public Builder misfireGrace(Duration misfireGrace) {
            this.misfireGrace = misfireGrace;
            return this;
        }

        /**
         * Validates (a {@link dev.fencedjobs.db.ConfigException} names the bad setting), migrates,
         * and starts following; it leads once it holds the lease.
         */
        public Dispatcher start() {
            DispatcherConfig config =
                    new DispatcherConfig(serviceConfig(true), lease, batchSize, jobsRetention, misfireGrace);
            return Dispatcher.start(
                    config,
                    embedding(),
                    HolderId.generate(),
                    Ticker.system(),
                    UnaryOperator.identity(),
                    UnaryOperator.identity());
        }
    }
}
