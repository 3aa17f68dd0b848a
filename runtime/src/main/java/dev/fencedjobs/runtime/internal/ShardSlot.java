package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.internal.Shards;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.HolderWatch;
import dev.fencedjobs.lease.Leadership;
import dev.fencedjobs.lease.Lease;
import dev.fencedjobs.lease.LeaseOps;
import dev.fencedjobs.lease.LeaseSession;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.BooleanSupplier;
import java.util.function.Function;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One shard of a leased service in one replica (docs/shards.md): the shard's lease ({@code
 * scheduler/3}, or the role's own name for shard 0), its {@link Leadership} and the worker that
 * does the shard's work while this replica holds it, on a thread of its own.
 *
 * <p>With the fast path, the lease's statements go over a {@link LeaseSession} of the slot's own,
 * which holds the sign of life, and a follower waits on a {@link HolderWatch}: two long-lived
 * connections per shard, opened at the first attempt.
 */
final class ShardSlot {

    private static final Logger log = LoggerFactory.getLogger(ShardSlot.class);

    final int shard;
    final String role;
    final Leadership leadership;
    final LeaderService.Worker worker;
    private final LeaseSession leaseSession;
    private final HolderWatch holderWatch;
    private final Thread thread;
    /** How long a shard this replica gave up is left to others: two renewal intervals. */
    private final long cooldownNanos;

    private final Ticker ticker;
    private final MeterRegistry registry;
    /** The ticker's reading at the last {@link #giveUp}; a cooldown in the past before any. */
    private volatile long gaveUpAt;

    ShardSlot(
            LeaderService.Spec spec,
            int shard,
            ServiceRuntime runtime,
            BooleanSupplier mayAcquire,
            Function<LeaderService.Parts, LeaderService.Worker> workerFactory) {
        this.shard = shard;
        this.role = Shards.role(spec.role(), shard);
        Lease lease =
                new Lease(runtime.dsl(), role, spec.holderId(), spec.lease().duration(), spec.ticker());
        LeaseOps ops;
        if (spec.lease().fastTakeover()) {
            String suffix = shard == 0 ? "" : "-" + shard;
            leaseSession = new LeaseSession(lease, runtime.sessions("lease" + suffix));
            holderWatch = new HolderWatch(role, runtime.sessions("watch" + suffix));
            ops = leaseSession;
        } else {
            leaseSession = null;
            holderWatch = null;
            ops = lease;
        }
        this.leadership = new Leadership(
                role,
                spec.holderId(),
                spec.leaseOps().apply(ops),
                holderWatch,
                spec.lease(),
                spec.safetyMargin(),
                spec.ticker(),
                runtime.registry());
        this.cooldownNanos = spec.lease().renewInterval().multipliedBy(2).toNanos();
        this.ticker = spec.ticker();
        this.registry = runtime.registry();
        this.gaveUpAt = ticker.nanoTime() - cooldownNanos;
        // Not the shard it just gave up: its release's notification reaches this replica too.
        leadership.gate(() -> mayAcquire.getAsBoolean() && ticker.nanoTime() - gaveUpAt >= cooldownNanos);
        this.worker = workerFactory.apply(new LeaderService.Parts(
                runtime.dsl(),
                lease,
                leadership,
                runtime.registry(),
                spec.ticker(),
                spec.embedding().tracing(),
                shard));
        this.thread = new Thread(worker, spec.service() + "-worker" + (shard == 0 ? "" : "-" + shard));
    }

    void start() {
        thread.start();
        leadership.start();
    }

    boolean leading() {
        return leadership.state() == Leadership.State.LEADER;
    }

    /**
     * Gives the shard up to a replica below its share ({@code Leadership#yieldLease}); this replica
     * leaves it to the others for two renewal intervals.
     */
    void giveUp(String reason) {
        gaveUpAt = ticker.nanoTime();
        leadership.yieldLease(reason);
    }

    /** Asks the worker to stop starting work; {@link #finish} waits for it. */
    void stopWork() {
        worker.stop();
    }

    /**
     * Waits up to {@code timeout} for the worker, then releases the lease if it finished (a
     * follower takes over at once), or leaves it to expire if it did not; closes the sessions.
     */
    void finish(Duration timeout) {
        try {
            thread.join(Math.max(1, timeout.toMillis()));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (thread.isAlive()) {
            log.warn(
                    "Lease {}: work in flight did not finish within {}; not releasing the lease: a follower takes over when this "
                            + "replica's lease session ends, or at expiry (the work in flight writes nothing once it has)",
                    role,
                    timeout);
            leadership.close();
        } else {
            leadership.stopAndRelease();
        }
        if (holderWatch != null) {
            holderWatch.close();
        }
        if (leaseSession != null) {
            // Ends the session, and with it the sign of life: a waiting follower takes over now.
            leaseSession.close();
        }
        removeMeters();
    }

    /**
     * Takes the slot's meters out of the registry: its lease's (tagged with its role) and its
     * worker's (tagged with its shard). Micrometer keeps the first meter registered under a name and
     * tags, so a shard that left the map and came back would otherwise show the stopped slot's gauges
     * ({@code fencedjobs_leader} 0 while this replica holds the shard). Shard 0 never leaves the map.
     */
    private void removeMeters() {
        if (shard == 0) {
            return;
        }
        String tag = Integer.toString(shard);
        for (Meter m : List.copyOf(registry.getMeters())) {
            if (role.equals(m.getId().getTag("role")) || tag.equals(m.getId().getTag("shard"))) {
                registry.remove(m);
            }
        }
    }

    /** The slot's entries in the status JSON: the shard's lease as this replica sees it. */
    Map<String, Object> leaseStatus() {
        Map<String, Object> status = new LinkedHashMap<>();
        status.put("state", leadership.state().name());
        status.put("acquisitions", leadership.acquisitions());
        status.put("fastTakeover", leadership.fastTakeover());
        status.put("fastTakeovers", leadership.fastTakeoverCount());
        leadership.watchTarget().ifPresent(token -> status.put("watching", token.value()));
        if (leaseSession != null) {
            leaseSession.signOfLife().ifPresent(token -> status.put("signOfLife", token.value()));
        }
        leadership.lastGrant().ifPresent(g -> {
            status.put("token", g.token().value());
            status.put("leaseExpiresAt", g.expiresAt().toString());
        });
        return status;
    }
}
