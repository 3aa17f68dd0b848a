package dev.fencedjobs.lease;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.internal.Faults;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The fast path's decisions, taken on the lease thread of one {@link Leadership}: which holder
 * token the {@link Watcher} waits for, what its answers mean, and when to look at the holder
 * again after a wait failed. A wait that ends with the holder's session gone hands the token to
 * {@code takeOver}; everything else about the lease stays with {@link Leadership}.
 */
final class FastPath {

    /** A wait for {@code token} ended: the session let the sign of life go ({@code ended}), ran out, or failed ({@code error}). */
    record WaitEnded(FencingToken token, boolean ended, RuntimeException error) implements Leadership.Event {}

    private static final Logger log = LoggerFactory.getLogger(Leadership.class);
    private static final long UNSCHEDULED = Long.MIN_VALUE;

    private final String role;
    private final String holderId;
    private final LeaseOps lease;
    private final Duration renewInterval;
    private final Ticker ticker;
    private final Watcher watcher;
    private final BooleanSupplier leading;
    private final Consumer<FencingToken> takeOver;

    /** The token whose holder's session the watcher should wait for, or null; read by the status page. */
    private volatile FencingToken watchTarget;
    // Confined to the lease thread.
    /** The token the watcher was last told to wait for and has not answered yet, or null. */
    private FencingToken waitingFor;
    /** When to look at the holder again (a ticker reading), or UNSCHEDULED. */
    private long lookAgainAt = UNSCHEDULED;

    FastPath(
            String role,
            String holderId,
            LeaseOps lease,
            LeaseConfig config,
            Ticker ticker,
            Watcher watcher,
            BooleanSupplier leading,
            Consumer<FencingToken> takeOver) {
        this.role = role;
        this.holderId = holderId;
        this.lease = lease;
        this.renewInterval = config.renewInterval();
        this.ticker = ticker;
        this.watcher = watcher;
        this.leading = leading;
        this.takeOver = takeOver;
    }

    Optional<FencingToken> watchTarget() {
        return Optional.ofNullable(watchTarget);
    }

    /** Another replica holds the lease as {@code h}: wait for its session when it shows a sign of life. */
    void sawHolder(Lease.Holder h) {
        if (h.signOfLife()) {
            watchFor(h.token());
        } else if (!h.token().equals(watchTarget)) {
            // A wait for this token that began when its lock was seen held still proves what it proves.
            unwatch();
        }
    }

    /**
     * This replica leads: it waits for no one now. A wait in progress is left to end by itself
     * (granted, or at the end of its chunk), not cut: cutting closes its connection, and on this
     * two-core machine that cost the new leader's first job 30 ms at the median (measured
     * in-process, SIGTERM handoff).
     */
    void granted() {
        watchTarget = null;
        lookAgainAt = UNSCHEDULED;
    }

    /** The next look at the holder, when one is due; else {@code next}. */
    long nextAt(long next) {
        return lookAgainAt != UNSCHEDULED && lookAgainAt - next < 0 ? lookAgainAt : next;
    }

    /** Looks at the holder again if that is due. */
    void lookAgainIfDue() {
        if (lookAgainAt != UNSCHEDULED && ticker.nanoTime() - lookAgainAt >= 0) {
            lookAgainAt = UNSCHEDULED;
            lookAgain();
        }
    }

    /**
     * After a wait failed (its connection was lost: a database restart ends every session, the
     * holder's too), looks at the holder again every renewal interval until it shows a sign of life
     * on its new session, or its lease is within an interval of expiring (the attempt at expiry
     * looks then anyway). One read per interval, only in that window.
     */
    private void lookAgain() {
        if (leading.getAsBoolean() || watchTarget != null) {
            return;
        }
        try {
            Optional<Lease.Holder> holder = lease.holder();
            if (holder.isEmpty() || holder.get().holderId().equals(holderId)) {
                return;
            }
            if (holder.get().signOfLife()) {
                watchFor(holder.get().token());
            } else if (holder.get().remaining().compareTo(renewInterval) > 0) {
                lookAgainSoon();
            }
        } catch (RuntimeException e) {
            log.debug("Lease {}: looking at the holder again failed: {}", role, Faults.describe(e));
            lookAgainSoon();
        }
    }

    private void lookAgainSoon() {
        if (lookAgainAt == UNSCHEDULED) {
            lookAgainAt = ticker.nanoTime() + renewInterval.toNanos();
        }
    }

    /** Has the watcher wait for the end of the session that holds {@code token}'s sign of life. */
    private void watchFor(FencingToken token) {
        if (token.equals(watchTarget)) {
            return;
        }
        watchTarget = token;
        if (waitingFor == null) {
            watcher.waitFor(token);
            waitingFor = token;
        } else if (!token.equals(waitingFor)) {
            watcher.interrupt(); // the wait for the old token answers, and then the new one is handed over
        }
    }

    /** Stops waiting (the token moved on with no sign of life to wait for). */
    private void unwatch() {
        watchTarget = null;
        if (waitingFor != null) {
            watcher.interrupt();
        }
    }

    /** The watcher answered: takes over if the session it waited for ended, and hands it its next wait. */
    void waitEnded(WaitEnded w) {
        if (w.token().equals(waitingFor)) {
            waitingFor = null;
        }
        if (w.error() != null) {
            if (w.token().equals(watchTarget)) {
                // No proof any more: the next look at the holder starts a new wait if it shows a sign of life.
                watchTarget = null;
                log.debug(
                        "Lease {}: waiting for the session of token {} to end failed: {}",
                        role,
                        w.token(),
                        Faults.describe(w.error()));
                lookAgainSoon();
            }
        } else if (w.ended()) {
            if (w.token().equals(watchTarget)) {
                watchTarget = null;
                log.info("Lease {}: the session holding token {}'s sign of life ended; taking over", role, w.token());
                takeOver.accept(w.token());
            }
            watcher.unlock(w.token());
        }
        if (watchTarget != null && waitingFor == null && !leading.getAsBoolean()) {
            watcher.waitFor(watchTarget);
            waitingFor = watchTarget;
        }
    }

    /** What the lease thread has told the watcher and the watcher has not taken yet; for tests, which start no threads. */
    List<Watcher.Command> takeCommands() {
        return watcher.takeCommands();
    }
}
