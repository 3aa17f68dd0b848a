package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.HolderId;
import dev.fencedjobs.db.Ticker;
import dev.fencedjobs.runtime.LeaderService;
import dev.fencedjobs.runtime.Leadership;
import dev.fencedjobs.runtime.ServiceMain;
import java.util.List;
import java.util.Map;
import java.util.function.UnaryOperator;

/**
 * One dispatcher replica: leadership of the {@code scheduler} role and the {@link DispatchLoop}
 * that completes due jobs while this replica leads, woken by {@code jobs_due} notifications.
 */
public final class Dispatcher implements ServiceMain.Running {

    static final String JOBS_DUE = "jobs_due";

    private final LeaderService service;

    private Dispatcher(DispatcherConfig config, String holderId, Ticker ticker,
            UnaryOperator<Leadership.LeaseOps> leaseOps, UnaryOperator<JobBatches> jobBatches) {
        LeaderService.Spec spec = new LeaderService.Spec("dispatcher", DispatcherConfig.ROLE, holderId, config.service(),
                config.lease(), config.safetyMargin(), List.of(JOBS_DUE), ticker, leaseOps);
        this.service = LeaderService.start(spec, parts -> new DispatchLoop(parts.leadership(),
                jobBatches.apply(new FencedJobBatches(parts.dsl(), parts.lease())), config.batchSize(), parts.ticker(), parts.registry()));
    }

    /** Starts a replica with a fresh holder id. */
    public static Dispatcher start(DispatcherConfig config) {
        return start(config, HolderId.generate(), Ticker.system(), UnaryOperator.identity(), UnaryOperator.identity());
    }

    /** Starts a replica whose lease operations and batches pass through the given decorators. */
    static Dispatcher start(DispatcherConfig config, String holderId, Ticker ticker,
            UnaryOperator<Leadership.LeaseOps> leaseOps, UnaryOperator<JobBatches> jobBatches) {
        return new Dispatcher(config, holderId, ticker, leaseOps, jobBatches);
    }

    boolean ready() {
        return service.ready();
    }

    public Leadership leadership() {
        return service.leadership();
    }

    public int httpPort() {
        return service.httpPort();
    }

    Map<String, Object> status() {
        return service.status();
    }

    @Override
    public void awaitTermination() throws InterruptedException {
        service.awaitTermination();
    }

    @Override
    public void close() {
        service.close();
    }
}
