package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_WAITING;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;
import static org.jooq.impl.DSL.val;

import dev.fencedjobs.consumer.Decision.Candidate;
import dev.fencedjobs.consumer.Decision.Outcome;
import dev.fencedjobs.consumer.Decision.Reuse;
import dev.fencedjobs.consumer.FenceDecisions.Tenure;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.runtime.internal.TraceContext;
import dev.fencedjobs.runtime.internal.Tracing;
import io.opentelemetry.api.trace.SpanContext;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.jooq.DSLContext;
import org.jooq.impl.DSL;
import org.jooq.types.DayToSecond;

/**
 * The records the consumer keeps: those waiting for a patient retry ({@code consumer_waiting}, a
 * queue per resource) and dead letters ({@code consumer_dead_letter}), each with its raw bytes, its
 * signature header and its job's trace context, so that a retry or a replay reads it as it came.
 */
final class StoredRecords {

    /** Which of these resources have records waiting, {@code retrying} left out. */
    static Set<String> waiting(DSLContext tx, Collection<String> resources, String retrying) {
        if (resources.isEmpty()) {
            return Set.of();
        }
        Set<String> found = new HashSet<>(tx.selectDistinct(CONSUMER_WAITING.RESOURCE)
                .from(CONSUMER_WAITING)
                .where(CONSUMER_WAITING.RESOURCE.eq(DSL.any(DSL.val(resources.toArray(String[]::new)))))
                .fetch(CONSUMER_WAITING.RESOURCE));
        if (retrying != null) {
            found.remove(retrying);
        }
        return found;
    }

    /**
     * Puts a record at the end of its resource's queue of records waiting for a patient retry.
     * {@code wait} null: tried at once when it is first in the queue. False when its job is
     * already waiting (a redelivery). {@code firstAttempt}: the traceparent of the span of the
     * attempt that failed, which the retry's span links to; null for none.
     */
    static boolean park(
            DSLContext tx,
            ConsumerRecord<String, byte[]> record,
            Job job,
            int attempts,
            String error,
            Duration wait,
            String firstAttempt) {
        StoredTrace trace = StoredTrace.of(record);
        var nextAttempt = wait == null ? CLOCK_TIMESTAMP : CLOCK_TIMESTAMP.plus(val(DayToSecond.valueOf(wait)));
        return tx.insertInto(CONSUMER_WAITING)
                        .set(CONSUMER_WAITING.JOB_ID, job.jobId())
                        .set(CONSUMER_WAITING.JOB_CREATED_AT, job.createdAt())
                        .set(CONSUMER_WAITING.RESOURCE, job.resource())
                        .set(CONSUMER_WAITING.TOPIC, record.topic())
                        .set(CONSUMER_WAITING.KAFKA_PARTITION, record.partition())
                        .set(CONSUMER_WAITING.KAFKA_OFFSET, record.offset())
                        .set(
                                CONSUMER_WAITING.RECORD_KEY,
                                record.key() == null ? null : Records.truncate(record.key(), 1000))
                        .set(CONSUMER_WAITING.RECORD_VALUE, record.value())
                        .set(CONSUMER_WAITING.RECORD_SIGNATURE, signature(record))
                        .set(CONSUMER_WAITING.ATTEMPTS, attempts)
                        .set(CONSUMER_WAITING.FIRST_FAILED_AT, CLOCK_TIMESTAMP)
                        .set(CONSUMER_WAITING.NEXT_ATTEMPT_AT, nextAttempt)
                        .set(CONSUMER_WAITING.LAST_ERROR, Records.truncate(error, 2000))
                        .set(CONSUMER_WAITING.TRACEPARENT, trace.traceparent())
                        .set(CONSUMER_WAITING.TRACESTATE, trace.tracestate())
                        .set(CONSUMER_WAITING.FIRST_ATTEMPT, firstAttempt)
                        .onConflictDoNothing()
                        .execute()
                == 1;
    }

