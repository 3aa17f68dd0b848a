package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED_REISSUED;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;
import static org.jooq.impl.DSL.val;

import dev.fencedjobs.consumer.Decision.Outcome;
import dev.fencedjobs.consumer.Decision.Reuse;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.jooq.DSLContext;
import org.jooq.Field;
import org.jooq.InsertValuesStep6;
import org.jooq.Record;
import org.jooq.Table;
import org.jooq.impl.DSL;

/**
 * The claims on job ids: {@code consumer_processed}, keyed by job id, and {@code
 * consumer_processed_reissued}, keyed by job id and creation time, for a job given an id that
 * another job holds (a database rolled back by a failover hands ids out again). A claim is an
 * {@code INSERT … ON CONFLICT} on the key, so two consumer instances that see the same record
 * (during a rebalance) cannot both apply it: the second waits for the first to commit and then
 * finds the id taken.
 */
final class ClaimStore {

    /** The claims of one batch: the decisions whose job this transaction claimed, and the reuses found. */
    record Claims(Set<Decision> claimed, List<Reuse> reused) {

        static Claims none() {
            return new Claims(Collections.newSetFromMap(new IdentityHashMap<>()), List.of());
        }

        /** What claiming the decision's job id found; a reuse is claimed only where its job was not processed under that id yet. */
        FenceDecisions.Claim of(Decision d) {
            if (!claimed.contains(d)) {
                return FenceDecisions.Claim.SAME_JOB;
            }
            return reused.stream().anyMatch(r -> r.decision().equals(d))
                    ? FenceDecisions.Claim.OTHER_JOB
                    : FenceDecisions.Claim.NEW;
        }
    }

    /**
     * Claims each decided job, with its outcome, and returns the decisions this transaction claimed
     * and the job-id reuses found. Each id's first record in the batch is claimed in {@code
     * consumer_processed}: a new id is inserted; an id held by the same job (or one whose creation
     * time is not known on either side) is a duplicate, left as it is and not returned; an id held by
     * a job created at another time comes back with that job's row, untouched, and is a reuse. A
     * reuse, and any further record in the batch with the same id (a job created at yet another
     * time), is then claimed by its identity in {@code consumer_processed_reissued}.
     */
    static Claims claim(DSLContext tx, List<Decision> decisions) {
        if (decisions.isEmpty()) {
            return Claims.none();
        }
        Map<Long, Decision> firstById = new LinkedHashMap<>();
        List<Decision> later = new ArrayList<>();
        for (Decision d : decisions) {
            if (firstById.putIfAbsent(d.job().jobId(), d) != null) {
                later.add(d);
            }
        }
        Map<Long, Record> returned = claimFirst(tx, firstById.values());
        Set<Decision> claimed = Collections.newSetFromMap(new IdentityHashMap<>());
        IdentityHashMap<Decision, String> reissued = new IdentityHashMap<>();
        Map<Long, OffsetDateTime> holder = new HashMap<>();
        for (Decision d : firstById.values()) {
            Job job = d.job();
            Record r = returned.get(job.jobId());
            OffsetDateTime held = r == null ? job.createdAt() : r.get(CONSUMER_PROCESSED.JOB_CREATED_AT);
            holder.put(job.jobId(), held);
            if (r == null) {
                continue;
            }
            if (FenceDecisions.Claim.of(true, held, job.createdAt()) == FenceDecisions.Claim.SAME_JOB) {
                claimed.add(d);
            } else {
                reissued.put(
                        d,
                        previousJob(
                                job.jobId(),
                                held,
                                r.get(CONSUMER_PROCESSED.RESOURCE),
                                r.get(CONSUMER_PROCESSED.FENCING_TOKEN),
                                r.get(CONSUMER_PROCESSED.PROCESSED_AT)));
            }
        }
        for (Decision d : later) {
            Job job = d.job();
            OffsetDateTime held = holder.get(job.jobId());
            if (!job.sameJobAs(job.jobId(), held)) {
                reissued.put(d, "job " + job.jobId() + " created at " + held);
            }
        }
        return new Claims(claimed, claimReissued(tx, reissued, claimed));
    }

    /**
     * Claims each id's first record in {@code consumer_processed}, from one array per column. Returns,
     * by job id, the rows of ids that another job held (creation times differ); an id claimed now or
     * held by the same job is not returned.
     */
    private static Map<Long, Record> claimFirst(DSLContext tx, Collection<Decision> first) {
        List<Job> jobs = first.stream().map(Decision::job).toList();
        var rows = Unnested.jobs(
                jobs, first.stream().map(d -> d.outcome().stored()).toList());
        var insert = tx.insertInto(
                        CONSUMER_PROCESSED,
                        CONSUMER_PROCESSED.JOB_ID,
                        CONSUMER_PROCESSED.JOB_CREATED_AT,
                        CONSUMER_PROCESSED.RESOURCE,
                        CONSUMER_PROCESSED.FENCING_TOKEN,
                        CONSUMER_PROCESSED.OUTCOME,
                        CONSUMER_PROCESSED.PROCESSED_AT)
                .select(DSL.select(
                                Unnested.ID,
                                Unnested.CREATED_AT,
                                Unnested.RESOURCE,
                                Unnested.TOKEN,
                                Unnested.TEXT,
                                CLOCK_TIMESTAMP)
                        .from(rows));
        // DO UPDATE of nothing, only where the creation times differ: it returns the row of the job
        // that holds the id, whose creation time then tells an insert from a reuse.
        Map<Long, Record> returned = new HashMap<>();
        for (Record r : insert.onConflict(CONSUMER_PROCESSED.JOB_ID)
                .doUpdate()
                .set(CONSUMER_PROCESSED.OUTCOME, CONSUMER_PROCESSED.OUTCOME)
                .where(CONSUMER_PROCESSED
                        .JOB_CREATED_AT
                        .isNotNull()
                        .and(DSL.excluded(CONSUMER_PROCESSED.JOB_CREATED_AT).isNotNull())
                        .and(CONSUMER_PROCESSED.JOB_CREATED_AT.ne(DSL.excluded(CONSUMER_PROCESSED.JOB_CREATED_AT))))
                .returningResult(
                        CONSUMER_PROCESSED.JOB_ID,
                        CONSUMER_PROCESSED.JOB_CREATED_AT,
                        CONSUMER_PROCESSED.RESOURCE,
                        CONSUMER_PROCESSED.FENCING_TOKEN,
                        CONSUMER_PROCESSED.PROCESSED_AT)
                .fetch()) {
            returned.put(r.get(CONSUMER_PROCESSED.JOB_ID), r);
        }
        return returned;
    }

