package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.HolderWatch;
import dev.fencedjobs.lease.Leadership;
import dev.fencedjobs.lease.Lease;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.lease.LeaseOps;
import dev.fencedjobs.lease.LeaseSession;
import dev.fencedjobs.runtime.ServiceConfig;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;
import java.util.function.UnaryOperator;
import org.jooq.DSLContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A service whose work only the holder of a role's lease may do (the dispatcher, the relay):
 * {@link Leadership}, the worker thread and the graceful stop, on a {@link ServiceRuntime} (the
 * pool, the migrations, the LISTEN connection, the ops endpoint).
 *
 * <p>Graceful stop ({@link #close()}): the worker stops starting work and finishes what is in
 * flight; then, and only then, the lease is released conditionally, whose trigger notifies
 * followers so one takes over at once. If the worker does not finish in time, the lease is not
 * released; with the fast path a follower takes over as the lease session closes, else at expiry.
 *
 * <p>With the fast path ({@link LeaseConfig#fastTakeover()}) the lease's statements go over a
 * {@link LeaseSession} of the service's own, which holds the sign of life, and a follower waits on
 * a {@link HolderWatch}: two more long-lived connections beside the pool and the LISTEN one.
 */
public final class LeaderService implements AutoCloseable {

    /** The channel on which a lease release is announced; the payload is the role. */
    public static final String LEASE_RELEASED = "lease_released";

    private static final Logger log = LoggerFactory.getLogger(LeaderService.class);

    /** The service's own work, run on a thread of its own. */
    public interface Worker extends Runnable {
        /** Stop starting work; return from {@link #run()} once what is in flight is done. */
        void stop();

        /** A notification on one of the service's channels (never {@link #LEASE_RELEASED}). */
        void onNotification(String channel, String payload);

        /** The LISTEN connection (re)connected: notifications may have been missed. */
        void onListenerConnected();

        /** Entries for the status JSON. */
        Map<String, Object> status();

        /** False while the worker cannot do its work for a reason of its own (Kafka refusing it, say). */
        default boolean ready() {
            return true;
        }
    }

    /** What a worker is built from. */
    public record Parts(
            DSLContext dsl,
            Lease lease,
            Leadership leadership,
            MeterRegistry registry,
            Ticker ticker,
            Tracing tracing) {}

    /**
     * How a service is put together; the decorators let tests pause or break its lease and work.
     *
     * @param config its database (when {@code embedding} lends none, the pool's; else what the lent
     *     pool's sessions are, {@link dev.fencedjobs.db.DatabaseConfig#ofSessions}), ops port, stop and migrations
     */
    public record Spec(
            String service,
            String role,
            String holderId,
            ServiceConfig config,
            Embedding embedding,
            LeaseConfig lease,
            Duration safetyMargin,
            List<String> channels,
            Ticker ticker,
            UnaryOperator<LeaseOps> leaseOps) {}

    private final Spec spec;
    private final ServiceRuntime runtime;
    private final Leadership leadership;
    /** The lease's own session and the follower's watch; both null when the fast path is off. */
    private final LeaseSession leaseSession;

    private final HolderWatch holderWatch;
    private final Worker worker;
    private final Thread workerThread;
    private final PgListener listener;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final CountDownLatch terminated = new CountDownLatch(1);

    private LeaderService(Spec spec, Function<Parts, Worker> workerFactory) {
        this.spec = spec;
        this.runtime = ServiceRuntime.open(
                spec.service(), spec.config(), spec.embedding(), Database.MIGRATIONS, Database.HISTORY_TABLE);
        log.info("{} {} starting: database {}", spec.service(), spec.holderId(), runtime.describeDatabase());
        MeterRegistry registry = runtime.registry();
        DSLContext dsl = runtime.dsl();
        Lease lease;
        try {
            lease = new Lease(dsl, spec.role(), spec.holderId(), spec.lease().duration(), spec.ticker());
        } catch (RuntimeException e) {
            runtime.close();
            throw e;
        }
        LeaseOps ops;
        if (spec.lease().fastTakeover()) {
            // The lease's statements go over a session of its own, which holds the sign of life;
            // neither connection opens before the first attempt.
            leaseSession = new LeaseSession(lease, runtime.sessions("lease"));
            holderWatch = new HolderWatch(spec.role(), runtime.sessions("watch"));
            ops = leaseSession;
        } else {
            leaseSession = null;
            holderWatch = null;
            ops = lease;
        }
        try {
            this.leadership = new Leadership(
                    spec.role(),
                    spec.holderId(),
                    spec.leaseOps().apply(ops),
                    holderWatch,
                    spec.lease(),
                    spec.safetyMargin(),
                    spec.ticker(),
                    registry);
            this.worker = workerFactory.apply(new Parts(
                    dsl,
                    lease,
                    leadership,
                    registry,
                    spec.ticker(),
                    spec.embedding().tracing()));
            List<String> channels = new ArrayList<>(spec.channels());
            channels.add(LEASE_RELEASED);
            // A release notification sent while the listener was away is lost: a follower that waits
            // for the holder's expiry tries once now instead.
            this.listener = runtime.listener(channels, this::onNotification, () -> {
                worker.onListenerConnected();
                leadership.attemptNow();
            });
            this.workerThread = new Thread(worker, spec.service() + "-worker");
            runtime.serve(this::ready, this::status, null);
        } catch (RuntimeException e) {
            runtime.close();
            throw e;
        }
    }

    private void closeSessions() {
        if (holderWatch != null) {
            holderWatch.close();
        }
        if (leaseSession != null) {
            // Ends the session, and with it the sign of life: a waiting follower takes over now.
            leaseSession.close();
        }
    }

    public static LeaderService start(Spec spec, Function<Parts, Worker> workerFactory) {
        LeaderService s = new LeaderService(spec, workerFactory);
        s.workerThread.start();
        s.listener.start();
        s.leadership.start();
        return s;
    }

    private void onNotification(String channel, String payload) {
        if (LEASE_RELEASED.equals(channel)) {
            if (spec.role().equals(payload)) {
                leadership.attemptNow();
            }
        } else {
            worker.onNotification(channel, payload);
        }
    }

    public boolean ready() {
        return leadership.databaseReachable() && worker.ready() && !closed.get();
    }

    public Leadership leadership() {
        return leadership;
    }

    /** The ops endpoint's port, or -1 when the embedding turned it off. */
    public int httpPort() {
        return runtime.httpPort();
    }

    public Map<String, Object> status() {
        Map<String, Object> status = new LinkedHashMap<>();
        status.put("service", spec.service());
        status.put("role", leadership.role());
        status.put("holder", leadership.holderId());
        status.put("state", leadership.state().name());
        status.put("ready", ready());
        status.put("acquisitions", leadership.acquisitions());
        status.put("fastTakeover", leadership.fastTakeover());
        status.put("fastTakeovers", leadership.fastTakeoverCount());
        leadership.watchTarget().ifPresent(token -> status.put("watching", token.value()));
        if (leaseSession != null) {
            leaseSession.signOfLife().ifPresent(token -> status.put("signOfLife", token.value()));
        }
        // Whether the LISTEN connection is up (after a database failover: on the new primary).
        status.put("listening", listener.connected());
        leadership.lastGrant().ifPresent(g -> {
            status.put("token", g.token().value());
            status.put("leaseExpiresAt", g.expiresAt().toString());
        });
        status.putAll(worker.status());
        return status;
    }

    /** Blocks until {@link #close()} has finished. */
    public void awaitTermination() throws InterruptedException {
        terminated.await();
    }

    public boolean awaitTermination(Duration timeout) throws InterruptedException {
        return terminated.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
    }

    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        Duration timeout = spec.config().shutdownTimeout();
        log.info(
                "{} {} stopping: no new work; waiting up to {} for work in flight",
                spec.service(),
                spec.holderId(),
                timeout);
        worker.stop();
        try {
            workerThread.join(timeout.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (workerThread.isAlive()) {
            log.warn(
                    "Work in flight did not finish within {}; not releasing the lease: a follower takes over when this replica's "
                            + "lease session ends, or at expiry (the work in flight writes nothing once it has)",
                    timeout);
            leadership.close();
        } else {
            leadership.stopAndRelease();
        }
        closeSessions();
        listener.close();
        runtime.close();
        log.info("{} {} stopped", spec.service(), spec.holderId());
        terminated.countDown();
    }
}
