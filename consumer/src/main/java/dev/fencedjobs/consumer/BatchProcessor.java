package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_RESOURCE_FENCE;
import static dev.fencedjobs.db.DbTime.CLOCK_TIMESTAMP;
import static org.jooq.impl.DSL.val;

import dev.fencedjobs.runtime.Envelope;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jooq.DSLContext;
import org.jooq.InsertValuesStep5;
import org.jooq.Record2;
import dev.fencedjobs.consumer.jooq.tables.records.ConsumerProcessedRecord;

/**
 * Handles one polled batch in one transaction of the consumer's database, records in partition
 * order, each through three steps:
 *
 * <ol>
 *   <li><b>dedup</b>: a job id already processed (in an earlier batch, earlier in this one, or by
 *       another consumer instance right now) is skipped;
 *   <li><b>fence</b>: a token below the highest accepted for the resource is recorded as rejected
 *       and not applied; an equal token is the same leader and is applied;
 *   <li><b>effect</b>: applied, and the resource's highest token raised.
 * </ol>
 *
 * <p>A record that cannot be read is dead-lettered with the reason and its raw bytes. The claim on
 * a job id is an {@code INSERT … ON CONFLICT DO NOTHING} on its primary key, so two instances that
 * see the same record (during a rebalance) cannot both apply it: the second waits for the first
 * to commit and then finds the id taken. The fence rows are locked in resource order, so two
 * instances never deadlock on them.
 */
final class BatchProcessor {

    enum Outcome { APPLIED, REJECTED, DEAD_LETTER }

    /** What one batch did. */
    record Counts(int applied, int duplicates, int rejected, int deadLettered) {
        Counts plus(Counts o) {
            return new Counts(applied + o.applied, duplicates + o.duplicates, rejected + o.rejected, deadLettered + o.deadLettered);
        }
    }