    /**
     * Dead-letters a record with its raw bytes. With a job id (an effect that kept failing), the
     * job is claimed too ({@link ClaimStore#claimDeadLetter}), and a reuse that claim finds is
     * reported. Returns whether it reported a reuse. {@code firstAttempt}: the traceparent of the
     * span of the attempt that failed first, which a replay's span links to; null for none.
     */
    static boolean deadLetter(
            DSLContext tx, ConsumerRecord<String, byte[]> record, Job job, String reason, String firstAttempt) {
        boolean reported = false;
        if (job != null) {
            Optional<String> previous = ClaimStore.claimDeadLetter(tx, job);
            if (previous.isPresent()) {
                Decision d = new Decision(new Candidate(record, job, Tenure.UNKNOWN), Outcome.DEAD_LETTER, null);
                Reports.reused(tx, List.of(new Reuse(d, "job_id", previous.get())));
                reported = true;
            }
        }
        String key = record.key();
        StoredTrace trace = StoredTrace.of(record);
        tx.insertInto(CONSUMER_DEAD_LETTER)
                .set(CONSUMER_DEAD_LETTER.TOPIC, record.topic())
                .set(CONSUMER_DEAD_LETTER.KAFKA_PARTITION, record.partition())
                .set(CONSUMER_DEAD_LETTER.KAFKA_OFFSET, record.offset())
                .set(CONSUMER_DEAD_LETTER.RECORD_KEY, key == null ? null : Records.truncate(key, 1000))
                .set(CONSUMER_DEAD_LETTER.RECORD_VALUE, record.value())
                .set(CONSUMER_DEAD_LETTER.RECORD_SIGNATURE, signature(record))
                .set(CONSUMER_DEAD_LETTER.JOB_ID, job == null ? null : job.jobId())
                .set(CONSUMER_DEAD_LETTER.REASON, Records.truncate(reason, 2000))
                .set(CONSUMER_DEAD_LETTER.DEAD_LETTERED_AT, CLOCK_TIMESTAMP)
                .set(CONSUMER_DEAD_LETTER.TRACEPARENT, trace.traceparent())
                .set(CONSUMER_DEAD_LETTER.TRACESTATE, trace.tracestate())
                .set(CONSUMER_DEAD_LETTER.FIRST_ATTEMPT, firstAttempt)
                .onConflictDoNothing()
                .execute();
        return reported;
    }

    /** The record's signature header, kept with what the consumer stores of it. */
    static byte[] signature(ConsumerRecord<String, byte[]> record) {
        Header h = record.headers().lastHeader(RecordSignatures.HEADER);
        return h == null ? null : h.value();
    }

    /**
     * A record as stored, with its signature header again where it had one, and its job's trace
     * context headers where it had a context.
     */
    static ConsumerRecord<String, byte[]> stored(
            String topic,
            int partition,
            long offset,
            String key,
            byte[] value,
            byte[] signature,
            String traceparent,
            String tracestate) {
        ConsumerRecord<String, byte[]> record = new ConsumerRecord<>(topic, partition, offset, key, value);
        if (signature != null) {
            record.headers().add(RecordSignatures.HEADER, signature);
        }
        if (traceparent != null) {
            record.headers().add(TraceContext.TRACEPARENT_HEADER, traceparent.getBytes(StandardCharsets.US_ASCII));
            if (tracestate != null) {
                record.headers().add(TraceContext.TRACESTATE_HEADER, tracestate.getBytes(StandardCharsets.US_ASCII));
            }
        }
        return record;
    }

    /**
     * The job's context a record carries, as a waiting record or a dead letter keeps it: the
     * traceparent written again from a valid context (55 characters), the tracestate header as it
     * came when it fits (512); nulls for a record without a valid context.
     */
    record StoredTrace(String traceparent, String tracestate) {
        static final StoredTrace NONE = new StoredTrace(null, null);

        static StoredTrace of(ConsumerRecord<String, byte[]> record) {
            SpanContext job = Tracing.producer(Tracing.jobContext(record.headers()));
            if (!job.isValid()) {
                return NONE;
            }
            Header state = record.headers().lastHeader(TraceContext.TRACESTATE_HEADER);
            String tracestate = state == null || state.value() == null || state.value().length > 512
                    ? null
                    : new String(state.value(), StandardCharsets.US_ASCII);
            return new StoredTrace(StoredRecords.traceparent(job), tracestate);
        }
    }

    /** A span context as a W3C traceparent; null when it is not valid. */
    static String traceparent(SpanContext context) {
        return context.isValid()
                ? "00-" + context.getTraceId() + "-" + context.getSpanId() + "-"
                        + context.getTraceFlags().asHex()
                : null;
    }

    private StoredRecords() {}
}
