package dev.fencedjobs.consumer;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assumptions.assumeThat;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.internal.Tracing;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Test;
import org.slf4j.MDC;

/**
 * The consumer's spans with no SDK installed, as most deployments run: a batch whose effect writes
 * all its jobs at once reads no record's trace headers (a consumer's header keys are decoded on
 * first use, so a header looked for and absent decodes them all: 3 % of the loop's time in a profile
 * of the end-to-end benchmark), and a job whose effect runs on its own still logs its producer's
 * trace id.
 */
class ProcessSpansTest {

    private static final String TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";

    @Test
    void withNoSdkABatchEffectsRecordsHaveTheirTraceHeadersUnread_andAJobsOwnEffectLogsItsTrace() {
        Tracing tracing = Tracing.global();
        assumeThat(tracing.installed())
                .as("no OpenTelemetry installed in this JVM")
                .isFalse();
        ProcessSpans spans = new ProcessSpans(tracing, "group");
        CountingHeaders headers = new CountingHeaders();
        headers.add("traceparent", ("00-" + TRACE_ID + "-00f067aa0ba902b7-01").getBytes(StandardCharsets.US_ASCII));
        ConsumerRecord<String, byte[]> record = new ConsumerRecord<>(
                "topic",
                0,
                7L,
                ConsumerRecord.NO_TIMESTAMP,
                TimestampType.NO_TIMESTAMP_TYPE,
                -1,
                -1,
                "r",
                new byte[0],
                headers,
                Optional.empty());
        Job job = new Job(
                1,
                "r",
                FencingToken.of(3),
                "{}",
                OffsetDateTime.now(ZoneOffset.UTC),
                OffsetDateTime.now(ZoneOffset.UTC),
                11,
                OffsetDateTime.now(ZoneOffset.UTC));
        IdentityHashMap<ConsumerRecord<String, byte[]>, String> outcomes = new IdentityHashMap<>();
        outcomes.put(record, BatchProcessor.APPLIED);

        // An effect that writes the batch at once: every job's handling begun, none current.
        spans.begin(Instant.now());
        spans.enter(record, job, false).close();
        assertThat(spans.storing(record)).isNull();
        spans.committed(List.of(record), outcomes);
        assertThat(headers.lookups).as("trace header lookups").isZero();

        // A job's own effect: current, in its producer's context, which the log lines name.
        spans.begin(Instant.now());
        try (BatchProcessor.Handled h = spans.enter(record, job, true)) {
            assertThat(MDC.get(ProcessSpans.MDC_TRACE_ID)).isEqualTo(TRACE_ID);
            assertThat(MDC.get(ProcessSpans.MDC_JOB_ID)).isEqualTo("1");
        }
        spans.committed(List.of(record), outcomes);
        assertThat(MDC.get(ProcessSpans.MDC_TRACE_ID))
                .as("left with the effect")
                .isNull();
        assertThat(headers.lookups)
                .as("the producer's context read for the job's own effect")
                .isPositive();
    }

    /** Headers that count the lookups of one. */
    private static final class CountingHeaders extends RecordHeaders {
        int lookups;

        @Override
        public Header lastHeader(String key) {
            lookups++;
            return super.lastHeader(key);
        }
    }
}
