package dev.fencedjobs.dispatcher;

import java.time.Instant;
import java.util.ArrayList;
import java.util.List;

/**
 * The batches since the last one that read from the start of {@code jobs_pending_due}: where each
 * ended, and the snapshot its statement ran with. Owned by the dispatch loop's thread.
 *
 * <p>A {@code jobs_due} notification (earliest due time {@code d}, transaction {@code T}) at or
 * before the position names a job behind it only if the batch that scanned {@code d}'s place did
 * not see {@code T}. That batch is the first one in the chain that ended at or after {@code d}, or
 * a later one; snapshots only grow, so if that first one saw {@code T}, every candidate did, and
 * the job was completed (or skipped as locked, which the periodic batch from the start covers).
 * Under load most notifications arrive after their jobs were completed; without this, each sent the
 * next batch back to the start (a third of all batches in the soak, at 2.8 times the cost).
 */
final class ScanChain {

    /** More batches than this since the last read from the start: the oldest are forgotten, and a notification they would have cleared sends the batch back. */
    static final int MAX_BATCHES = 1000;

    private record Batch(Instant endDue, DbSnapshot seen) {}

    private final List<Batch> batches = new ArrayList<>();
    private boolean truncated;
    /** A batch without a snapshot ran: nothing is known to be seen until the next restart. */
    private boolean blind;

    /** A batch from the start begins a new chain. */
    void restart() {
        batches.clear();
        truncated = false;
        blind = false;
    }

    /** A batch completed jobs up to {@code end}, having seen at least {@code seen} ({@code null}: not known). */
    void ran(JobBatches.Position end, DbSnapshot seen) {
        if (seen == null) {
            blind = true;
            return;
        }
        if (batches.size() == MAX_BATCHES) {
            batches.remove(0);
            truncated = true;
        }
        batches.add(new Batch(end.dueAt().toInstant(), seen));
    }

    /**
     * Whether the chain's batches already saw transaction {@code xid}'s jobs due from {@code
     * dueMillis} on, so that its notification names nothing behind the position; false when not
     * known ({@code xid} negative: a payload without one).
     */
    boolean saw(long dueMillis, long xid) {
        if (xid < 0 || blind || batches.isEmpty()) {
            return false;
        }
        Instant due = Instant.ofEpochMilli(dueMillis);
        if (truncated && batches.get(0).endDue().isAfter(due)) {
            return false;
        }
        for (Batch b : batches) {
            if (!b.endDue().isBefore(due)) {
                return b.seen().sees(xid);
            }
        }
        return false;
    }
}
