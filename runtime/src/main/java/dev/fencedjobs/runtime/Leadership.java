package dev.fencedjobs.runtime;

import dev.fencedjobs.db.Grant;
import dev.fencedjobs.db.LeaseConfig;
import dev.fencedjobs.db.Ticker;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Holds or seeks one role's lease on a schedule of its own, so renewal is never delayed by the
 * work the lease protects.
 *
 * <p>States: FOLLOWER → LEADER (an acquisition returned a token) → FOLLOWER (a renewal returned
 * nothing or failed, or the worker's guard rejected the token) → … → STOPPED. Each transition is
 * logged once at INFO with holder and token.
 *
 * <p>{@link #current()} hands out the grant only while the local deadline (the reading taken
 * before the renewal was sent, plus the lease, minus a safety margin) has not passed: a leader
 * whose renewals stall stops starting work on its own. That is scheduling only; the in-transaction
 * guard is what protects data.
 */
public final class Leadership implements Grants, AutoCloseable {

    /** The two lease operations leadership needs; {@link dev.fencedjobs.db.Lease} provides them. */
    public interface LeaseOps {
        Optional<Grant> acquireOrRenew();

        boolean release(long token);

        /**
         * How long the current holder's lease has left, in database time; empty when there is no
         * live lease or it is not known. A follower sleeps that long instead of asking every
         * renewal interval, and so takes over the moment a killed leader's lease expires.
         */
        default Optional<Duration> remaining() {
            return Optional.empty();
        }
    }

    public enum State { FOLLOWER, LEADER, STOPPED }

    private static final Logger log = LoggerFactory.getLogger(Leadership.class);
    /** An attempt at the holder's expiry comes this much after it, so the expiry has passed in database time. */
    private static final long EXPIRY_SLACK_NANOS = TimeUnit.MILLISECONDS.toNanos(5);

    private final String role;
    private final String holderId;
    private final LeaseOps lease;
    private final LeaseConfig config;
    private final long safetyMarginNanos;
    private final Ticker ticker;
    private final ScheduledThreadPoolExecutor renewer;
    private final List<Runnable> listeners = new CopyOnWriteArrayList<>();
    private final AtomicReference<Grant> grant = new AtomicReference<>();
    private volatile State state = State.FOLLOWER;
    private volatile boolean databaseReachable;
    private volatile long lastToken;
    /** A follower makes no periodic attempt before this (ticker nanos): the holder's lease is live until then. */
    private volatile long notBeforeNanos;
    private volatile boolean waitingForExpiry;
    /** The one attempt scheduled at the holder's expiry; touched only by the thread running attempts. */
    private ScheduledFuture<?> atExpiry;

    private final Counter takeovers;
    private final Counter renewals;
    private final Counter renewalFailures;
    private final Timer renewalLatency;

    public Leadership(String role, String holderId, LeaseOps lease, LeaseConfig config, Duration safetyMargin,
            Ticker ticker, MeterRegistry registry) {
        this.role = role;
        this.holderId = holderId;
        this.lease = lease;
        this.config = config;
        this.safetyMarginNanos = safetyMargin.toNanos();
        this.ticker = ticker;
        ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "lease-" + role);
            t.setDaemon(true);
            return t;
        });
        // On stop, a pending attempt at another holder's expiry is dropped, not waited for.
        executor.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
        executor.setRemoveOnCancelPolicy(true);
        this.renewer = executor;
        Gauge.builder("fencedjobs_leader", () -> state == State.LEADER ? 1 : 0).tag("role", role)
                .description("1 while this replica holds the role's lease").register(registry);
        Gauge.builder("fencedjobs_lease_token", () -> lastToken).tag("role", role)
                .description("fencing token of the last grant this replica received").register(registry);
        takeovers = Counter.builder("fencedjobs_lease_takeovers").tag("role", role)
                .description("times this replica became leader").register(registry);
        renewals = Counter.builder("fencedjobs_lease_renewals").tag("role", role)
                .description("successful acquisitions and renewals").register(registry);
        renewalFailures = Counter.builder("fencedjobs_lease_renewal_failures").tag("role", role)
                .description("acquisition or renewal statements that failed with an error").register(registry);
        renewalLatency = Timer.builder("fencedjobs_lease_renewal").tag("role", role)
                .description("latency of the acquire-or-renew statement").register(registry);
    }

    public void start() {
        log.info("Lease {}: holder {} starts as follower (lease {}, renew every {})", role, holderId, config.duration(), config.renewInterval());
        renewer.scheduleWithFixedDelay(this::attempt, 0, config.renewInterval().toNanos(), TimeUnit.NANOSECONDS);
    }

    /** Runs an acquisition attempt now, for example when a release notification arrives. */
    public void attemptNow() {
        if (state == State.FOLLOWER) {
            try {
                renewer.execute(() -> attempt(true));
            } catch (java.util.concurrent.RejectedExecutionException stopped) {
                // Shutting down.
            }
        }
    }

    /** Called on every transition, and when a renewal lifts a lapsed local deadline. */
    @Override
    public void onChange(Runnable listener) {
        listeners.add(listener);
    }

    /** The grant to work under, if leader and within the local deadline. */
    @Override
    public Optional<Grant> current() {
        Grant g = grant.get();
        if (g == null || state != State.LEADER || ticker.nanoTime() - (g.localDeadlineNanos() - safetyMarginNanos) >= 0) {
            return Optional.empty();
        }
        return Optional.of(g);
    }

    public Optional<Grant> lastGrant() {
        return Optional.ofNullable(grant.get());
    }

    public State state() {
        return state;
    }

    /** Times this replica went from follower to leader. */
    public long acquisitions() {
        return (long) takeovers.count();
    }

    public boolean databaseReachable() {
        return databaseReachable;
    }

    public String role() {
        return role;
    }

    public String holderId() {
        return holderId;
    }

    /** The worker saw that the grant no longer holds (guard rejected, or its transaction failed). */
    @Override
    public void stepDown(Grant stale, String reason) {
        if (grant.compareAndSet(stale, null)) {
            transition(State.FOLLOWER, stale.token(), reason);
        }
    }

    void attempt() {
        attempt(false);
    }

    /**
     * One acquire-or-renew. A follower that knows when the holder's lease expires skips the
     * periodic attempts before then (no statement at all) unless {@code force}d: by a release
     * notification, or by the attempt scheduled at that expiry.
     */
    void attempt(boolean force) {
        if (state == State.STOPPED) {
            return;
        }
        if (!force && waitingForExpiry && grant.get() == null && ticker.nanoTime() - notBeforeNanos < 0) {
            return;
        }
        waitingForExpiry = false;
        long started = ticker.nanoTime();
        Grant previous = grant.get();
        boolean lapsed = previous != null && current().isEmpty();
        try {
            Optional<Grant> result = lease.acquireOrRenew();
            renewalLatency.record(ticker.nanoTime() - started, TimeUnit.NANOSECONDS);
            databaseReachable = true;
            if (result.isPresent()) {
                Grant g = result.get();
                renewals.increment();
                lastToken = g.token();
                Grant before = grant.getAndSet(g);
                if (state == State.STOPPED) {
                    return;
                }
                if (before == null || before.token() != g.token() || state != State.LEADER) {
                    takeovers.increment();
                    transition(State.LEADER, g.token(), "acquired the lease, expires " + g.expiresAt() + " (database time)");
                } else if (lapsed) {
                    notifyListeners();
                }
            } else {
                if (previous != null) {
                    stepDown(previous, "another holder has the lease");
                }
                attemptAtExpiry();
            }
        } catch (RuntimeException e) {
            renewalFailures.increment();
            if (databaseReachable || previous != null) {
                log.warn("Lease {}: acquire-or-renew failed: {}", role, Faults.describe(e));
            } else {
                log.debug("Lease {}: acquire-or-renew failed again: {}", role, Faults.describe(e));
            }
            databaseReachable = false;
            if (previous != null) {
                stepDown(previous, "renewal failed (" + e.getClass().getSimpleName() + ")");
            }
        }
    }

    /**
     * Schedules the next attempt for the moment the holder's lease expires (database time, read
     * after this failed attempt), at most one lease duration away. Scheduling only: a lease that
     * was renewed meanwhile makes that attempt fail like any other, and the wait starts over.
     */
    private void attemptAtExpiry() {
        if (atExpiry != null) {
            atExpiry.cancel(false);
            atExpiry = null;
        }
        Optional<Duration> remaining;
        try {
            remaining = lease.remaining();
        } catch (RuntimeException e) {
            log.debug("Lease {}: reading the holder's expiry failed: {}", role, Faults.describe(e));
            return;
        }
        if (remaining.isEmpty() || state == State.STOPPED) {
            return;
        }
        long delay = Math.min(remaining.get().toNanos(), config.duration().toNanos()) + EXPIRY_SLACK_NANOS;
        notBeforeNanos = ticker.nanoTime() + delay;
        waitingForExpiry = true;
        try {
            atExpiry = renewer.schedule(() -> attempt(true), delay, TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException stopped) {
            waitingForExpiry = false;
        }
    }

    private void transition(State to, long token, String reason) {
        State from = state;
        if (from == State.STOPPED) {
            return;
        }
        state = to;
        log.info("Lease {}: {} -> {} (holder {}, token {}): {}", role, from, to, holderId, token, reason);
        notifyListeners();
    }

    private void notifyListeners() {
        for (Runnable listener : listeners) {
            listener.run();
        }
    }

    /**
     * Stops renewing and, if still leader, releases the lease so a follower takes over at once.
     * Call only once the protected work has stopped. The release is conditional: a lease that
     * already moved to a newer holder is not touched.
     */
    public void stopAndRelease() {
        stopRenewing();
        Grant g = grant.getAndSet(null);
        State before = state;
        state = State.STOPPED;
        if (g != null && before == State.LEADER) {
            try {
                boolean released = lease.release(g.token());
                log.info("Lease {}: LEADER -> STOPPED (holder {}, token {}): {}", role, holderId, g.token(),
                        released ? "released the lease" : "lease had already expired or moved on; nothing to release");
            } catch (RuntimeException e) {
                log.warn("Lease {}: release of token {} failed, the lease will expire on its own: {}", role, g.token(), Faults.describe(e));
            }
        } else {
            log.info("Lease {}: {} -> STOPPED (holder {})", role, before, holderId);
        }
    }

    private void stopRenewing() {
        renewer.shutdown();
        try {
            if (!renewer.awaitTermination(config.duration().toMillis(), TimeUnit.MILLISECONDS)) {
                renewer.shutdownNow();
            }
        } catch (InterruptedException e) {
            renewer.shutdownNow();
            Thread.currentThread().interrupt();
        }
    }

    /** Stops without releasing: the lease runs out on its own. */
    @Override
    public void close() {
        stopRenewing();
        state = State.STOPPED;
        grant.set(null);
    }
}
