package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED_REISSUED;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;

import dev.fencedjobs.runtime.internal.Faults;
import java.time.Instant;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jooq.DSLContext;
import org.jooq.Record;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Replays the dead letters an operator asked for ({@code fenced-jobs dead-letters replay}), one at
 * a time, through the same path as a fresh record: in one transaction, the letter is locked, the
 * claim its dead-lettering left on the job id is released (only a claim with outcome {@code
 * dead_letter}, whose effect never ran), and the stored record is processed as the batch processor
 * processes any record: deduplicated by job id, fenced by the resource's highest token, applied at
 * most once. A replay can therefore never apply an effect twice: an id applied meanwhile is a
 * duplicate, a token below the resource's highest is rejected as stale and recorded.
 *
 * <p>The letter ends {@code replayed}, with the outcome; or {@code dead} again with why (the record
 * is still unreadable, or the effect failed again and everything was rolled back).
 */
final class DeadLetterReplay {

    static final String DEAD = "dead";
    static final String REQUESTED = "replay_requested";
    static final String REPLAYED = "replayed";

    private static final Logger log = LoggerFactory.getLogger(DeadLetterReplay.class);

    private final DSLContext dsl;
    private final BatchProcessor processor;
    /** The replay thread's own: each replay's span, in the job's trace and linked to the attempt that failed first. */
    private final ProcessSpans spans;
    /** The records of the replay under way, and what became of them: for its span. */
    private final List<ConsumerRecord<String, byte[]>> replaying = new ArrayList<>(1);

    private final IdentityHashMap<ConsumerRecord<String, byte[]>, String> outcomes = new IdentityHashMap<>(2);

    DeadLetterReplay(DSLContext dsl, BatchProcessor processor, ProcessSpans spans) {
        this.dsl = dsl;
        this.processor = processor;
        this.spans = spans;
    }

    /** Replays the oldest requested letter, if any; returns how many it replayed (0 or 1). */
    int replayOne() {
        Long id = dsl.select(CONSUMER_DEAD_LETTER.ID)
                .from(CONSUMER_DEAD_LETTER)
                .where(CONSUMER_DEAD_LETTER.STATUS.eq(REQUESTED))
                .orderBy(CONSUMER_DEAD_LETTER.ID)
                .limit(1)
                .fetchOptional(CONSUMER_DEAD_LETTER.ID)
                .orElse(null);
        if (id == null) {
            return 0;
        }
        spans.begin(Instant.now());
        replaying.clear();
        outcomes.clear();
        try {
            int replayed = dsl.transactionResult(c -> replay(c.dsl(), id));
            spans.committed(replaying, outcomes);
            return replayed;
        } catch (BatchProcessor.EffectFailure e) {
            spans.rolledBack(e);
            String why = "effect failed on replay: " + Faults.describe(e.getCause());
            log.warn("Replay of dead letter {} rolled back, it stays a dead letter: {}", id, why);
            dsl.update(CONSUMER_DEAD_LETTER)
                    .set(CONSUMER_DEAD_LETTER.STATUS, DEAD)
                    .set(CONSUMER_DEAD_LETTER.REPLAY_OUTCOME, Records.truncate(why, 2000))
                    .set(CONSUMER_DEAD_LETTER.STATUS_AT, CLOCK_TIMESTAMP)
                    .where(CONSUMER_DEAD_LETTER.ID.eq(id))
                    .and(CONSUMER_DEAD_LETTER.STATUS.eq(REQUESTED))
                    .execute();
            return 1;
        } catch (RuntimeException | Error e) {
            spans.rolledBack(e);
            throw e;
        }
    }

