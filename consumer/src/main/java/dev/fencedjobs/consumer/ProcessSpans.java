package dev.fencedjobs.consumer;

import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.TraceContext;
import dev.fencedjobs.runtime.internal.Tracing;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanBuilder;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.context.Scope;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.slf4j.MDC;

/**
 * One span per record the consumer handled (messaging conventions: "process", kind CONSUMER): a
 * child of the job's context from the record's headers (the producer's span), so the effect is in
 * the trace the job was submitted in. It spans the batch's transaction and says what became of the
 * record ({@code fencedjobs.outcome}).
 *
 * <p>A record whose effect runs gets its span before the effect, current while the effect runs,
 * with {@code trace_id}, {@code span_id} and {@code job_id} in the logging MDC: the effect's own
 * spans and log lines are the job's. When its batch rolls back, the span ends with outcome {@code
 * rolled back} and an error status (the exception recorded on the job whose effect threw); the
 * records are handled again, in spans of their own. A record the batch stores (to wait behind an
 * earlier one of its resource, or a dead letter it could not read) gets its span as it is stored,
 * so the stored row keeps that span's context. Every other record's span is made once its batch
 * committed.
 *
 * <p>A patient retry and a dead letter's replay are spans of the same kind, children of the job's
 * context the stored record kept, each linked ({@code fencedjobs.link.kind = first attempt}) to the
 * span of the attempt that put the record there. One instance per thread: the loop's, the patient
 * retries' and the replays' each have their own.
 */
final class ProcessSpans implements BatchProcessor.Handling {

    /** The outcome of a record whose effect ran in a batch that rolled back. */
    static final String ROLLED_BACK = "rolled back";

    static final String MDC_TRACE_ID = "trace_id";
    static final String MDC_SPAN_ID = "span_id";
    static final String MDC_JOB_ID = "job_id";
    /** The kind of the link from a retry's or a replay's span to the span of the attempt that put the record there. */
    static final String FIRST_ATTEMPT = "first attempt";

    private final Tracing tracing;
    private final String group;
    /** The span name of the topic last seen: the consumer reads one topic. */
    private String topic = "";

    private String name = "process ";

    /** Spans begun before their effect, until their batch commits or rolls back. */
    private final IdentityHashMap<ConsumerRecord<String, byte[]>, Span> open = new IdentityHashMap<>();
    /** What the stored records of the batch begun last (a patient retry, a replay) say of themselves. */
    private final IdentityHashMap<ConsumerRecord<String, byte[]>, Retry> retries = new IdentityHashMap<>();

    /**
     * A stored record tried again: its job id (its headers were not kept; null when unknown), the
     * span of its first attempt to link to (null for none), and which attempt this is (0 for unknown).
     */
    private record Retry(Long jobId, SpanContext firstAttempt, int attempt) {}

    private Instant started = Instant.EPOCH;
    /**
     * No SDK in the batch begun last ({@link Tracing#installed()}): no spans to make, so records
     * whose effect runs with others' (an effect that writes the batch at once) and records the batch
     * decided without an effect get none. A job's own effect still runs in its producer's context,
     * with its trace id in the logging context.
     */
    private boolean off;

    ProcessSpans(Tracing tracing, String group) {
        this.tracing = tracing;
        this.group = group;
    }

    /** A batch's transaction begins at {@code at}: its spans start then. */
    void begin(Instant at) {
        started = at;
        off = !tracing.installed();
        open.clear();
        retries.clear();
    }

    /**
     * In the batch begun last, {@code record} is a stored one of job {@code jobId} (null when
     * unknown), attempt {@code attempt} (0 for unknown) of a record whose first attempt's span was
     * {@code firstAttempt} (a traceparent; null for none).
     */
    void retrying(ConsumerRecord<String, byte[]> record, Long jobId, String firstAttempt, int attempt) {
        SpanContext first = firstAttempt == null
                ? null
                : Tracing.producer(Tracing.jobContext(new TraceContext(firstAttempt, null)));
        retries.put(record, new Retry(jobId, first != null && first.isValid() ? first : null, attempt));
    }

    @Override
    @SuppressWarnings("MustBeClosedChecker") // the Handled returned owns the scope, and its close() closes it
    public BatchProcessor.Handled enter(ConsumerRecord<String, byte[]> record, Job job, boolean current) {
        if (off && !current) {
            return Handled.NONE;
        }
        Span span = span(record, started);
        open.put(record, span);
        if (span.isRecording()) {
            // From the job itself (the signed envelope): a stored record has no headers to read them from.
            span.setAttribute(Tracing.JOB_ID, job.jobId());
            span.setAttribute(Tracing.FENCING_TOKEN, job.fencingToken().value());
            span.setAttribute(Tracing.OUTBOX_ID, job.outboxId());
            span.setAttribute(Tracing.RESOURCE, job.resource());
        }
        if (!current) {
            return Handled.NONE;
        }
        // Without an SDK the span is the producer's context itself: the log lines still name the job's trace.
        SpanContext context = span.getSpanContext();
        MDC.put(MDC_JOB_ID, Long.toString(job.jobId()));
        if (context.isValid()) {
            MDC.put(MDC_TRACE_ID, context.getTraceId());
            MDC.put(MDC_SPAN_ID, context.getSpanId());
        }
        return new Handled(span, span.makeCurrent());
    }