    /** Claims the reissued ids by identity in {@code consumer_processed_reissued}; those claimed now join {@code claimed} and are reuses. */
    private static List<Reuse> claimReissued(DSLContext tx, Map<Decision, String> reissued, Set<Decision> claimed) {
        List<Reuse> reuses = new ArrayList<>();
        if (reissued.isEmpty()) {
            return reuses;
        }
        var again = tx.insertInto(
                CONSUMER_PROCESSED_REISSUED,
                CONSUMER_PROCESSED_REISSUED.JOB_ID,
                CONSUMER_PROCESSED_REISSUED.JOB_CREATED_AT,
                CONSUMER_PROCESSED_REISSUED.RESOURCE,
                CONSUMER_PROCESSED_REISSUED.FENCING_TOKEN,
                CONSUMER_PROCESSED_REISSUED.OUTCOME,
                CONSUMER_PROCESSED_REISSUED.PROCESSED_AT);
        InsertValuesStep6<?, Long, OffsetDateTime, String, Long, String, OffsetDateTime> values = null;
        for (Decision d : reissued.keySet()) {
            Job job = d.job();
            values = (values == null ? again : values)
                    .values(
                            val(job.jobId()),
                            val(job.createdAt()),
                            val(job.resource()),
                            val(job.fencingToken().value()),
                            val(d.outcome().stored()),
                            CLOCK_TIMESTAMP);
        }
        Set<String> taken = new HashSet<>();
        values.onConflictDoNothing()
                .returningResult(CONSUMER_PROCESSED_REISSUED.JOB_ID, CONSUMER_PROCESSED_REISSUED.JOB_CREATED_AT)
                .fetch()
                .forEach(r -> taken.add(identity(r.value1(), r.value2())));
        for (Map.Entry<Decision, String> e : reissued.entrySet()) {
            Job job = e.getKey().job();
            if (taken.contains(identity(job.jobId(), job.createdAt()))) {
                claimed.add(e.getKey());
                reuses.add(new Reuse(e.getKey(), "job_id", e.getValue()));
            }
        }
        return reuses;
    }

    /**
     * Claims a dead-lettered job, so a redelivery is a duplicate and not a second attempt: where its
     * batch's claim would have put it. Returns what was processed under its id when that was another
     * job and this claim is new: a reuse to report (its batch's report was rolled back with it).
     */
    static Optional<String> claimDeadLetter(DSLContext tx, Job job) {
        var held = tx.select(
                        CONSUMER_PROCESSED.JOB_CREATED_AT,
                        CONSUMER_PROCESSED.RESOURCE,
                        CONSUMER_PROCESSED.FENCING_TOKEN,
                        CONSUMER_PROCESSED.PROCESSED_AT)
                .from(CONSUMER_PROCESSED)
                .where(CONSUMER_PROCESSED.JOB_ID.eq(job.jobId()))
                .fetchOptional()
                .orElse(null);
        boolean reissued = held != null
                && held.value1() != null
                && job.createdAt() != null
                && !held.value1().isEqual(job.createdAt());
        // Both tables have the same columns: the claim goes where the batch's claim would have put it.
        Table<?> table = reissued ? CONSUMER_PROCESSED_REISSUED : CONSUMER_PROCESSED;
        boolean claimed = tx.insertInto(table)
                        .set(sameColumn(table, CONSUMER_PROCESSED.JOB_ID), job.jobId())
                        .set(sameColumn(table, CONSUMER_PROCESSED.JOB_CREATED_AT), job.createdAt())
                        .set(sameColumn(table, CONSUMER_PROCESSED.RESOURCE), job.resource())
                        .set(
                                sameColumn(table, CONSUMER_PROCESSED.FENCING_TOKEN),
                                job.fencingToken().value())
                        .set(sameColumn(table, CONSUMER_PROCESSED.OUTCOME), Outcome.DEAD_LETTER.stored())
                        .set(sameColumn(table, CONSUMER_PROCESSED.PROCESSED_AT), CLOCK_TIMESTAMP)
                        .onConflictDoNothing()
                        .execute()
                == 1;
        return reissued && claimed
                ? Optional.of(previousJob(job.jobId(), held.value1(), held.value2(), held.value3(), held.value4()))
                : Optional.empty();
    }

    /** The column of {@code table} named like {@code column} of {@code consumer_processed}. */
    private static <T> Field<T> sameColumn(Table<?> table, Field<T> column) {
        return table.field(column.getName(), column.getType());
    }

    private static String previousJob(
            long jobId, OffsetDateTime createdAt, String resource, long token, OffsetDateTime processedAt) {
        return "job " + jobId + " created at " + createdAt + " (resource " + resource + ", token " + token
                + ", processed at " + processedAt + ")";
    }

    private static String identity(long jobId, OffsetDateTime createdAt) {
        return jobId + "@" + createdAt.toInstant();
    }

    private ClaimStore() {}
}
