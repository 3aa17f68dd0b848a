package dev.fencedjobs.dispatcher;

import dev.fencedjobs.lease.Grant;
import java.time.Duration;
import java.time.OffsetDateTime;

/** The leader's two database operations. */
interface JobBatches {

    /**
     * In one transaction: guard the lease, complete up to {@code limit} due pending jobs in
     * {@code (due_at, id)} order, and write one outbox row per job with the grant's token. If the
     * guard fails, nothing is written.
     *
     * @param after only jobs after this position in {@code (due_at, id)} order; {@code null} for
     *     all
     */
    BatchResult completeDue(Grant grant, int limit, Position after);

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

    /**
     * @param last the last job completed, in {@code (due_at, id)} order; {@code null} when none was
     * @param seen the batch statement's snapshot: the transactions it saw; {@code null} when not
     *     known (no row returned it)
     */
    record BatchResult(boolean leaseHeld, int completed, Position last, DbSnapshot seen) {
        static BatchResult leaseLost() {
            return new BatchResult(false, 0, null, null);
        }
    }

    /** A place in the {@code (due_at, id)} order of the index {@code jobs_pending_due}. */
    record Position(OffsetDateTime dueAt, long id) {
        boolean isAfter(Position other) {
            int c = dueAt.toInstant().compareTo(other.dueAt.toInstant());
            return c > 0 || c == 0 && id > other.id;
        }
    }

    /**
     * @param databaseNowMillis {@code clock_timestamp()} when asked, epoch milliseconds
     * @param earliestDueMillis earliest pending {@code due_at}, epoch milliseconds, or
     *     {@link Long#MAX_VALUE} when nothing is pending
     */
    record NextDue(long databaseNowMillis, long earliestDueMillis) {}
}
