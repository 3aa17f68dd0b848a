package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.internal.Next;
import java.util.concurrent.TimeUnit;

/**
 * An idle leader's sleep, on the dispatch loop's thread: until the earliest pending job is due (as
 * the last next-due read said, lowered by any notification since), and while batches start after a
 * scan position, no later than the next read from the start. Sends nothing to the database.
 */
final class IdleSleep {

    /**
     * A plan: under {@code token}, the earliest pending due time ({@link ScanPosition#NOTHING} when
     * none; {@link ScanPosition#CATCH_UP} to run a batch at once) as of the database's {@code
     * databaseNowMillis}, asked at {@code askedAtNanos} on the ticker.
     */
    record Plan(FencingToken token, long dueMillis, long databaseNowMillis, long askedAtNanos) {
        Plan(FencingToken token, JobBatches.NextDue next, long askedAtNanos) {
            this(token, next.earliestDueMillis(), next.databaseNowMillis(), askedAtNanos);
        }
    }

    private final ScanPosition scan;
    private final Ticker ticker;
    /** Set while the leader sleeps until the next due time. */
    private Plan plan;

    IdleSleep(ScanPosition scan, Ticker ticker) {
        this.scan = scan;
        this.ticker = ticker;
    }

    /** Sleeps under {@code next}: the sleep until its due time, or at once another batch when that has come. */
    Next plan(Plan next) {
        Next sleep = sleep(next);
        return sleep != null ? sleep : Next.again();
    }

    /** Goes on sleeping under {@code token}'s plan; null when there is none (a batch is due, or the plan was another grant's). */
    Next resume(FencingToken token) {
        Next sleep = plan != null && plan.token().equals(token) ? sleep(plan) : null;
        if (sleep == null) {
            plan = null;
        }
        return sleep;
    }

    /** No grant: no plan. */
    void clear() {
        plan = null;
    }

    /** The sleep {@code p} asks for now, kept as the plan; null, and no plan kept, when a batch is due now. */
    private Next sleep(Plan p) {
        long planned = Math.min(p.dueMillis(), scan.takeEarliestNotified());
        plan = new Plan(p.token(), planned, p.databaseNowMillis(), p.askedAtNanos());
        Next next = sleepFor(plan);
        if (next == null) {
            plan = null;
        }
        return next;
    }

    private Next sleepFor(Plan p) {
        if (p.dueMillis() == ScanPosition.CATCH_UP) {
            return null;
        }
        // In differences of ticker readings, never in absolute readings, which may wrap: a job due
        // in the year 9999 saturates its wait, and must not win over the next read from the start.
        long now = ticker.nanoTime();
        // While batches start after a position: the next batch from the start (at most a second away).
        long wait = scan.untilFromStart(now);
        if (p.dueMillis() != ScanPosition.NOTHING) {
            // Due times are in database time: offset from the database's "now" at the query,
            // plus a millisecond for the rounding of due_at to whole milliseconds.
            long untilDue = TimeUnit.MILLISECONDS.toNanos(Math.max(-1, p.dueMillis() - p.databaseNowMillis()) + 1);
            wait = Math.min(wait, untilDue - (now - p.askedAtNanos()));
        }
        if (wait == Long.MAX_VALUE) {
            return Next.await();
        }
        return wait > 0 ? Next.sleepUntil(now + wait) : null;
    }
}
