package dev.fencedjobs.lease;

import dev.fencedjobs.db.internal.Ticker;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * When {@link Leadership}'s lease thread makes its next acquire-or-renew: every renewal interval
 * after the last attempt, and, for a follower that read the holder's expiry, at that expiry. Ticker
 * readings only (scheduling, never a lease decision); confined to the lease thread.
 */
final class AttemptTimes {

    /** An attempt at the holder's expiry comes this much after it, so the expiry has passed in database time. */
    private static final long EXPIRY_SLACK_NANOS = TimeUnit.MILLISECONDS.toNanos(5);
    /** A ticker reading not scheduled: no attempt at the holder's expiry due. */
    private static final long UNSCHEDULED = Long.MIN_VALUE;

    private final Ticker ticker;
    private final long renewNanos;
    private final long durationNanos;
    private long periodicAt;
    private long expiryAt = UNSCHEDULED;

    AttemptTimes(Ticker ticker, LeaseConfig config) {
        this.ticker = ticker;
        this.renewNanos = config.renewInterval().toNanos();
        this.durationNanos = config.duration().toNanos();
        this.periodicAt = ticker.nanoTime();
    }

    /** Whether the attempt at the holder's expiry is due now; it is then no longer scheduled. */
    boolean expiryDue() {
        if (expiryAt != UNSCHEDULED && ticker.nanoTime() - expiryAt >= 0) {
            expiryAt = UNSCHEDULED;
            return true;
        }
        return false;
    }

    /** Whether the periodic attempt is due now; the next is then a renewal interval away. */
    boolean periodicDue() {
        if (ticker.nanoTime() - periodicAt >= 0) {
            periodicAt = ticker.nanoTime() + renewNanos;
            return true;
        }
        return false;
    }

    /** Whether an attempt at the holder's expiry is scheduled and not yet due. */
    boolean beforeExpiry() {
        return expiryAt != UNSCHEDULED && ticker.nanoTime() - expiryAt < 0;
    }

    /** An attempt started at {@code started}: the next periodic one is a renewal interval after it, and none at an expiry. */
    void attempted(long started) {
        expiryAt = UNSCHEDULED;
        periodicAt = started + renewNanos;
    }

    /** A takeover started at {@code started}: the next periodic attempt, a renewal, a renewal interval after it. */
    void tookOver(long started) {
        periodicAt = started + renewNanos;
    }

    /** The holder's lease has {@code remaining} in database time: attempt then, at most one lease duration away. */
    void holderExpiresIn(Duration remaining) {
        if (!remaining.isZero()) {
            expiryAt = ticker.nanoTime() + Math.min(remaining.toNanos(), durationNanos) + EXPIRY_SLACK_NANOS;
        }
    }

    /** The ticker reading of the next attempt due, whichever comes first. */
    long next() {
        return expiryAt != UNSCHEDULED && expiryAt - periodicAt < 0 ? expiryAt : periodicAt;
    }
}
