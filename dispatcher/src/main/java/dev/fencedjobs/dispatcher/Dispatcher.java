package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.HolderId;
import dev.fencedjobs.db.Ticker;
import dev.fencedjobs.runtime.LeaderService;
import dev.fencedjobs.runtime.LeasedService;
import dev.fencedjobs.runtime.Leadership;
import java.util.List;
import java.util.function.UnaryOperator;

/**
 * One dispatcher replica: leadership of the {@code scheduler} role and the {@link DispatchLoop}
 * that completes due jobs while this replica leads, woken by {@code jobs_due} notifications, with
 * the {@link ScheduleFirer} beside it that turns schedules' occurrences into jobs.
 */
public final class Dispatcher extends LeasedService {

    static final String JOBS_DUE = "jobs_due";

    private Dispatcher(LeaderService service) {
        super(service);
    }

    /** Starts a replica with a fresh holder id. */
    public static Dispatcher start(DispatcherConfig config) {
        return start(config, HolderId.generate(), Ticker.system(), UnaryOperator.identity(), UnaryOperator.identity());
    }

    /** Starts a replica whose lease operations and batches pass through the given decorators. */
    static Dispatcher start(DispatcherConfig config, String holderId, Ticker ticker,
            UnaryOperator<Leadership.LeaseOps> leaseOps, UnaryOperator<JobBatches> jobBatches) {
        LeaderService.Spec spec = new LeaderService.Spec("dispatcher", DispatcherConfig.ROLE, holderId, config.service(),
                config.lease(), config.safetyMargin(), List.of(JOBS_DUE, ScheduleFirer.SCHEDULES_CHANGED), ticker, leaseOps);
        return new Dispatcher(LeaderService.start(spec, parts -> new DispatchLoop(parts.leadership(),
                jobBatches.apply(new FencedJobBatches(parts.dsl(), parts.lease())), config.batchSize(), config.jobsRetention(), parts.ticker(),
                parts.registry(), new ScheduleFirer(parts.leadership(), parts.lease(), parts.dsl(), config.misfireGrace(), parts.ticker(),
                        parts.registry()))));
    }
}