    private int replay(DSLContext tx, long id) {
        Record r = tx.select(
                        CONSUMER_DEAD_LETTER.TOPIC,
                        CONSUMER_DEAD_LETTER.KAFKA_PARTITION,
                        CONSUMER_DEAD_LETTER.KAFKA_OFFSET,
                        CONSUMER_DEAD_LETTER.RECORD_KEY,
                        CONSUMER_DEAD_LETTER.RECORD_VALUE,
                        CONSUMER_DEAD_LETTER.JOB_ID,
                        CONSUMER_DEAD_LETTER.REASON,
                        CONSUMER_DEAD_LETTER.RECORD_SIGNATURE,
                        CONSUMER_DEAD_LETTER.DEAD_LETTERED_AT,
                        CONSUMER_DEAD_LETTER.TRACEPARENT,
                        CONSUMER_DEAD_LETTER.TRACESTATE,
                        CONSUMER_DEAD_LETTER.FIRST_ATTEMPT)
                .from(CONSUMER_DEAD_LETTER)
                .where(CONSUMER_DEAD_LETTER.ID.eq(id))
                .and(CONSUMER_DEAD_LETTER.STATUS.eq(REQUESTED))
                .forUpdate()
                .skipLocked()
                .fetchOne();
        if (r == null) {
            return 0; // another consumer has it, or the operator changed their mind
        }
        Long jobId = r.get(CONSUMER_DEAD_LETTER.JOB_ID);
        releaseClaims(tx, jobId);
        ConsumerRecord<String, byte[]> record = StoredRecords.stored(
                r.get(CONSUMER_DEAD_LETTER.TOPIC),
                r.get(CONSUMER_DEAD_LETTER.KAFKA_PARTITION),
                r.get(CONSUMER_DEAD_LETTER.KAFKA_OFFSET),
                r.get(CONSUMER_DEAD_LETTER.RECORD_KEY),
                r.get(CONSUMER_DEAD_LETTER.RECORD_VALUE),
                r.get(CONSUMER_DEAD_LETTER.RECORD_SIGNATURE),
                r.get(CONSUMER_DEAD_LETTER.TRACEPARENT),
                r.get(CONSUMER_DEAD_LETTER.TRACESTATE));
        replaying.add(record);
        spans.retrying(record, r.get(CONSUMER_DEAD_LETTER.JOB_ID), r.get(CONSUMER_DEAD_LETTER.FIRST_ATTEMPT), 0);
        // Checked again as it arrived: a letter dead for want of a trusted key replays once its key is trusted, and
        // never before.
        Counts counts = processor.process(
                tx,
                replaying,
                null,
                processor.arrivedAt(r.get(CONSUMER_DEAD_LETTER.DEAD_LETTERED_AT)),
                outcomes,
                spans);
        Outcome outcome = Outcome.of(counts, r.get(CONSUMER_DEAD_LETTER.REASON));
        String status = outcome.status();
        tx.update(CONSUMER_DEAD_LETTER)
                .set(CONSUMER_DEAD_LETTER.STATUS, status)
                .set(CONSUMER_DEAD_LETTER.REPLAY_OUTCOME, Records.truncate(outcome.text(), 2000))
                .set(CONSUMER_DEAD_LETTER.STATUS_AT, CLOCK_TIMESTAMP)
                .where(CONSUMER_DEAD_LETTER.ID.eq(id))
                .execute();
        log.info(
                "Replayed dead letter {} ({}-{}@{}, job {}): {}",
                id,
                record.topic(),
                record.partition(),
                record.offset(),
                jobId,
                outcome.text());
        return 1;
    }

    /** The claims of the dead letter's job, which the dead letter took: released, so that its replay can claim it. */
    private static void releaseClaims(DSLContext tx, Long jobId) {
        if (jobId == null) {
            return;
        }
        tx.deleteFrom(CONSUMER_PROCESSED)
                .where(CONSUMER_PROCESSED.JOB_ID.eq(jobId))
                .and(CONSUMER_PROCESSED.OUTCOME.eq("dead_letter"))
                .execute();
        tx.deleteFrom(CONSUMER_PROCESSED_REISSUED)
                .where(CONSUMER_PROCESSED_REISSUED.JOB_ID.eq(jobId))
                .and(CONSUMER_PROCESSED_REISSUED.OUTCOME.eq("dead_letter"))
                .execute();
    }

    /** What a replay came to: the dead letter's new status and what the operator reads of it. */
    private record Outcome(String status, String text) {

        static Outcome of(Counts counts, String reason) {
            if (counts.applied() > 0) {
                return new Outcome(
                        REPLAYED,
                        "applied" + (counts.late() > 0 ? " (late: a later row of its resource had been applied)" : ""));
            }
            if (counts.rejected() > 0) {
                return new Outcome(
                        REPLAYED,
                        "rejected as stale: its token is below the highest applied for the resource (recorded in consumer_rejected)");
            }
            if (counts.waiting() > 0) {
                return new Outcome(
                        REPLAYED,
                        "waiting behind an earlier record of its resource for a patient retry (consumer_waiting)");
            }
            if (counts.duplicates() > 0) {
                return new Outcome(REPLAYED, "duplicate: its job had been processed meanwhile, nothing applied");
            }
            if (counts.unauthenticated() > 0) {
                return new Outcome(
                        DEAD,
                        "still unauthenticated: its signature does not verify with the keys this consumer trusts (see its new dead letter)");
            }
            return new Outcome(DEAD, "still unreadable: " + reason);
        }
    }
}
