package dev.fencedjobs.runtime;

import dev.fencedjobs.db.Grant;
import dev.fencedjobs.db.Lease;
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
 * <p>Fast path ({@link SessionWatch}, unless turned off): while another replica holds the lease and
 * shows a sign of life, a watcher thread waits for that holder's session to end, and this replica
 * then takes over at once ({@link LeaseOps#takeOver}) instead of at the lease's expiry.
 *
 * <p>{@link #current()} hands out the grant only while the local deadline (the reading taken
 * before the renewal was sent, plus the lease, minus a safety margin) has not passed: a leader
 * whose renewals stall stops starting work on its own. That is scheduling only; the in-transaction
 * guard is what protects data.
 */
public final class Leadership implements Grants, AutoCloseable {

    /**
     * The lease operations leadership needs; {@link dev.fencedjobs.db.LeaseSession} (with the fast
     * path) or {@link dev.fencedjobs.db.Lease} provides them.
     */
    public interface LeaseOps {
        Optional<Grant> acquireOrRenew();

        boolean release(long token);

        /**
         * The current holder as a follower sees it; empty when not known. A follower sleeps until
         * its lease expires instead of asking every renewal interval, and so takes over the moment
         * a killed leader's lease expires; with the fast path it also waits for the holder's
         * session to end, when the holder shows a sign of life.
         */
        default Optional<Lease.Holder> holder() {
            return Optional.empty();
        }

        /** Takes over from {@code token}, whose holder's session ended; empty when the token moved on. */
        default Optional<Grant> takeOver(long token) {
            return Optional.empty();
        }
    }

    /**
     * The fast path's wait for the end of a holder's session; {@link dev.fencedjobs.db.HolderWatch}
     * provides it.
     */
    public interface SessionWatch extends AutoCloseable {
        /** True once the sign of life of {@code token} is let go by every session (this one holds it then); false when {@code upTo} ran out. */
        boolean await(long token, Duration upTo);

        void unlock(long token);

        /** Ends a wait in progress, from another thread. */
        void interrupt();

        @Override
        void close();
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

    private static final long NO_TOKEN = Long.MIN_VALUE;
    /** Null when the fast path is off. */
    private final SessionWatch watch;
    private final Thread watcher;
    private final Object watchLock = new Object();
    /** The token whose holder's session the watcher waits for; guarded by watchLock. */
    private long watchTarget = NO_TOKEN;
    /** The token of the wait in progress; guarded by watchLock. */
    private long waitingFor = NO_TOKEN;
    private volatile boolean stopping;
    private final java.util.concurrent.atomic.AtomicBoolean lookAgainPending = new java.util.concurrent.atomic.AtomicBoolean();

    private final Counter takeovers;
    private final Counter renewals;
    private final Counter renewalFailures;
    private final Counter fastTakeovers;
    private final Timer renewalLatency;

    /** Without the fast path: a follower takes over only at the holder's expiry or release. */
    public Leadership(String role, String holderId, LeaseOps lease, LeaseConfig config, Duration safetyMargin,
            Ticker ticker, MeterRegistry registry) {
        this(role, holderId, lease, null, config, safetyMargin, ticker, registry);
    }

    /** With the fast path when {@code watch} is not null. */
    public Leadership(String role, String holderId, LeaseOps lease, SessionWatch watch, LeaseConfig config, Duration safetyMargin,
            Ticker ticker, MeterRegistry registry) {
        this.role = role;
        this.watch = watch;
        if (watch != null) {
            this.watcher = new Thread(this::watchLoop, "lease-" + role + "-watch");
            watcher.setDaemon(true);
        } else {
            this.watcher = null;
        }
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
        fastTakeovers = Counter.builder("fencedjobs_lease_fast_takeovers").tag("role", role)
                .description("takeovers at once from a holder whose session ended (the fast path), before its lease expired").register(registry);
        renewalLatency = Timer.builder("fencedjobs_lease_renewal").tag("role", role)
                .description("latency of the acquire-or-renew statement").register(registry);
    }

    public void start() {
        log.info("Lease {}: holder {} starts as follower (lease {}, renew every {})", role, holderId, config.duration(), config.renewInterval());
        if (watcher != null) {
            watcher.start();
        }
        renewer.scheduleWithFixedDelay(this::attempt, 0, config.renewInterval().toNanos(), TimeUnit.NANOSECONDS);
    }

    /** Whether this replica waits for a holder's session to end (the fast path is on). */
    public boolean fastTakeover() {
        return watch != null;
    }

    /** The token whose holder's session the watcher waits for, if any. */
    java.util.OptionalLong watchTarget() {
        synchronized (watchLock) {
            return watchTarget == NO_TOKEN ? java.util.OptionalLong.empty() : java.util.OptionalLong.of(watchTarget);
        }
    }

    /** Times this replica took over at once from a holder whose session ended. */
    public long fastTakeoverCount() {
        return (long) fastTakeovers.count();
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
                granted(result.get(), lapsed, "acquired the lease");
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

    private void granted(Grant g, boolean lapsed, String how) {
        renewals.increment();
        lastToken = g.token();
        Grant before = grant.getAndSet(g);
        if (state == State.STOPPED) {
            return;
        }
        if (before == null || before.token() != g.token() || state != State.LEADER) {
            takeovers.increment();
            transition(State.LEADER, g.token(), how + ", expires " + g.expiresAt() + " (database time)");
        } else if (lapsed) {
            notifyListeners();
        }
        // Waits for no one now. A wait in progress is left to end by itself (granted, or at the end
        // of its chunk), not cut: cutting closes its connection, and on this two-core machine that
        // cost the new leader's first job 30 ms at the median (measured in-process, SIGTERM handoff).
        synchronized (watchLock) {
            watchTarget = NO_TOKEN;
        }
    }

    /**
     * The fast path, on the lease thread: the watcher got the sign of life of {@code token}, so its
     * holder's session has ended; take over now. When the token has moved on meanwhile, an ordinary
     * attempt finds out what holds now.
     */
    void takeOverFrom(long token) {
        if (state != State.FOLLOWER || grant.get() != null) {
            return;
        }
        long started = ticker.nanoTime();
        try {
            Optional<Grant> result = lease.takeOver(token);
            renewalLatency.record(ticker.nanoTime() - started, TimeUnit.NANOSECONDS);
            databaseReachable = true;
            if (result.isPresent()) {
                fastTakeovers.increment();
                granted(result.get(), false, "took over from token " + token + ", whose holder's session ended, before its lease expired");
            } else {
                attempt(true);
            }
        } catch (RuntimeException e) {
            renewalFailures.increment();
            log.warn("Lease {}: taking over from token {} failed: {}", role, token, Faults.describe(e));
        }
    }

    /**
     * Schedules the next attempt for the moment the holder's lease expires (database time, read
     * after this failed attempt), at most one lease duration away. Scheduling only: a lease that
     * was renewed meanwhile makes that attempt fail like any other, and the wait starts over. With
     * the fast path, also has the watcher wait for the holder's session to end, once the holder
     * shows a sign of life.
     */
    private void attemptAtExpiry() {
        if (atExpiry != null) {
            atExpiry.cancel(false);
            atExpiry = null;
        }
        Optional<Lease.Holder> holder;
        try {
            holder = lease.holder();
        } catch (RuntimeException e) {
            log.debug("Lease {}: reading the holder's expiry failed: {}", role, Faults.describe(e));
            return;
        }
        if (holder.isEmpty() || state == State.STOPPED) {
            return;
        }
        Lease.Holder h = holder.get();
        if (watch != null && !h.holderId().equals(holderId)) {
            if (h.signOfLife()) {
                watchFor(h.token());
            } else {
                synchronized (watchLock) {
                    // A wait for this token that began when its lock was seen held still proves what it proves.
                    if (watchTarget != h.token()) {
                        unwatch();
                    }
                }
            }
        }
        if (h.remaining().isZero()) {
            return;
        }
        long delay = Math.min(h.remaining().toNanos(), config.duration().toNanos()) + EXPIRY_SLACK_NANOS;
        notBeforeNanos = ticker.nanoTime() + delay;
        waitingForExpiry = true;
        try {
            atExpiry = renewer.schedule(() -> attempt(true), delay, TimeUnit.NANOSECONDS);
        } catch (java.util.concurrent.RejectedExecutionException stopped) {
            waitingForExpiry = false;
        }
    }

    /**
     * After a wait failed (its connection was lost: a database restart ends every session, the
     * holder's too), looks at the holder again every renewal interval until it shows a sign of life
     * on its new session, or its lease is within an interval of expiring (the attempt at expiry
     * looks then anyway). One read per interval, only in that window.
     */
    private void lookAgainSoon() {
        if (lookAgainPending.compareAndSet(false, true)) {
            try {
                renewer.schedule(this::lookAgain, config.renewInterval().toNanos(), TimeUnit.NANOSECONDS);
            } catch (java.util.concurrent.RejectedExecutionException stopped) {
                lookAgainPending.set(false);
            }
        }
    }

    private void lookAgain() {
        lookAgainPending.set(false);
        if (state != State.FOLLOWER || grant.get() != null || watchTarget().isPresent()) {
            return;
        }
        try {
            Optional<Lease.Holder> holder = lease.holder();
            if (holder.isEmpty() || holder.get().holderId().equals(holderId)) {
                return;
            }
            if (holder.get().signOfLife()) {
                watchFor(holder.get().token());
            } else if (holder.get().remaining().compareTo(config.renewInterval()) > 0) {
                lookAgainSoon();
            }
        } catch (RuntimeException e) {
            log.debug("Lease {}: looking at the holder again failed: {}", role, Faults.describe(e));
            lookAgainSoon();
        }
    }

    /** Has the watcher wait for the end of the session that holds {@code token}'s sign of life. */
    private void watchFor(long token) {
        boolean stale;
        synchronized (watchLock) {
            if (watchTarget == token) {
                return;
            }
            watchTarget = token;
            stale = waitingFor != NO_TOKEN && waitingFor != token;
            watchLock.notifyAll();
        }
        if (stale) {
            watch.interrupt();
        }
    }

    /** Stops waiting (this replica leads, or the token moved on with no sign of life to wait for). */
    private void unwatch() {
        if (watch == null) {
            return;
        }
        boolean waiting;
        synchronized (watchLock) {
            watchTarget = NO_TOKEN;
            waiting = waitingFor != NO_TOKEN;
        }
        if (waiting) {
            watch.interrupt();
        }
    }

    /**
     * The watcher thread: waits, one lease duration at a time (a running statement holds back
     * vacuum), for the session holding the target token's sign of life to end, then hands the
     * takeover to the lease thread and lets the lock go.
     */
    private void watchLoop() {
        while (!stopping) {
            long token;
            synchronized (watchLock) {
                while (watchTarget == NO_TOKEN && !stopping) {
                    try {
                        watchLock.wait();
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                if (stopping) {
                    return;
                }
                token = watchTarget;
                waitingFor = token;
            }
            boolean gone;
            try {
                gone = watch.await(token, config.duration());
            } catch (RuntimeException e) {
                synchronized (watchLock) {
                    waitingFor = NO_TOKEN;
                    if (watchTarget == token) {
                        // No proof any more: the next look at the holder starts a new wait if it shows a sign of life.
                        watchTarget = NO_TOKEN;
                    }
                }
                if (!stopping) {
                    log.debug("Lease {}: waiting for the session of token {} to end failed: {}", role, token, Faults.describe(e));
                    lookAgainSoon();
                }
                continue;
            }
            boolean current;
            synchronized (watchLock) {
                waitingFor = NO_TOKEN;
                current = gone && watchTarget == token;
                if (current) {
                    watchTarget = NO_TOKEN;
                }
            }
            if (gone) {
                if (current) {
                    log.info("Lease {}: the session holding token {}'s sign of life ended; taking over", role, token);
                    try {
                        renewer.submit(() -> takeOverFrom(token)).get();
                    } catch (java.util.concurrent.RejectedExecutionException | java.util.concurrent.ExecutionException e) {
                        log.debug("Lease {}: takeover from token {} not run: {}", role, token, e.toString());
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                try {
                    watch.unlock(token);
                } catch (RuntimeException e) {
                    log.debug("Lease {}: letting go of token {}'s lock failed: {}", role, token, Faults.describe(e));
                }
            }
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
        closeWatch();
    }

    /** Closes the watch's session; on a stop after the release, which a follower waits for first. */
    private void closeWatch() {
        if (watch != null) {
            watch.close();
        }
    }

    private void stopRenewing() {
        stopping = true;
        if (watch != null) {
            synchronized (watchLock) {
                watchTarget = NO_TOKEN;
                watchLock.notifyAll();
            }
            watch.interrupt(); // ends a wait in progress; one about to begin ends at once
        }
        renewer.shutdown();
        try {
            if (!renewer.awaitTermination(config.duration().toMillis(), TimeUnit.MILLISECONDS)) {
                renewer.shutdownNow();
            }
        } catch (InterruptedException e) {
            renewer.shutdownNow();
            Thread.currentThread().interrupt();
        }
        if (watcher != null) {
            try {
                watcher.join(config.duration().toMillis());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Stops without releasing: the lease runs out on its own. */
    @Override
    public void close() {
        stopRenewing();
        state = State.STOPPED;
        grant.set(null);
        closeWatch();
    }
}
