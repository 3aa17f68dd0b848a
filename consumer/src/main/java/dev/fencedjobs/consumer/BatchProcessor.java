package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_LATE;
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
import org.jooq.Record4;
import dev.fencedjobs.consumer.jooq.tables.records.ConsumerProcessedRecord;

/**
 * Handles one polled batch in one transaction of the consumer's database, records in partition
 * order, each through three steps:
 *
 * <ol>
 *   <li><b>dedup</b>: a job id already processed (in an earlier batch, earlier in this one, or by
 *       another consumer instance right now) is skipped;
 *   <li><b>fence</b>: a token below the highest accepted for the resource is recorded as rejected
 *       and not applied, unless the record is only late (below); an equal token is the same leader
 *       and is applied;
 *   <li><b>effect</b>: applied, and the resource's highest token and highest outbox id raised.
 * </ol>
 *
 * <p><b>Late records.</b> Outbox ids are commit order, and a row committed later never carries a
 * lower token. A record whose outbox id is below the highest applied for its resource arrived out
 * of commit order: it is <i>late</i>, counted, logged and recorded in {@code consumer_late}, and
 * applied. If it also carries a token below the highest, it is still a genuine row of an earlier
 * tenure when its outbox id is below the first one applied with the highest token, and it is
 * applied; a lower token above that point contradicts commit order and is stale, as is a lower
 * token for a resource whose first highest-token outbox id is not known (0).
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
    record Counts(int applied, int duplicates, int rejected, int deadLettered, int late) {
        static final Counts NONE = new Counts(0, 0, 0, 0, 0);

        Counts plus(Counts o) {
            return new Counts(applied + o.applied, duplicates + o.duplicates, rejected + o.rejected, deadLettered + o.deadLettered,
                    late + o.late);
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

    /**
     * What the fence knew when it decided: the resource's highest token, the first outbox id applied
     * with it (0: not known) and the highest outbox id applied.
     */
    private record Fence(long highestToken, long tokenFirstOutboxId, long highestOutboxId) {

        /** The fence after applying a record with this outbox id and token. */
        Fence after(long outboxId, long token) {
            long highestOutbox = Math.max(highestOutboxId, outboxId);
            if (token > highestToken) {
                return new Fence(token, outboxId, highestOutbox);
            }
            if (token == highestToken && tokenFirstOutboxId > 0) {
                return new Fence(token, Math.min(tokenFirstOutboxId, outboxId), highestOutbox);
            }
            return new Fence(highestToken, tokenFirstOutboxId, highestOutbox);
        }

        boolean late(long outboxId) {
            return outboxId < highestOutboxId;
        }

        /** A lower token is acceptable only as a late row of an earlier tenure: below where the higher token begins. */
        boolean admits(long outboxId, long token) {
            return token >= highestToken || (tokenFirstOutboxId > 0 && outboxId < tokenFirstOutboxId);
        }
    }

    private record Decision(Candidate candidate, Outcome outcome, Fence before) {
        boolean late() {
            return outcome == Outcome.APPLIED && before.late(candidate.job().outboxId());
        }
    }

    private static final org.slf4j.Logger log = org.slf4j.LoggerFactory.getLogger(BatchProcessor.class);

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

        Decisions decided = decide(tx, firstByJob.values());
        Set<Long> claimed = claim(tx, decided.list());
        List<Job> toApply = new ArrayList<>();
        List<Decision> rejected = new ArrayList<>();
        List<Decision> late = new ArrayList<>();
        Map<String, Fence> fences = new HashMap<>();
        for (Decision d : decided.list()) {
            Job job = d.candidate().job();
            if (!claimed.contains(job.jobId())) {
                duplicates++;
            } else if (d.outcome() == Outcome.APPLIED) {
                toApply.add(job);
                fences.put(job.resource(), fences.getOrDefault(job.resource(), decided.locked().get(job.resource()))
                        .after(job.outboxId(), job.fencingToken()));
                if (d.late()) {
                    late.add(d);
                }
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
        recordLate(tx, late);
        for (Map.Entry<ConsumerRecord<String, byte[]>, String> u : unreadable.entrySet()) {
            deadLetter(tx, u.getKey(), null, u.getValue());
        }
        writeFences(tx, fences, decided.locked());
        return new Counts(toApply.size(), duplicates, rejected.size(), unreadable.size(), late.size());
    }

    /** The decisions in record order, and each resource's fence as locked at the start. */
    private record Decisions(List<Decision> list, Map<String, Fence> locked) {}

    /** Locks (creating where new) the fence rows of the batch's resources and decides each record in order. */
    private static Decisions decide(DSLContext tx, java.util.Collection<Candidate> candidates) {
        if (candidates.isEmpty()) {
            return new Decisions(List.of(), Map.of());
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
        Map<String, Fence> locked = new HashMap<>();
        for (Record4<String, Long, Long, Long> r : values.onConflict(CONSUMER_RESOURCE_FENCE.RESOURCE).doUpdate()
                .set(CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN)
                .returningResult(CONSUMER_RESOURCE_FENCE.RESOURCE, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN,
                        CONSUMER_RESOURCE_FENCE.TOKEN_FIRST_OUTBOX_ID, CONSUMER_RESOURCE_FENCE.HIGHEST_OUTBOX_ID)
                .fetch()) {
            locked.put(r.value1(), new Fence(r.value2(), r.value3(), r.value4()));
        }
        Map<String, Fence> fence = new HashMap<>(locked);
        List<Decision> decisions = new ArrayList<>(candidates.size());
        for (Candidate c : candidates) {
            Job job = c.job();
            Fence before = fence.get(job.resource());
            if (before.admits(job.outboxId(), job.fencingToken())) {
                decisions.add(new Decision(c, Outcome.APPLIED, before));
                fence.put(job.resource(), before.after(job.outboxId(), job.fencingToken()));
            } else {
                decisions.add(new Decision(c, Outcome.REJECTED, before));
            }
        }
        return new Decisions(decisions, locked);
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
                    .set(CONSUMER_REJECTED.HIGHEST_TOKEN, d.before().highestToken())
                    .set(CONSUMER_REJECTED.TOPIC, r.topic())
                    .set(CONSUMER_REJECTED.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_REJECTED.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_REJECTED.REJECTED_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    /**
     * Late records: applied, and each one recorded with what had been applied before it. They are
     * not expected (the relay keeps commit order per resource), so each is a WARN.
     */
    private static void recordLate(DSLContext tx, List<Decision> late) {
        for (Decision d : late) {
            ConsumerRecord<String, byte[]> r = d.candidate().record();
            Job job = d.candidate().job();
            log.warn("Late record applied: job {} of resource {} (outbox id {}, token {}) arrived after outbox id {} (highest token {}), "
                    + "against commit order; {}-{}@{}", job.jobId(), job.resource(), job.outboxId(), job.fencingToken(),
                    d.before().highestOutboxId(), d.before().highestToken(), r.topic(), r.partition(), r.offset());
            tx.insertInto(CONSUMER_LATE)
                    .set(CONSUMER_LATE.JOB_ID, job.jobId())
                    .set(CONSUMER_LATE.RESOURCE, job.resource())
                    .set(CONSUMER_LATE.OUTBOX_ID, job.outboxId())
                    .set(CONSUMER_LATE.FENCING_TOKEN, job.fencingToken())
                    .set(CONSUMER_LATE.HIGHEST_OUTBOX_ID, d.before().highestOutboxId())
                    .set(CONSUMER_LATE.HIGHEST_TOKEN, d.before().highestToken())
                    .set(CONSUMER_LATE.TOPIC, r.topic())
                    .set(CONSUMER_LATE.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_LATE.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_LATE.SEEN_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    /** Writes the fences that applied records moved; the rows are locked since {@link #decide}. */
    private static void writeFences(DSLContext tx, Map<String, Fence> fences, Map<String, Fence> locked) {
        for (Map.Entry<String, Fence> e : fences.entrySet()) {
            Fence f = e.getValue();
            if (f.equals(locked.get(e.getKey()))) {
                continue;
            }
            tx.update(CONSUMER_RESOURCE_FENCE)
                    .set(CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN, f.highestToken())
                    .set(CONSUMER_RESOURCE_FENCE.TOKEN_FIRST_OUTBOX_ID, f.tokenFirstOutboxId())
                    .set(CONSUMER_RESOURCE_FENCE.HIGHEST_OUTBOX_ID, f.highestOutboxId())
                    .set(CONSUMER_RESOURCE_FENCE.UPDATED_AT, CLOCK_TIMESTAMP)
                    .where(CONSUMER_RESOURCE_FENCE.RESOURCE.eq(e.getKey()))
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
