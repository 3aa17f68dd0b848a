package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.lease.Grant;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * The jobs table as the dispatch loop sees it, in memory: pending jobs in {@code (due_at, id)}
 * order, a guard that accepts one token, and database time from the test's clock. Each insert is
 * a transaction of its own, and a batch sees every transaction before it.
 */
final class MemoryJobs implements JobBatches {

    record Job(long id, long dueMillis, long xid) {
        Position position() {
            return new Position(OffsetDateTime.ofInstant(Instant.ofEpochMilli(dueMillis), ZoneOffset.UTC), id);
        }
    }

    private final LongSupplier databaseMillis;
    private final List<Job> pending = new ArrayList<>();
    private final Map<Long, Long> completedAt = new LinkedHashMap<>();
    private final List<Position> batchesAfter = new ArrayList<>();
    private long nextId = 1;
    private long nextXid = 100;
    long heldToken;
    RuntimeException failNext;
    /** While set, the shard map drains: no batch completes a job, and the next-due read says so. */
    boolean draining;

    private int nextDueReads;

    MemoryJobs(LongSupplier databaseMillis) {
        this.databaseMillis = databaseMillis;
    }

    /** Inserts a pending job due {@code inMillis} from database time now; returns it (for its notification). */
    Job insert(long inMillis) {
        Job job = new Job(nextId++, databaseMillis.getAsLong() + inMillis, nextXid++);
        pending.add(job);
        return job;
    }

    /** Moves a pending job to a new due time, in a transaction of its own. */
    Job move(Job job, long inMillis) {
        pending.remove(job);
        Job moved = new Job(job.id(), databaseMillis.getAsLong() + inMillis, nextXid++);
        pending.add(moved);
        return moved;
    }

    /** The {@code jobs_due} payload the trigger sends for this job's transaction. */
    static String payload(Job job) {
        return job.dueMillis() + " " + job.xid();
    }

    /** Database time (epoch ms) at which the job was completed, or null while it is pending. */
    Long completedAt(Job job) {
        return completedAt.get(job.id());
    }

    int completed() {
        return completedAt.size();
    }

    /** Where each batch started: {@code null} for one from the start of the index. */
    List<Position> batchesAfter() {
        return batchesAfter;
    }

    @Override
    public BatchResult completeDue(Grant grant, int limit, Position after, String startKey) {
        batchesAfter.add(after);
        if (failNext != null) {
            RuntimeException e = failNext;
            failNext = null;
            throw e;
        }
        if (grant.token().value() != heldToken) {
            return BatchResult.leaseLost();
        }
        long now = databaseMillis.getAsLong();
        List<Job> due = draining
                ? List.of()
                : pending.stream()
                        .filter(j -> j.dueMillis() <= now
                                && (after == null || j.position().isAfter(after)))
                        .sorted(ORDER)
                        .limit(limit)
                        .toList();
        pending.removeAll(due);
        due.forEach(j -> completedAt.put(j.id(), now));
        Position last = due.isEmpty() ? null : due.get(due.size() - 1).position();
        return new BatchResult(true, due.size(), last, new DbSnapshot(nextXid, nextXid, new long[0]));
    }

    /** No limits in memory: nothing is held back. */
    @Override
    public DispatchOverview.Overview overview() {
        return new DispatchOverview.Overview(0, List.of(), List.of());
    }

    @Override
    public long heldJobs() {
        return 0;
    }

    @Override
    public Backlog backlog() {
        long now = databaseMillis.getAsLong();
        List<Job> due = pending.stream().filter(j -> j.dueMillis() <= now).toList();
        long earliest = due.stream().mapToLong(Job::dueMillis).min().orElse(now);
        return new Backlog(Math.min(due.size(), DispatchOverview.DUE_CAP), (now - earliest) / 1000.0);
    }

    @Override
    public NextDue nextDue(Position after) {
        long earliest = pending.stream()
                .filter(j -> after == null || j.position().isAfter(after))
                .mapToLong(Job::dueMillis)
                .min()
                .orElse(Long.MAX_VALUE);
        nextDueReads++;
        return new NextDue(databaseMillis.getAsLong(), earliest, draining);
    }

    /** How many next-due reads the loop made. */
    int nextDueReads() {
        return nextDueReads;
    }

    @Override
    public int purgeCompleted(Duration retention, int limit) {
        return 0;
    }

    private static final Comparator<Job> ORDER =
            Comparator.comparingLong(Job::dueMillis).thenComparingLong(Job::id);
}
