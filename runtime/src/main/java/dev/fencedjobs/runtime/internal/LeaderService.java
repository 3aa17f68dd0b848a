package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Shards;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.Leadership;
import dev.fencedjobs.lease.Lease;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.lease.LeaseOps;
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
 * A service whose work only the holder of a role's lease may do (the dispatcher, the relay), on a
 * {@link ServiceRuntime} (the pool, the migrations, the LISTEN connection, the ops endpoint).
 *
 * <p><b>Shards</b> (docs/shards.md): the work is split into the shard map's shards, each with a
 * lease of its own ({@code scheduler}, {@code scheduler/1}, …). The replica keeps a {@link ShardSlot}
 * for every shard of the map in force (its lease, {@link Leadership}, and worker thread), and a
 * {@link ShardKeeper} that follows the map's changes and keeps this replica's share of the shards
 * ({@link ShardShare}). With one shard, which is what a database has until an operator sets more,
 * the service is what it was before shards: one lease, one worker.
 *
 * <p>Graceful stop ({@link #close()}): every worker stops starting work and finishes what is in
 * flight; then, and only then, each lease is released conditionally, whose trigger notifies
 * followers so one takes over at once. A lease whose worker does not finish in time is not
 * released; with the fast path a follower takes over as the lease session closes, else at expiry.
 */
public final class LeaderService implements AutoCloseable {

    /** The channel on which a lease release is announced; the payload is the role. */
    public static final String LEASE_RELEASED = "lease_released";

    private static final Logger log = LoggerFactory.getLogger(LeaderService.class);

    /** The service's own work for one shard, run on a thread of its own. */
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

    /**
     * What a worker is built from.
     *
     * @param shard the shard whose work it does; shard 0 also does the service's housekeeping
     *     (retention, schedules)
     */
    public record Parts(
            DSLContext dsl,
            Lease lease,
            Leadership leadership,
            MeterRegistry registry,
            Ticker ticker,
            Tracing tracing,
            int shard) {}

    /**
     * How a service is put together; the decorators let tests pause or break its lease and work.
     *
     * @param role the role's name, which is shard 0's lease; shard n's is {@code role/n}
     * @param config its database (when {@code embedding} lends none, the pool's; else what the lent
     *     pool's sessions are, {@link dev.fencedjobs.db.DatabaseConfig#ofSessions}), ops port, stop and migrations
     * @param finishesDrains whether the holder of shard 0 puts a new shard count in force once the
     *     map has drained ({@code shards_switch}): the dispatcher's
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
            UnaryOperator<LeaseOps> leaseOps,
            boolean finishesDrains) {}

    private final Spec spec;
    private final ServiceRuntime runtime;
    private final ShardKeeper keeper;
    private final PgListener listener;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final CountDownLatch terminated = new CountDownLatch(1);

    private LeaderService(Spec spec, Function<Parts, Worker> workerFactory) {
        this.spec = spec;
        this.runtime = ServiceRuntime.open(
                spec.service(), spec.config(), spec.embedding(), Database.MIGRATIONS, Database.HISTORY_TABLE);
        log.info("{} {} starting: database {}", spec.service(), spec.holderId(), runtime.describeDatabase());
        try {
            this.keeper = new ShardKeeper(spec, runtime, workerFactory);
            List<String> channels = new ArrayList<>(spec.channels());
            channels.add(LEASE_RELEASED);
            channels.add(Shards.CHANGED);
            // A release notification sent while the listener was away is lost: a follower that waits
            // for the holder's expiry tries once now instead.
            this.listener = runtime.listener(channels, this::onNotification, () -> {
                for (ShardSlot slot : keeper.slots()) {
                    slot.worker.onListenerConnected();
                    slot.leadership.attemptNow();
                }
                keeper.wake();
            });
            runtime.serve(this::ready, this::status, null);
        } catch (RuntimeException e) {
            runtime.close();
            throw e;
        }
    }

    public static LeaderService start(Spec spec, Function<Parts, Worker> workerFactory) {
        LeaderService s = new LeaderService(spec, workerFactory);
        s.keeper.start();
        s.listener.start();
        return s;
    }

    private void onNotification(String channel, String payload) {
        if (LEASE_RELEASED.equals(channel)) {
            ShardSlot slot = keeper.slot(payload);
            if (slot != null) {
                slot.leadership.attemptNow();
            }
        } else if (Shards.CHANGED.equals(channel)) {
            keeper.wake();
        } else {
            for (ShardSlot slot : keeper.slots()) {
                slot.worker.onNotification(channel, payload);
            }
        }
    }

    public boolean ready() {
        ShardSlot zero = keeper.first();
        return zero.leadership.databaseReachable() && zero.worker.ready() && !closed.get();
    }

    /** Shard 0's leadership: the role's lease as it was before shards. */
    public Leadership leadership() {
        return keeper.first().leadership;
    }

    /** Whether this replica holds the lease of any shard. */
    public boolean leadingAny() {
        return keeper.slots().stream().anyMatch(ShardSlot::leading);
    }

    /** The ops endpoint's port, or -1 when the embedding turned it off. */
    public int httpPort() {
        return runtime.httpPort();
    }

    /**
     * The status JSON: shard 0's lease and work at the top, as before shards, and under {@code
     * shards} each shard's lease as this replica sees it, with the map and this replica's share.
     */
    public Map<String, Object> status() {
        ShardSlot zero = keeper.first();
        Map<String, Object> status = new LinkedHashMap<>();
        status.put("service", spec.service());
        status.put("role", zero.leadership.role());
        status.put("holder", zero.leadership.holderId());
        status.put("ready", ready());
        status.putAll(zero.leaseStatus());
        // Whether the LISTEN connection is up (after a database failover: on the new primary).
        status.put("listening", listener.connected());
        status.putAll(zero.worker.status());
        status.put("shards", keeper.status());
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
        keeper.close(timeout);
        listener.close();
        runtime.close();
        log.info("{} {} stopped", spec.service(), spec.holderId());
        terminated.countDown();
    }
}
