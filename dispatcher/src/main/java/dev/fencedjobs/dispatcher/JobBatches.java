package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.lease.Grant;
import java.time.Duration;
import java.time.OffsetDateTime;

/** The leader's two database operations. */
interface JobBatches {

    /**
     * In one transaction: guard the lease, complete up to {@code limit} due pending jobs, and
     * write one outbox row per job with the grant's token. If the guard fails, nothing is written.
     * The plain path takes them in {@code (due_at, id)} order; while the dispatch policy is in use
     * (a rate limit is defined, or a pending job names a priority or a key: docs/dispatch.md) the
     * policy path decides, and its result says so ({@link BatchResult#policy}).
     *
     * @param after only jobs after this position in {@code (due_at, id)} order; {@code null} for
     *     all (the plain path's; the policy path ignores it)
     * @param startKey the policy path's first key is the one after this; {@code null} for the first
     */
    BatchResult completeDue(Grant grant, int limit, Position after, String startKey);

    /**
     * As {@link #completeDue(Grant, int, Position, String)}; with {@code traces}, the plain path's
     * result also lists the trace context of each job it completed that has one ({@link
     * BatchResult#traces}), for the batch span's links. Asked only while a span records.
     */
    default BatchResult completeDue(Grant grant, int limit, Position after, String startKey, boolean traces) {
        return completeDue(grant, limit, after, startKey);
    }

    /**
     * Deletes up to {@code limit} jobs completed more than {@code retention} ago, the oldest first,
     * in one statement; returns how many it deleted. Not guarded: only completed jobs past their
     * retention go, whoever deletes them.
     */
    int purgeCompleted(Duration retention, int limit);

    /** The earliest pending due time ({@code after} a position, or of all when {@code null}) and the database's time now. */
    NextDue nextDue(Position after);

    /**
     * Runs the leader's statements once without writing anything, so that a follower that takes
     * over runs warm code: in a fresh JVM the first batch took 0.6 to 1.6 s on two cores.
     */
    default void warmUp() {}

    /** Who waits and why, for {@code /status} (docs/dispatch.md, "What you can see"). */
    DispatchOverview.Overview overview();

    /** Due jobs held back by a rate limit now, up to {@link DispatchOverview#WAITING_CAP}. */
    long heldJobs();

    /** Pending jobs due now, counted up to {@link DispatchOverview#DUE_CAP}, and how long the longest-waiting one has waited. */
    Backlog backlog();

    /**
     * The backlog of due jobs, as the dashboard and {@code /metrics} show it.
     *
     * @param due pending jobs due now, up to {@link DispatchOverview#DUE_CAP}: a scrape reads at most
     *     that many index entries
     * @param oldestDueSeconds how long the earliest-due pending job has been due; 0 when none is
     */
    record Backlog(long due, double oldestDueSeconds) {}

    /**
     * What is paused (docs/dispatch.md, "Pause and resume"), for the gauges: keys paused, whether
     * everything is, and how long the oldest pause has lasted (0 while none).
     */
    default Paused paused() {
        return new Paused(0, false, 0);
    }

    record Paused(long keys, boolean everything, double longestSeconds) {}

    /** A job the batch completed and its W3C trace context, as the producer gave it. */
    record JobTrace(long jobId, String traceparent, String tracestate) {}

    /**
     * What one batch did.
     *
     * @param traces the trace context of each job the batch completed that has one, when asked for
     *     (plain path only: the policy path's function returns no rows); empty otherwise
     * @param last the last job completed, in {@code (due_at, id)} order; {@code null} when none was
     * @param seen the batch statement's snapshot: the transactions it saw; {@code null} when not
     *     known (no row returned it)
     */
    record BatchResult(
            boolean leaseHeld,
            int completed,
            Position last,
            DbSnapshot seen,
            Policy policy,
            java.util.List<JobTrace> traces) {
        BatchResult(boolean leaseHeld, int completed, Position last, DbSnapshot seen, Policy policy) {
            this(leaseHeld, completed, last, seen, policy, java.util.List.of());
        }

        BatchResult(boolean leaseHeld, int completed, Position last, DbSnapshot seen) {
            this(leaseHeld, completed, last, seen, null);
        }

        static BatchResult leaseLost() {
            return new BatchResult(false, 0, null, null);
        }
    }

    /**
     * What a policy-path batch says beyond its count.
     *
     * @param nextKey where the next batch's keys start (after this one); {@code null} for the first
     * @param more whether a batch could complete more at once
     * @param next when not {@code more}: the earliest pending due time after this batch or the next
     *     token of a key held back by its limit, whichever comes first ({@link NextDue#earliestDueMillis}
     *     is {@link Long#MAX_VALUE} when neither)
     * @param heldKeys keys with due jobs held back by their limit
     */
    record Policy(String nextKey, boolean more, NextDue next, int heldKeys) {}

    /** A place in the {@code (due_at, id)} order of the index {@code jobs_pending_due}. */
    record Position(OffsetDateTime dueAt, long id) {
        boolean isAfter(Position other) {
            int c = dueAt.toInstant().compareTo(other.dueAt.toInstant());
            return c > 0 || (c == 0 && id > other.id);
        }
    }

    /**
     * When the next pending job is due, in database time.
     *
     * @param databaseNowMillis {@code clock_timestamp()} when asked, epoch milliseconds
     * @param earliestDueMillis earliest pending {@code due_at}, epoch milliseconds, or
     *     {@link Long#MAX_VALUE} when nothing is pending
     * @param draining whether the shard map drains (docs/shards.md): no job completes until the
     *     switch, whatever is due
     */
    record NextDue(long databaseNowMillis, long earliestDueMillis, boolean draining) {
        NextDue(long databaseNowMillis, long earliestDueMillis) {
            this(databaseNowMillis, earliestDueMillis, false);
        }
    }
}
