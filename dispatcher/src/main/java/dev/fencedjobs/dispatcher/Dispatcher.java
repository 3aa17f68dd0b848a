package dev.fencedjobs.dispatcher;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.Database;
import dev.fencedjobs.db.HolderId;
import dev.fencedjobs.db.Lease;
import dev.fencedjobs.db.Ticker;
import dev.fencedjobs.runtime.Leadership;
import dev.fencedjobs.runtime.OpsServer;
import dev.fencedjobs.runtime.PgListener;
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.UnaryOperator;
import org.jooq.DSLContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One dispatcher replica: leadership of the {@code scheduler} role, the work loop, the LISTEN
 * connection that wakes it, and the ops endpoint.
 *
 * <p>Graceful stop ({@link #close()}): stop starting batches, let the batch in flight commit,
 * then release the lease conditionally, which notifies followers so one takes over at once.
 */
public final class Dispatcher implements AutoCloseable {

    static final String JOBS_DUE = "jobs_due";
    static final String LEASE_RELEASED = "lease_released";
    /** Start-up waits for an unreachable database for about a minute and a half before it gives up. */
    private static final int MIGRATE_CONNECT_RETRIES = 12;

    private static final Logger log = LoggerFactory.getLogger(Dispatcher.class);

    private final DispatcherConfig config;
    private final HikariDataSource pool;
    private final Leadership leadership;
    private final DispatchLoop loop;
    private final Thread worker;
    private final PgListener listener;
    private final OpsServer ops;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final CountDownLatch terminated = new CountDownLatch(1);

    private Dispatcher(DispatcherConfig config, String holderId, Ticker ticker,
            UnaryOperator<Leadership.LeaseOps> leaseOps, UnaryOperator<JobBatches> jobBatches) {
        this.config = config;
        log.info("Dispatcher {} starting: database {} as {}, batch size {}", holderId, config.database().safeUrl(),
                config.database().user(), config.batchSize());
        PrometheusMeterRegistry registry = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        registry.config().commonTags("service", "dispatcher");
        new JvmMemoryMetrics().bindTo(registry);
        this.pool = Database.pool(config.database(), "dispatcher");
        try {
            if (config.migrate()) {
                Database.migrate(pool, MIGRATE_CONNECT_RETRIES);
            }
            DSLContext dsl = Database.dsl(pool);
            Lease lease = new Lease(dsl, DispatcherConfig.ROLE, holderId, config.lease().duration(), ticker);
            this.leadership = new Leadership(DispatcherConfig.ROLE, holderId, leaseOps.apply(new Leadership.LeaseOps() {
                @Override
                public java.util.Optional<dev.fencedjobs.db.Grant> acquireOrRenew() {
                    return lease.acquireOrRenew();
                }

                @Override
                public boolean release(long token) {
                    return lease.release(token);
                }
            }), config.lease(), config.safetyMargin(), ticker, registry);
            this.loop = new DispatchLoop(leadership, jobBatches.apply(new FencedJobBatches(dsl, lease)), config.batchSize(), ticker, registry);
            this.listener = new PgListener(config.database(), "dispatcher", List.of(JOBS_DUE, LEASE_RELEASED),
                    this::onNotification, loop::catchUp);
            this.worker = new Thread(loop, "dispatch-loop");
            this.ops = OpsServer.start(config.httpPort(), registry, this::ready, this::status);
        } catch (RuntimeException e) {
            pool.close();
            throw e;
        }
    }

    /** Starts a replica with a fresh holder id. */
    public static Dispatcher start(DispatcherConfig config) {
        return start(config, HolderId.generate(), Ticker.system(), UnaryOperator.identity(), UnaryOperator.identity());
    }

    /** Starts a replica whose lease operations and batches pass through the given decorators. */
    static Dispatcher start(DispatcherConfig config, String holderId, Ticker ticker,
            UnaryOperator<Leadership.LeaseOps> leaseOps, UnaryOperator<JobBatches> jobBatches) {
        Dispatcher d = new Dispatcher(config, holderId, ticker, leaseOps, jobBatches);
        d.worker.start();
        d.listener.start();
        d.leadership.start();
        return d;
    }

    private void onNotification(String channel, String payload) {
        if (JOBS_DUE.equals(channel)) {
            try {
                loop.jobsDue(Long.parseLong(payload));
            } catch (NumberFormatException e) {
                loop.catchUp();
            }
        } else if (LEASE_RELEASED.equals(channel) && DispatcherConfig.ROLE.equals(payload)) {
            leadership.attemptNow();
        }
    }

    boolean ready() {
        return leadership.databaseReachable() && !closed.get();
    }

    public Leadership leadership() {
        return leadership;
    }

    public int httpPort() {
        return ops.port();
    }

    Map<String, Object> status() {
        Map<String, Object> status = new LinkedHashMap<>();
        status.put("service", "dispatcher");
        status.put("role", leadership.role());
        status.put("holder", leadership.holderId());
        status.put("state", leadership.state().name());
        status.put("ready", ready());
        status.put("acquisitions", leadership.acquisitions());
        leadership.lastGrant().ifPresent(g -> {
            status.put("token", g.token());
            status.put("leaseExpiresAt", g.expiresAt().toString());
        });
        status.put("batchSize", config.batchSize());
        loop.lastBatch().ifPresent(b -> {
            Map<String, Object> batch = new LinkedHashMap<>();
            batch.put("token", b.token());
            batch.put("completed", b.completed());
            batch.put("millis", b.millis());
            batch.put("finishedAt", b.finishedAt().toString());
            status.put("lastBatch", batch);
        });
        return status;
    }

    /** Blocks until {@link #close()} has finished. */
    public void awaitTermination() throws InterruptedException {
        terminated.await();
    }

    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        log.info("Dispatcher {} stopping: no new batches; waiting up to {} for the batch in flight",
                leadership.holderId(), config.shutdownTimeout());
        loop.stop();
        boolean finished = join(worker, config.shutdownTimeout().toMillis());
        if (finished) {
            leadership.stopAndRelease();
        } else {
            log.warn("The batch in flight did not finish within {}; not releasing the lease, it expires on its own",
                    config.shutdownTimeout());
            leadership.close();
        }
        listener.close();
        ops.close();
        pool.close();
        log.info("Dispatcher {} stopped", leadership.holderId());
        terminated.countDown();
    }

    private static boolean join(Thread thread, long millis) {
        try {
            thread.join(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return !thread.isAlive();
    }
}
