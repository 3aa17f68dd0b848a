package dev.fencedjobs.lease;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.internal.Faults;
import dev.fencedjobs.runtime.internal.Next;
import dev.fencedjobs.runtime.internal.Wakeup;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Holds or seeks one role's lease on a thread of its own, so renewal is never delayed by the work
 * the lease protects.
 *
 * <p>The state machine is {@link #step()}, run by {@link Next#drive} like the work loops: every
 * decision is taken on that one thread, and a test calls {@code step()} itself on a settable clock.
 * Other threads only post to it: a release notification ({@link #attemptNow()}), the worker's
 * {@link #stepDown}, and the watcher's answers.
 *
 * <p>States: FOLLOWER → LEADER (an acquisition returned a token) → FOLLOWER (a renewal returned
 * nothing or failed, or the worker's guard rejected the token) → … → STOPPED. Each transition is
 * logged once at INFO with holder and token.
 *
 * <p>Fast path ({@link SessionWatch}, unless turned off): while another replica holds the lease and
 * shows a sign of life, the watcher, a plain blocking worker on a thread of its own, waits for that
 * holder's session to end and says so; this replica then takes over at once ({@link
 * LeaseOps#takeOver}) instead of at the lease's expiry. The watcher decides nothing: it runs one
 * command at a time (wait for a token, let a token's lock go) and posts each wait's outcome back.
 *
 * <p>{@link #current()} hands out the grant only while the local deadline (the reading taken
 * before the renewal was sent, plus the lease, minus a safety margin) has not passed: a leader
 * whose renewals stall stops starting work on its own. That is scheduling only; the in-transaction
 * guard is what protects data.
 */
public final class Leadership implements Grants, AutoCloseable {

    public enum State {
        FOLLOWER,
        LEADER,
        STOPPED
    }

    /** What other threads post to the lease thread. */
    sealed interface Event permits AttemptNow, FastPath.WaitEnded, SteppedDown, Yield {}

    private record AttemptNow() implements Event {}

    private record Yield(String reason) implements Event {}

    private record SteppedDown(Grant stale, String reason) implements Event {}

    private static final Logger log = LoggerFactory.getLogger(Leadership.class);

    private final String role;
    private final String holderId;
    private final LeaseOps lease;
    private final LeaseConfig config;
    private final long safetyMarginNanos;
    private final Ticker ticker;
    /** The fast path's decisions; null when it is off. */
    private final FastPath fastPath;

    private final LeaseThreads threads;
    private final Transitions transitions;
    private final Queue<Event> events = new ConcurrentLinkedQueue<>();
    private final Wakeup wakeup = new Wakeup();

    // Read from any thread; written on the lease thread, except that stepDown clears the grant.
    private final AtomicReference<Grant> grant = new AtomicReference<>();
    private volatile boolean stopped;
    private volatile boolean databaseReachable;
    /**
     * Whether a follower may take the lease while it is held or offered: with shards, whether this
     * replica holds fewer than its share ({@link #gate}). A lease whose holder died or expired is
     * taken whatever it says, so that no shard is left without a holder.
     */
    private volatile BooleanSupplier mayAcquire = () -> true;
    /** The token of the last grant; null before the first. */
    private volatile FencingToken lastToken;

    // Confined to the lease thread (before start and after the threads end: to the caller).
    private final AttemptTimes times;
    private boolean attemptRequested;

    private final LeaseMeters meters;

    /** Without the fast path: a follower takes over only at the holder's expiry or release. */
    public Leadership(
            String role,
            String holderId,
            LeaseOps lease,
            LeaseConfig config,
            Duration safetyMargin,
            Ticker ticker,
            MeterRegistry registry) {
        this(role, holderId, lease, null, config, safetyMargin, ticker, registry);
    }

    /** With the fast path when {@code watch} is not null. */
    public Leadership(
            String role,
            String holderId,
            LeaseOps lease,
            SessionWatch watch,
            LeaseConfig config,
            Duration safetyMargin,
            Ticker ticker,
            MeterRegistry registry) {
        this.role = role;
        this.holderId = holderId;
        this.lease = lease;
        Watcher watcher =
                watch == null ? null : new Watcher(role, watch, watchWait(config.duration()), this::waitEnded);
        this.threads = new LeaseThreads(role, watcher, watch, config.duration());
        this.transitions = new Transitions(role, holderId);
        this.fastPath = watch == null
                ? null
                : new FastPath(
                        role, holderId, lease, config, ticker, watcher, () -> grant.get() != null, this::takeOverFrom);
        this.config = config;
        this.safetyMarginNanos = safetyMargin.toNanos();
        this.ticker = ticker;
        this.times = new AttemptTimes(ticker, config);
        this.meters = new LeaseMeters(role, registry, () -> state() == State.LEADER, () -> lastToken);
    }

    /**
     * The longest one wait of the fast path's watcher lasts before it starts again: a running
     * statement holds back vacuum's horizon, and while it does, no scan can mark the dead index
     * entries of jobs completed since as dead. With a wait of a whole lease (10 s), the dispatcher's
     * next-due read stepped over the entries of jobs completed in up to the last 10 s on every call
     * (0.85 ms and 432 buffers a call at 400 jobs/s, 2 shards); with a wait of 1 s, 0.07 ms and 4
     * buffers. A new wait is one statement a second for each lease a replica follows.
     */
    static final Duration WATCH_WAIT = Duration.ofSeconds(1);

    /** One wait of the watcher: {@link #WATCH_WAIT}, or the lease if shorter. */
    static Duration watchWait(Duration lease) {
        return lease.compareTo(WATCH_WAIT) < 0 ? lease : WATCH_WAIT;
    }

    /** Starts the lease thread, and the watcher with the fast path on. */
    public void start() {
        log.info(
                "Lease {}: holder {} starts as follower (lease {}, renew every {})",
                role,
                holderId,
                config.duration(),
                config.renewInterval());
        threads.start(this::step, wakeup, ticker);
    }

    /** Whether this replica waits for a holder's session to end (the fast path is on). */
    public boolean fastTakeover() {
        return fastPath != null;
    }

    /** The token whose holder's session this replica waits for, if any. */
    public Optional<FencingToken> watchTarget() {
        return fastPath == null ? Optional.empty() : fastPath.watchTarget();
    }

    /** Times this replica took over at once from a holder whose session ended. */
    public long fastTakeoverCount() {
        return (long) meters.fastTakeovers.count();
    }

    /**
     * Sets what decides whether this follower takes a lease that is free or offered by a release
     * ({@link #mayAcquire}); evaluated on the lease thread before each such attempt.
     */
    public void gate(BooleanSupplier mayAcquire) {
        this.mayAcquire = mayAcquire;
    }

    /**
     * Gives the lease up while staying a follower, for a replica that holds more than its share of
     * the shards: the grant stops being handed out at once, then the lease thread releases the
     * lease conditionally, and the release's notification lets a replica below its share take it
     * without waiting for expiry. A batch in flight either committed before the release (which
     * waits for its lock on the lease row) or fails its guard.
     */
    public void yieldLease(String reason) {
        if (state() == State.LEADER) {
            post(new Yield(reason));
        }
    }

    /** Has the lease thread attempt now, for example when a release notification arrives. */
    public void attemptNow() {
        if (state() == State.FOLLOWER) {
            post(new AttemptNow());
        }
    }

    /** Called on every transition, and when a renewal lifts a lapsed local deadline; on the lease thread. */
    @Override
    public void onChange(Runnable listener) {
        transitions.listen(listener);
    }

    /** The grant to work under, if leader and within the local deadline. */
    @Override
    public Optional<Grant> current() {
        Grant g = grant.get();
        if (g == null || stopped || ticker.nanoTime() - (g.localDeadlineNanos() - safetyMarginNanos) >= 0) {
            return Optional.empty();
        }
        return Optional.of(g);
    }

    public Optional<Grant> lastGrant() {
        return Optional.ofNullable(grant.get());
    }

    public State state() {
        return stopped ? State.STOPPED : grant.get() != null ? State.LEADER : State.FOLLOWER;
    }

    /** Times this replica went from follower to leader. */
    public long acquisitions() {
        return (long) meters.takeovers.count();
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

    /**
     * The worker saw that the grant no longer holds (guard rejected, or its transaction failed). The
     * grant stops being handed out at once; the lease thread logs the transition and tells the
     * listeners. A newer grant is not touched.
     */
    @Override
    public void stepDown(Grant stale, String reason) {
        if (grant.compareAndSet(stale, null)) {
            post(new SteppedDown(stale, reason));
        }
    }

    private void post(Event event) {
        events.add(event);
        wakeup.signal();
    }

    /**
     * One turn of the lease thread: takes in what other threads posted, then does what is due (an
     * attempt asked for, the attempt at the holder's expiry, the periodic attempt, another look at
     * the holder), and answers when the next is due.
     */
    Next step() {
        for (Event e; !stopped && (e = events.poll()) != null; ) {
            if (e instanceof AttemptNow) {
                attemptRequested = true;
            } else if (e instanceof Yield y) {
                giveUp(y.reason());
            } else if (e instanceof FastPath.WaitEnded w) {
                fastPath.waitEnded(w);
            } else if (e instanceof SteppedDown s
                    && s.stale().token().equals(transitions.leaderToken())
                    && grant.get() == null) {
                transitions.log(State.FOLLOWER, s.stale().token(), s.reason());
            }
        }
        if (stopped) {
            return Next.stopped();
        }
        if (attemptRequested) {
            attemptRequested = false;
            if (grant.get() == null) {
                attempt(true, true);
            }
        }
        if (times.expiryDue()) {
            // The holder's lease ran out without a release: taken whatever the gate says.
            attempt(true, false);
        }
        if (times.periodicDue()) {
            attempt(false, true);
        }
        long next = times.next();
        if (fastPath != null) {
            fastPath.lookAgainIfDue();
            next = fastPath.nextAt(next);
        }
        return Next.sleepUntil(next);
    }

    /** A periodic attempt, as the lease thread makes one every renewal interval. */
    void attempt() {
        attempt(false, true);
    }

    void attempt(boolean force) {
        attempt(force, true);
    }

    /** The lease thread's answer to {@link #yieldLease}: the grant withdrawn, then the lease released. */
    private void giveUp(String reason) {
        Grant g = grant.getAndSet(null);
        if (g == null) {
            return;
        }
        try {
            boolean released = lease.release(g.token());
            transitions.log(
                    State.FOLLOWER, g.token(), reason + (released ? ", released the lease" : ", lease already gone"));
        } catch (RuntimeException e) {
            transitions.log(State.FOLLOWER, g.token(), reason + ", release failed (it expires on its own)");
            log.warn("Lease {}: release of token {} failed: {}", role, g.token(), Faults.describe(e));
        }
    }

    /**
     * One acquire-or-renew. A follower that knows when the holder's lease expires skips the
     * periodic attempts before then (no statement at all) unless {@code force}d: by a release
     * notification, or by the attempt at that expiry.
     */
    void attempt(boolean force, boolean gated) {
        if (!force && grant.get() == null && times.beforeExpiry()) {
            return;
        }
        long started = ticker.nanoTime();
        // The next periodic attempt is a renewal interval after this one, whatever started it.
        times.attempted(started);
        if (gated && grant.get() == null && !mayAcquire.getAsBoolean()) {
            // Not taking it: only learn who holds it and until when, to watch its sign of life. A
            // lease that is free already is left a renewal interval to a replica below its share.
            attemptAtExpiry(config.renewInterval());
            return;
        }
        Grant previous = grant.get();
        boolean lapsed = previous != null && current().isEmpty();
        try {
            Optional<Grant> result = lease.acquireOrRenew();
            meters.renewalLatency.record(ticker.nanoTime() - started, TimeUnit.NANOSECONDS);
            databaseReachable = true;
            if (result.isPresent()) {
                granted(result.get(), lapsed, "acquired the lease");
            } else {
                if (previous != null && grant.compareAndSet(previous, null)) {
                    transitions.log(State.FOLLOWER, previous.token(), "another holder has the lease");
                }
                attemptAtExpiry(Duration.ZERO);
            }
        } catch (RuntimeException e) {
            meters.renewalFailures.increment();
            if (databaseReachable || previous != null) {
                log.warn("Lease {}: acquire-or-renew failed: {}", role, Faults.describe(e));
            } else {
                log.debug("Lease {}: acquire-or-renew failed again: {}", role, Faults.describe(e));
            }
            databaseReachable = false;
            if (previous != null && grant.compareAndSet(previous, null)) {
                transitions.log(
                        State.FOLLOWER,
                        previous.token(),
                        "renewal failed (" + e.getClass().getSimpleName() + ")");
            }
        }
    }

    private void granted(Grant g, boolean lapsed, String how) {
        meters.renewals.increment();
        lastToken = g.token();
        Grant before = grant.getAndSet(g);
        if (before == null && transitions.leaderToken() != null) {
            // The work gave the grant up while this statement ran; its step-down is logged here, before the grant.
            transitions.log(State.FOLLOWER, transitions.leaderToken(), "the work gave up the grant");
        }
        if (before == null || !before.token().equals(g.token())) {
            meters.takeovers.increment();
            transitions.log(State.LEADER, g.token(), how + ", expires " + g.expiresAt() + " (database time)");
        } else if (lapsed) {
            transitions.notifyListeners();
        }
        if (fastPath != null) {
            fastPath.granted();
        }
    }

    /**
     * The fast path: the watcher got the sign of life of {@code token}, so its holder's session has
     * ended; take over now. When the token has moved on meanwhile, an ordinary attempt finds out
     * what holds now.
     */
    void takeOverFrom(FencingToken token) {
        if (grant.get() != null) {
            return;
        }
        long started = ticker.nanoTime();
        try {
            Optional<Grant> result = lease.takeOver(token);
            meters.renewalLatency.record(ticker.nanoTime() - started, TimeUnit.NANOSECONDS);
            databaseReachable = true;
            if (result.isPresent()) {
                times.tookOver(started);
                meters.fastTakeovers.increment();
                granted(
                        result.get(),
                        false,
                        "took over from token " + token + ", whose holder's session ended, before its lease expired");
            } else {
                attempt(true);
            }
        } catch (RuntimeException e) {
            meters.renewalFailures.increment();
            log.warn("Lease {}: taking over from token {} failed: {}", role, token, Faults.describe(e));
        }
    }

    /**
     * Schedules an attempt for the moment the holder's lease expires (database time, read after
     * this failed attempt), at most one lease duration away. Scheduling only: a lease that was
     * renewed meanwhile makes that attempt fail like any other, and the wait starts over. With the
     * fast path, also has the watcher wait for the holder's session to end, once the holder shows
     * a sign of life.
     */
    private void attemptAtExpiry(Duration graceWhenFree) {
        Optional<Lease.Holder> holder;
        try {
            holder = lease.holder();
        } catch (RuntimeException e) {
            log.debug("Lease {}: reading the holder's expiry failed: {}", role, Faults.describe(e));
            return;
        }
        if (holder.isEmpty()) {
            return;
        }
        Lease.Holder h = holder.get();
        if (fastPath != null && !h.holderId().equals(holderId)) {
            fastPath.sawHolder(h);
        }
        times.holderExpiresIn(h.remaining().isZero() ? graceWhenFree : h.remaining());
    }

    /** What the lease thread has told the watcher and the watcher has not taken yet; for tests, which start no threads. */
    List<Watcher.Command> takeWatchCommands() {
        return fastPath.takeCommands();
    }

    /** A wait's outcome, posted by the watcher (or a test, answering for it). */
    void waitEnded(FencingToken token, boolean ended, RuntimeException error) {
        post(new FastPath.WaitEnded(token, ended, error));
    }

    /**
     * Stops renewing and, if still leader, releases the lease so a follower takes over at once.
     * Call only once the protected work has stopped. The release is conditional: a lease that
     * already moved to a newer holder is not touched.
     */
    public void stopAndRelease() {
        stopThreads();
        Grant g = grant.getAndSet(null);
        if (g != null) {
            try {
                boolean released = lease.release(g.token());
                log.info(
                        "Lease {}: LEADER -> STOPPED (holder {}, token {}): {}",
                        role,
                        holderId,
                        g.token(),
                        released ? "released the lease" : "lease had already expired or moved on; nothing to release");
            } catch (RuntimeException e) {
                log.warn(
                        "Lease {}: release of token {} failed, the lease will expire on its own: {}",
                        role,
                        g.token(),
                        Faults.describe(e));
            }
        } else {
            log.info("Lease {}: FOLLOWER -> STOPPED (holder {})", role, holderId);
        }
        // After the release, which a follower waits for first.
        threads.closeWatch();
    }

    /** Stops without releasing: the lease runs out on its own. */
    @Override
    public void close() {
        stopThreads();
        grant.set(null);
        threads.closeWatch();
    }

    private void stopThreads() {
        stopped = true;
        threads.stop(wakeup);
    }
}
