package dev.fencedjobs.consumer;

import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.Tracing;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/**
 * One span per record the consumer handled (messaging conventions: "process", kind CONSUMER),
 * made once its batch committed: a child of the job's context from the record's headers (the
 * producer's span), so the effect is in the trace the job was submitted in. It spans the batch's
 * transaction and says what became of the record ({@code fencedjobs.outcome}). A batch that rolls
 * back makes none: its records are handled again, and their spans come then. Used by the
 * consumer's loop thread only.
 */
final class ProcessSpans {

    private final Tracing tracing;
    private final String group;
    /** The span name of the topic last seen: the consumer reads one topic. */
    private String topic = "";
    private String name = "process ";

    ProcessSpans(Tracing tracing, String group) {
        this.tracing = tracing;
        this.group = group;
    }

    void committed(List<ConsumerRecord<String, byte[]>> records, Map<ConsumerRecord<String, byte[]>, String> outcomes, Instant started) {
        for (ConsumerRecord<String, byte[]> r : records) {
            String outcome = outcomes.get(r);
            if (outcome != null) {
                span(r, outcome, started).end();
            }
        }
    }

    /** The span of one record, started at {@code started} and not yet ended. */
    Span span(ConsumerRecord<String, byte[]> r, String outcome, Instant started) {
        if (!r.topic().equals(topic)) {
            topic = r.topic();
            name = "process " + topic;
        }
        Span span = tracing.tracer().spanBuilder(name).setSpanKind(SpanKind.CONSUMER)
                .setParent(Tracing.jobContext(r.headers())).setStartTimestamp(started).startSpan();
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
            span.setAttribute(Tracing.OUTCOME, outcome);
            if (BatchProcessor.DEAD_LETTER.equals(outcome)) {
                span.setStatus(StatusCode.ERROR, "dead-lettered");
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