    @Override
    public String storing(ConsumerRecord<String, byte[]> record) {
        if (off) {
            return null; // no span to link to
        }
        return firstAttempt(open.computeIfAbsent(record, r -> span(r, started)));
    }

    /** What a stored record keeps of {@code span} as its first attempt: its traceparent while it records, else null (no SDK, no span to link to). */
    static String firstAttempt(Span span) {
        return span.isRecording() ? StoredRecords.traceparent(span.getSpanContext()) : null;
    }

    /** A job's effect running in its span. */
    private record Handled(Span span, Scope scope) implements BatchProcessor.Handled {
        static final Handled NONE = new Handled(null, null);

        @Override
        public void failed(RuntimeException e) {
            if (span != null) {
                span.recordException(e);
            }
        }

        @Override
        public void close() {
            if (scope != null) {
                scope.close();
                MDC.remove(MDC_JOB_ID);
                MDC.remove(MDC_TRACE_ID);
                MDC.remove(MDC_SPAN_ID);
            }
        }
    }

    /** The batch begun last committed: ends each record's span, begun or made now, with what became of it. */
    void committed(List<ConsumerRecord<String, byte[]>> records, Map<ConsumerRecord<String, byte[]>, String> outcomes) {
        if (off) {
            // Only no-op spans were begun (around the effects of jobs run one by one): nothing to end.
            open.clear();
            retries.clear();
            return;
        }
        for (ConsumerRecord<String, byte[]> r : records) {
            String outcome = outcomes.get(r);
            Span begun = open.remove(r);
            if (outcome != null) {
                end(begun != null ? begun : span(r, started), outcome);
            } else if (begun != null) {
                begun.end();
            }
        }
        open.clear();
        retries.clear();
    }

    /** The batch begun last rolled back: the spans of the effects that ran in it end as {@link #ROLLED_BACK}. */
    void rolledBack(Throwable cause) {
        for (Span span : open.values()) {
            span.setAttribute(Tracing.OUTCOME, ROLLED_BACK);
            span.setStatus(StatusCode.ERROR, "rolled back: " + cause.getClass().getSimpleName());
            span.end();
        }
        open.clear();
        retries.clear();
    }

    /** Ends a span made by {@link #span} with what became of its record. */
    static void end(Span span, String outcome) {
        if (span.isRecording()) {
            span.setAttribute(Tracing.OUTCOME, outcome);
            if (BatchProcessor.DEAD_LETTER.equals(outcome)) {
                span.setStatus(StatusCode.ERROR, "dead-lettered");
            }
        }
        span.end();
    }

    /** The span of one record, started at {@code started} and not yet ended, its outcome not yet said. */
    Span span(ConsumerRecord<String, byte[]> r, Instant started) {
        if (!r.topic().equals(topic)) {
            topic = r.topic();
            name = "process " + topic;
        }
        SpanBuilder builder = tracing.tracer()
                .spanBuilder(name)
                .setSpanKind(SpanKind.CONSUMER)
                .setParent(Tracing.jobContext(r.headers()))
                .setStartTimestamp(started);
        Retry retry = retries.isEmpty() ? null : retries.get(r);
        if (retry != null && retry.firstAttempt() != null) {
            builder.addLink(retry.firstAttempt(), Attributes.of(Tracing.LINK_KIND, FIRST_ATTEMPT));
        }
        Span span = builder.startSpan();
        if (span.isRecording()) {
            span.setAttribute(Tracing.MESSAGING_SYSTEM, "kafka");
            span.setAttribute(Tracing.DESTINATION, r.topic());
            span.setAttribute(Tracing.OPERATION_TYPE, "process");
            span.setAttribute(Tracing.OPERATION_NAME, "process");
            span.setAttribute(Tracing.CONSUMER_GROUP, group);
            span.setAttribute(Tracing.PARTITION, String.valueOf(r.partition()));
            span.setAttribute(Tracing.OFFSET, r.offset());
            if (r.key() != null) {
                span.setAttribute(Tracing.MESSAGE_KEY, r.key());
                span.setAttribute(Tracing.RESOURCE, r.key());
            }
            number(span, r, Envelope.JOB_ID_HEADER, Tracing.JOB_ID);
            number(span, r, Envelope.TOKEN_HEADER, Tracing.FENCING_TOKEN);
            number(span, r, Envelope.OUTBOX_ID_HEADER, Tracing.OUTBOX_ID);
            if (retry != null && retry.jobId() != null) {
                span.setAttribute(Tracing.JOB_ID, retry.jobId());
            }
            if (retry != null && retry.attempt() > 0) {
                span.setAttribute(Tracing.ATTEMPT, (long) retry.attempt());
            }
        }
        return span;
    }

    /** A header the relay writes as a decimal number; left out when absent or not a number (a dead letter's, say). */
    private static void number(Span span, ConsumerRecord<String, byte[]> r, String header, AttributeKey<Long> key) {
        Header h = r.headers().lastHeader(header);
        if (h != null && h.value() != null) {
            try {
                span.setAttribute(key, Long.parseLong(new String(h.value(), StandardCharsets.US_ASCII)));
            } catch (NumberFormatException e) {
                // not ours to judge here: the record's outcome says what was wrong with it
            }
        }
    }
}