    /** The effect threw: the caller retries the records one at a time. */
    static final class EffectFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        EffectFailure(Throwable cause) {
            super("effect failed: " + cause, cause);
        }
    }

    private record Candidate(ConsumerRecord<String, byte[]> record, Job job) {}

    private record Decision(Candidate candidate, Outcome outcome, long highest) {}

    private final Effect effect;

    BatchProcessor(Effect effect) {
        this.effect = effect;
    }

    /** Processes the batch in the caller's transaction. */
    Counts process(DSLContext tx, List<ConsumerRecord<String, byte[]>> records) {
        Map<ConsumerRecord<String, byte[]>, String> unreadable = new LinkedHashMap<>();
        Map<Long, Candidate> firstByJob = new LinkedHashMap<>();
        int duplicates = 0;
        for (ConsumerRecord<String, byte[]> record : records) {
            try {
                Envelope e = Envelope.parse(record.value());
                Job job = new Job(e.jobId(), e.resource(), e.fencingToken(), e.payloadJson(), e.dueAt(), e.completedAt(), e.outboxId());
                if (firstByJob.putIfAbsent(job.jobId(), new Candidate(record, job)) != null) {
                    duplicates++;
                }
            } catch (Envelope.InvalidEnvelope e) {
                unreadable.put(record, e.getMessage());
            }
        }

        List<Decision> decisions = decide(tx, firstByJob.values());
        Set<Long> claimed = claim(tx, decisions);
        List<Job> toApply = new ArrayList<>();
        List<Decision> rejected = new ArrayList<>();
        Map<String, Long> raised = new HashMap<>();
        for (Decision d : decisions) {
            if (!claimed.contains(d.candidate().job().jobId())) {
                duplicates++;
            } else if (d.outcome() == Outcome.APPLIED) {
                toApply.add(d.candidate().job());
                raised.merge(d.candidate().job().resource(), d.candidate().job().fencingToken(), Math::max);
            } else {
                rejected.add(d);
            }
        }
        try {
            effect.applyAll(tx, toApply);
        } catch (RuntimeException e) {
            throw new EffectFailure(e);
        }
        recordRejected(tx, rejected);
        for (Map.Entry<ConsumerRecord<String, byte[]>, String> u : unreadable.entrySet()) {
            deadLetter(tx, u.getKey(), null, u.getValue());
        }
        raiseFences(tx, raised);
        return new Counts(toApply.size(), duplicates, rejected.size(), unreadable.size());
    }

    /** Locks (creating where new) the fence rows of the batch's resources and decides each record in order. */
    private static List<Decision> decide(DSLContext tx, java.util.Collection<Candidate> candidates) {
        if (candidates.isEmpty()) {
            return List.of();
        }
        TreeSet<String> resources = new TreeSet<>();
        candidates.forEach(c -> resources.add(c.job().resource()));
        var insert = tx.insertInto(CONSUMER_RESOURCE_FENCE, CONSUMER_RESOURCE_FENCE.RESOURCE, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN,
                CONSUMER_RESOURCE_FENCE.UPDATED_AT);
        org.jooq.InsertValuesStep3<?, String, Long, OffsetDateTime> values = null;
        for (String resource : resources) {
            values = (values == null ? insert : values).values(val(resource), val(0L), CLOCK_TIMESTAMP);
        }
        // DO UPDATE (to the same value) rather than DO NOTHING: it locks existing rows and returns them.
        Map<String, Long> highest = new HashMap<>();
        for (Record2<String, Long> r : values.onConflict(CONSUMER_RESOURCE_FENCE.RESOURCE).doUpdate()
                .set(CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN)
                .returningResult(CONSUMER_RESOURCE_FENCE.RESOURCE, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN)
                .fetch()) {
            highest.put(r.value1(), r.value2());
        }
        List<Decision> decisions = new ArrayList<>(candidates.size());
        for (Candidate c : candidates) {
            long h = highest.get(c.job().resource());
            if (c.job().fencingToken() < h) {
                decisions.add(new Decision(c, Outcome.REJECTED, h));
            } else {
                decisions.add(new Decision(c, Outcome.APPLIED, h));
                highest.put(c.job().resource(), c.job().fencingToken());
            }
        }
        return decisions;
    }

    /** Inserts the job ids with their outcomes; returns the ids this transaction claimed. */
    private static Set<Long> claim(DSLContext tx, List<Decision> decisions) {
        if (decisions.isEmpty()) {
            return Set.of();
        }
        InsertValuesStep5<ConsumerProcessedRecord, Long, String, Long, String, OffsetDateTime> insert = tx.insertInto(
                CONSUMER_PROCESSED, CONSUMER_PROCESSED.JOB_ID, CONSUMER_PROCESSED.RESOURCE, CONSUMER_PROCESSED.FENCING_TOKEN,
                CONSUMER_PROCESSED.OUTCOME, CONSUMER_PROCESSED.PROCESSED_AT);
        for (Decision d : decisions) {
            Job job = d.candidate().job();
            insert = insert.values(val(job.jobId()), val(job.resource()), val(job.fencingToken()), val(outcome(d.outcome())), CLOCK_TIMESTAMP);
        }
        return new HashSet<>(insert.onConflictDoNothing().returningResult(CONSUMER_PROCESSED.JOB_ID).fetch(r -> r.value1()));
    }

    static String outcome(Outcome outcome) {
        return outcome.name().toLowerCase(java.util.Locale.ROOT);
    }

    private static void recordRejected(DSLContext tx, List<Decision> rejected) {
        for (Decision d : rejected) {
            ConsumerRecord<String, byte[]> r = d.candidate().record();
            Job job = d.candidate().job();
            tx.insertInto(CONSUMER_REJECTED)
                    .set(CONSUMER_REJECTED.JOB_ID, job.jobId())
                    .set(CONSUMER_REJECTED.RESOURCE, job.resource())
                    .set(CONSUMER_REJECTED.FENCING_TOKEN, job.fencingToken())
                    .set(CONSUMER_REJECTED.HIGHEST_TOKEN, d.highest())
                    .set(CONSUMER_REJECTED.TOPIC, r.topic())
                    .set(CONSUMER_REJECTED.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_REJECTED.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_REJECTED.REJECTED_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    private static void raiseFences(DSLContext tx, Map<String, Long> raised) {
        for (Map.Entry<String, Long> e : raised.entrySet()) {
            tx.update(CONSUMER_RESOURCE_FENCE)
                    .set(CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN, e.getValue())
                    .set(CONSUMER_RESOURCE_FENCE.UPDATED_AT, CLOCK_TIMESTAMP)
                    .where(CONSUMER_RESOURCE_FENCE.RESOURCE.eq(e.getKey()))
                    .and(CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN.lt(e.getValue()))
                    .execute();
        }
    }

    /**
     * Dead-letters a record with its raw bytes. With a job id (an effect that kept failing), the
     * id is claimed too, so a redelivery is a duplicate and not a second attempt.
     */
    static void deadLetter(DSLContext tx, ConsumerRecord<String, byte[]> record, Job job, String reason) {
        if (job != null) {
            tx.insertInto(CONSUMER_PROCESSED)
                    .set(CONSUMER_PROCESSED.JOB_ID, job.jobId())
                    .set(CONSUMER_PROCESSED.RESOURCE, job.resource())
                    .set(CONSUMER_PROCESSED.FENCING_TOKEN, job.fencingToken())
                    .set(CONSUMER_PROCESSED.OUTCOME, outcome(Outcome.DEAD_LETTER))
                    .set(CONSUMER_PROCESSED.PROCESSED_AT, CLOCK_TIMESTAMP)
                    .onConflictDoNothing()
                    .execute();
        }
        String key = record.key();
        tx.insertInto(CONSUMER_DEAD_LETTER)
                .set(CONSUMER_DEAD_LETTER.TOPIC, record.topic())
                .set(CONSUMER_DEAD_LETTER.KAFKA_PARTITION, record.partition())
                .set(CONSUMER_DEAD_LETTER.KAFKA_OFFSET, record.offset())
                .set(CONSUMER_DEAD_LETTER.RECORD_KEY, key == null ? null : truncate(key, 1000))
                .set(CONSUMER_DEAD_LETTER.RECORD_VALUE, record.value())
                .set(CONSUMER_DEAD_LETTER.JOB_ID, job == null ? null : job.jobId())
                .set(CONSUMER_DEAD_LETTER.REASON, truncate(reason, 2000))
                .set(CONSUMER_DEAD_LETTER.DEAD_LETTERED_AT, CLOCK_TIMESTAMP)
                .onConflictDoNothing()
                .execute();
    }

    /** Reads the job out of a record whose batch failed in the effect, for the one-by-one retry. */
    static Job jobOf(ConsumerRecord<String, byte[]> record) {
        try {
            Envelope e = Envelope.parse(record.value());
            return new Job(e.jobId(), e.resource(), e.fencingToken(), e.payloadJson(), e.dueAt(), e.completedAt(), e.outboxId());
        } catch (Envelope.InvalidEnvelope e) {
            return null;
        }
    }

    private static String truncate(String s, int max) {
        return s.length() <= max ? s : s.substring(0, max - 1) + "…";
    }

    static String describe(ConsumerRecord<String, byte[]> r) {
        return r.topic() + "-" + r.partition() + "@" + r.offset() + " key=" + r.key() + " value="
                + (r.value() == null ? "null" : truncate(new String(r.value(), StandardCharsets.UTF_8), 200));
    }
}
