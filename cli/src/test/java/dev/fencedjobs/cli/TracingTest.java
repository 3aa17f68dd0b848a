package dev.fencedjobs.cli;

import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.consumer.ConsumerConfig;
import dev.fencedjobs.consumer.Effect;
import dev.fencedjobs.consumer.EffectRetries;
import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.consumer.Job;
import dev.fencedjobs.consumer.LedgerEffect;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.dispatcher.DispatcherConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.relay.Relay;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.runtime.internal.Tracing;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TestKafka;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.LinkData;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.jooq.DSLContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.MDC;

/**
 * One job's trace against a real PostgreSQL and a real Kafka broker, with the OpenTelemetry SDK's
 * in-memory exporter lent to each service: a producer inserts a job with a known
 * {@code traceparent}; the consumer's span for it is in the producer's trace, a child of the
 * producer's span, with the job's attributes and its outcome; the relay's send span links to it; the
 * dispatcher's batch span says what it completed. A job without a context starts a trace of its
 * own. While the effect runs, the consumer's span is current and the logging MDC names the job, its
 * trace and that span; an effect that throws ends its span as rolled back, with the exception. The
 * policy path's batch links to its jobs as the plain path's does. A patient retry, a record put to
 * wait behind another, a dead letter's replay and a record dead-lettered unread each keep the span of
 * their first attempt, and the later span links to it.
 */
class TracingTest {

    private static final String TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
    private static final String PRODUCER_SPAN = "00f067aa0ba902b7";

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void theConsumersSpanForAJobIsInTheTraceItsProducerSubmittedItIn() throws Exception {
        TestDatabase db = postgres.database();
        DatabaseConfig database = DatabaseConfig.of(db.url(), db.user(), db.password())
                .withPoolSize(2)
                .withConnectTimeout(Duration.ofSeconds(1))
                .withServerTimeouts(Duration.ofMillis(500), Duration.ofMillis(500), Duration.ofSeconds(1));
        ServiceConfig service = new ServiceConfig(database, 0, Duration.ofSeconds(5), true);
        LeaseConfig lease = new LeaseConfig(Duration.ofSeconds(2), Duration.ofMillis(500));
        String topic = "traces-" + UUID.randomUUID();
        KafkaSettings kafka =
                new KafkaSettings(TestKafka.shared().bootstrapServers(), topic).withTrust(RecordTrust.generate());
        InMemorySpanExporter exported = InMemorySpanExporter.create();
        SeeingEffect effect = new SeeingEffect();
        List<AutoCloseable> closing = new ArrayList<>();
        try (OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
                .setTracerProvider(SdkTracerProvider.builder()
                        .addSpanProcessor(SimpleSpanProcessor.create(exported))
                        .build())
                .build()) {
            try {
                Database.migrate(db.dataSource());
                closing.add(Dispatcher.builder(new DispatcherConfig(service, lease, 100))
                        .openTelemetry(sdk)
                        .start());
                closing.add(Relay.builder(new RelayConfig(
                                service,
                                lease,
                                kafka,
                                3,
                                (short) 1,
                                100,
                                Duration.ofSeconds(1),
                                100_000,
                                Duration.ofHours(1)))
                        .openTelemetry(sdk)
                        .start());
                // Patient retries that give up after 300 ms: a record that keeps failing becomes a dead letter at its
                // first retry.
                closing.add(FencedConsumer.builder(
                                new ConsumerConfig(
                                                service,
                                                kafka,
                                                "traces",
                                                100,
                                                3,
                                                Duration.ofMillis(10),
                                                Duration.ofDays(7))
                                        .withRetries(new EffectRetries(Duration.ofMillis(300), Duration.ofMillis(100))),
                                effect)
                        .openTelemetry(sdk)
                        .start());
                DSLContext dsl = Database.dsl(db.dataSource());
                long traced = dsl.fetchOne(
                                "INSERT INTO jobs (resource, due_at, traceparent) VALUES ('account-1', clock_timestamp(), ?) RETURNING id",
                                "00-" + TRACE_ID + "-" + PRODUCER_SPAN + "-01")
                        .get(0, Long.class);
                long untraced = dsl.fetchOne(
                                "INSERT INTO jobs (resource, due_at) VALUES ('account-2', clock_timestamp()) RETURNING id")
                        .get(0, Long.class);
                await().atMost(Duration.ofSeconds(60))
                        .until(() -> dsl.fetchCount(LEDGER) == 2
                                && processed(exported, traced) != null
                                && processed(exported, untraced) != null);

                SpanData consumer = processed(exported, traced);
                assertThat(consumer.getTraceId()).as("the producer's trace").isEqualTo(TRACE_ID);
                assertThat(consumer.getParentSpanId())
                        .as("a child of the producer's span")
                        .isEqualTo(PRODUCER_SPAN);
                assertThat(consumer.getKind()).isEqualTo(SpanKind.CONSUMER);
                assertThat(consumer.getName()).isEqualTo("process " + topic);
                assertThat(consumer.getAttributes().get(Tracing.OUTCOME)).isEqualTo("applied");
                assertThat(consumer.getAttributes().get(Tracing.RESOURCE)).isEqualTo("account-1");
                assertThat(consumer.getAttributes().get(Tracing.MESSAGING_SYSTEM))
                        .isEqualTo("kafka");
                assertThat(consumer.getAttributes().get(Tracing.DESTINATION)).isEqualTo(topic);
                long token = dsl.fetchOne("SELECT completed_by_token FROM jobs WHERE id = ?", traced)
                        .get(0, Long.class);
                assertThat(consumer.getAttributes().get(Tracing.FENCING_TOKEN)).isEqualTo(token);
                assertThat(consumer.getAttributes().get(Tracing.OUTBOX_ID))
                        .isEqualTo(dsl.fetchOne("SELECT id FROM outbox WHERE job_id = ?", traced)
                                .get(0, Long.class));
                assertThat(effect.seen.get(traced))
                        .as("while the effect ran: the logging MDC and the current span are the job's")
                        .isEqualTo(
                                new Seen(String.valueOf(traced), TRACE_ID, consumer.getSpanId(), consumer.getSpanId()));

                writeTrace(exported.getFinishedSpanItems(), traced);

                SpanData other = processed(exported, untraced);
                assertThat(other.getTraceId())
                        .as("a job without a context: a trace of its own")
                        .isNotEqualTo(TRACE_ID);
                assertThat(other.getParentSpanContext().isValid()).as("a root").isFalse();
                assertThat(effect.seen.get(untraced))
                        .isEqualTo(new Seen(
                                String.valueOf(untraced), other.getTraceId(), other.getSpanId(), other.getSpanId()));

                List<LinkData> sendLinks = exported.getFinishedSpanItems().stream()
                        .filter(s ->
                                s.getKind() == SpanKind.PRODUCER && s.getName().equals("send " + topic))
                        .flatMap(s -> s.getLinks().stream())
                        .toList();
                assertThat(sendLinks)
                        .as("the relay's send span links to the producer's span")
                        .anyMatch(l -> l.getSpanContext().getTraceId().equals(TRACE_ID)
                                && l.getSpanContext().getSpanId().equals(PRODUCER_SPAN)
                                && Long.valueOf(traced).equals(l.getAttributes().get(Tracing.JOB_ID)));
                assertThat(exported.getFinishedSpanItems())
                        .as("the dispatcher's batch, with what it completed, linked to the producer's span")
                        .anyMatch(s -> s.getName().equals("dispatch batch")
                                && Long.valueOf(token).equals(s.getAttributes().get(Tracing.LEASE_TOKEN))
                                && s.getAttributes().get(Tracing.BATCH_COMPLETED) > 0
                                && s.getLinks().stream()
                                        .anyMatch(l ->
                                                l.getSpanContext().getTraceId().equals(TRACE_ID)
                                                        && l.getSpanContext()
                                                                .getSpanId()
                                                                .equals(PRODUCER_SPAN)
                                                        && Long.valueOf(traced)
                                                                .equals(l.getAttributes()
                                                                        .get(Tracing.JOB_ID)))
                                && s.getLinks().stream()
                                        .noneMatch(l -> Long.valueOf(untraced)
                                                .equals(l.getAttributes().get(Tracing.JOB_ID))));

                // The policy path (a pending job with a priority sends the batch there): its batch links to the jobs'
                // contexts too.
                long prioritized = dsl.fetchOne(
                                "INSERT INTO jobs (resource, due_at, priority, traceparent) VALUES ('account-3', clock_timestamp(), 5, ?)"
                                        + " RETURNING id",
                                "00-" + TRACE_ID + "-" + PRODUCER_SPAN + "-01")
                        .get(0, Long.class);
                await().atMost(Duration.ofSeconds(60)).until(() -> processed(exported, prioritized) != null);
                assertThat(exported.getFinishedSpanItems())
                        .as("the policy path's batch, linked to the producer's span")
                        .anyMatch(s -> s.getName().equals("dispatch batch")
                                && "policy".equals(s.getAttributes().get(Tracing.BATCH_PATH))
                                && s.getLinks().stream()
                                        .anyMatch(l ->
                                                l.getSpanContext().getTraceId().equals(TRACE_ID)
                                                        && l.getSpanContext()
                                                                .getSpanId()
                                                                .equals(PRODUCER_SPAN)
                                                        && Long.valueOf(prioritized)
                                                                .equals(l.getAttributes()
                                                                        .get(Tracing.JOB_ID))));

                // An effect that throws: its batch rolls back, and its span says so, with the exception; the retry
                // applies it in a span of its own.
                long failing = dsl.fetchOne(
                                "INSERT INTO jobs (resource, due_at, traceparent) VALUES (?, clock_timestamp(), ?) RETURNING id",
                                SeeingEffect.FAILS_ONCE,
                                "00-" + TRACE_ID + "-" + PRODUCER_SPAN + "-01")
                        .get(0, Long.class);
                await().atMost(Duration.ofSeconds(60)).until(() -> processed(exported, failing) != null);
                SpanData rolledBack = exported.getFinishedSpanItems().stream()
                        .filter(s -> Long.valueOf(failing)
                                        .equals(s.getAttributes().get(Tracing.JOB_ID))
                                && "rolled back".equals(s.getAttributes().get(Tracing.OUTCOME)))
                        .findFirst()
                        .orElseThrow();
                assertThat(rolledBack.getTraceId()).isEqualTo(TRACE_ID);
                assertThat(rolledBack.getStatus().getStatusCode()).isEqualTo(StatusCode.ERROR);
                assertThat(rolledBack.getEvents())
                        .as("the effect's exception")
                        .anyMatch(e -> e.getName().equals("exception")
                                && "the effect fails once"
                                        .equals(e.getAttributes().get(AttributeKey.stringKey("exception.message"))));
                SpanData applied = processed(exported, failing);
                assertThat(applied.getSpanId()).isNotEqualTo(rolledBack.getSpanId());
                assertThat(applied.getParentSpanId()).isEqualTo(PRODUCER_SPAN);

                // A patient retry: the loop's attempts fail, it waits (the span that put it to wait is its first
                // attempt), and the retry that applies it is in the job's trace, linked to that first attempt.
                long patient = dsl.fetchOne(
                                "INSERT INTO jobs (resource, due_at, traceparent) VALUES (?, clock_timestamp(), ?) RETURNING id",
                                SeeingEffect.FAILS_UNTIL_RETRIED,
                                "00-" + TRACE_ID + "-" + PRODUCER_SPAN + "-01")
                        .get(0, Long.class);
                await().atMost(Duration.ofSeconds(60)).until(() -> outcome(exported, patient, "applied") != null);
                SpanData waited = outcome(exported, patient, "waiting");
                assertThat(waited)
                        .as("the span of the attempt that put it to wait")
                        .isNotNull();
                assertThat(waited.getParentSpanId()).isEqualTo(PRODUCER_SPAN);
                SpanData retried = outcome(exported, patient, "applied");
                assertThat(retried.getTraceId())
                        .as("the retry in the job's trace")
                        .isEqualTo(TRACE_ID);
                assertThat(retried.getParentSpanId()).isEqualTo(PRODUCER_SPAN);
                assertThat(retried.getAttributes().get(Tracing.ATTEMPT))
                        .as("after the loop's three (EFFECT_MAX_ATTEMPTS) that failed")
                        .isEqualTo(4L);
                assertThat(retried.getLinks())
                        .as("linked to its first attempt")
                        .singleElement()
                        .satisfies(l -> {
                            assertThat(l.getSpanContext().getSpanId()).isEqualTo(waited.getSpanId());
                            assertThat(l.getSpanContext().getTraceId()).isEqualTo(TRACE_ID);
                            assertThat(l.getAttributes().get(Tracing.LINK_KIND)).isEqualTo("first attempt");
                        });

                // A record put to wait behind an earlier one of its resource, in the loop's batch: the span of that
                // batch's attempt is its first attempt, and the retry that applies it links to it. The earlier one
                // fails for good and becomes a dead letter at its first retry; then the later one is retried.
                List<Long> queue = dsl.fetch(
                                "INSERT INTO jobs (resource, payload, due_at, traceparent) VALUES"
                                        + " ('queue', ?::jsonb, now() - interval '1 second', ?), ('queue', '{}', now(), ?) RETURNING id",
                                "{\"" + SeeingEffect.FAILS_FOR_GOOD + "\": true}",
                                "00-" + TRACE_ID + "-" + PRODUCER_SPAN + "-01",
                                "00-" + TRACE_ID + "-" + PRODUCER_SPAN + "-01")
                        .getValues(0, Long.class);
                long behind = queue.get(1);
                await().atMost(Duration.ofSeconds(60)).until(() -> outcome(exported, behind, "applied") != null);
                SpanData putToWait = outcome(exported, behind, "waiting");
                assertThat(putToWait)
                        .as("the span of the batch that put it to wait behind " + queue.get(0))
                        .isNotNull();
                assertThat(putToWait.getParentSpanId()).isEqualTo(PRODUCER_SPAN);
                assertThat(dsl.fetchCount(dsl.selectFrom("consumer_dead_letter WHERE job_id = " + queue.get(0))))
                        .as("the one in front")
                        .isEqualTo(1);
                SpanData appliedBehind = outcome(exported, behind, "applied");
                assertThat(appliedBehind.getParentSpanId()).isEqualTo(PRODUCER_SPAN);
                assertThat(appliedBehind.getLinks())
                        .as("linked to the batch that put it to wait")
                        .singleElement()
                        .satisfies(l -> {
                            assertThat(l.getSpanContext().getSpanId()).isEqualTo(putToWait.getSpanId());
                            assertThat(l.getAttributes().get(Tracing.LINK_KIND)).isEqualTo("first attempt");
                        });

                // A dead letter: it waits, its retry fails past the 300 ms (a span of its own, linked too), it
                // is dead-lettered; an operator's replay applies it in the job's trace, linked to the first attempt.
                long dead = dsl.fetchOne(
                                "INSERT INTO jobs (resource, due_at, traceparent) VALUES (?, clock_timestamp(), ?) RETURNING id",
                                SeeingEffect.FAILS_UNTIL_REPLAYED,
                                "00-" + TRACE_ID + "-" + PRODUCER_SPAN + "-01")
                        .get(0, Long.class);
                await().atMost(Duration.ofSeconds(60))
                        .until(() ->
                                dsl.fetchCount(dsl.selectFrom("consumer_dead_letter WHERE job_id = " + dead)) == 1);
                SpanData firstAttempt = outcome(exported, dead, "waiting");
                assertThat(firstAttempt).isNotNull();
                assertThat(exported.getFinishedSpanItems())
                        .as("the failed retry's span, linked to the first attempt")
                        .anyMatch(s -> Long.valueOf(dead)
                                        .equals(s.getAttributes().get(Tracing.JOB_ID))
                                && "rolled back".equals(s.getAttributes().get(Tracing.OUTCOME))
                                && Long.valueOf(4).equals(s.getAttributes().get(Tracing.ATTEMPT))
                                && s.getLinks().stream()
                                        .anyMatch(l ->
                                                l.getSpanContext().getSpanId().equals(firstAttempt.getSpanId())));
                effect.replayable.set(true);
                dsl.execute("UPDATE consumer_dead_letter SET status = 'replay_requested' WHERE job_id = ?", dead);
                await().atMost(Duration.ofSeconds(60)).until(() -> outcome(exported, dead, "applied") != null);
                SpanData replayed = outcome(exported, dead, "applied");
                assertThat(replayed.getTraceId()).isEqualTo(TRACE_ID);
                assertThat(replayed.getParentSpanId())
                        .as("the stored record kept the job's context")
                        .isEqualTo(PRODUCER_SPAN);
                assertThat(replayed.getLinks()).singleElement().satisfies(l -> {
                    assertThat(l.getSpanContext().getSpanId()).isEqualTo(firstAttempt.getSpanId());
                    assertThat(l.getAttributes().get(Tracing.LINK_KIND)).isEqualTo("first attempt");
                });

                // A record the consumer cannot authenticate (not signed; a trace context in its headers) is
                // dead-lettered unread, in a span under that context, which the dead letter keeps as its first attempt.
                String unsignedParent = "b7ad6b7169203331";
                try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(
                        Map.of(
                                ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
                                TestKafka.shared().bootstrapServers()),
                        new StringSerializer(),
                        new ByteArraySerializer())) {
                    ProducerRecord<String, byte[]> unsigned =
                            new ProducerRecord<>(topic, "account-9", "not a job".getBytes(StandardCharsets.UTF_8));
                    unsigned.headers()
                            .add(
                                    "traceparent",
                                    ("00-" + TRACE_ID + "-" + unsignedParent + "-01")
                                            .getBytes(StandardCharsets.US_ASCII));
                    producer.send(unsigned).get();
                }
                await().atMost(Duration.ofSeconds(60))
                        .until(() -> dsl.fetchCount(dsl.selectFrom("consumer_dead_letter WHERE job_id IS NULL")) == 1
                                && unreadSpan(exported, unsignedParent) != null);
                SpanData unread = unreadSpan(exported, unsignedParent);
                assertThat(unread.getTraceId()).isEqualTo(TRACE_ID);
                assertThat(unread.getStatus().getStatusCode()).isEqualTo(StatusCode.ERROR);
                var stored = dsl.fetchOne(
                        "SELECT traceparent, first_attempt FROM consumer_dead_letter WHERE job_id IS NULL");
                assertThat(stored.get(0, String.class))
                        .as("the record's context")
                        .isEqualTo("00-" + TRACE_ID + "-" + unsignedParent + "-01");
                assertThat(stored.get(1, String.class))
                        .as("the span of the batch that dead-lettered it")
                        .isEqualTo("00-" + TRACE_ID + "-" + unread.getSpanId() + "-01");
            } finally {
                for (AutoCloseable c : closing) {
                    c.close();
                }
            }
        }
    }

    /**
     * The spans of the traced job as the exporter got them, one entry each, for docs/tracing.md:
     * {@code target/trace-of-one-job.txt}. The consumer's span is in the job's trace; the relay's
     * send span is a root of its own, linked to the producer's span.
     */
    private static void writeTrace(List<SpanData> spans, long jobId) throws IOException {
        StringBuilder out = new StringBuilder("trace " + TRACE_ID + ": the traceparent inserted with job " + jobId
                + ", producer's span " + PRODUCER_SPAN + "\n");
        for (SpanData s : spans) {
            List<LinkData> links = s.getLinks().stream()
                    .filter(l -> l.getSpanContext().getTraceId().equals(TRACE_ID)
                            && Long.valueOf(jobId).equals(l.getAttributes().get(Tracing.JOB_ID)))
                    .toList();
            if (!links.isEmpty()
                    || (s.getTraceId().equals(TRACE_ID)
                            && Long.valueOf(jobId).equals(s.getAttributes().get(Tracing.JOB_ID)))) {
                out.append(String.format(
                        Locale.ROOT,
                        "%s \"%s\" trace %s span %s, parent %s, %.1f ms%n",
                        s.getKind(),
                        s.getName(),
                        s.getTraceId(),
                        s.getSpanId(),
                        s.getParentSpanContext().isValid() ? s.getParentSpanId() : "none (a root)",
                        (s.getEndEpochNanos() - s.getStartEpochNanos()) / 1e6));
                for (LinkData l : links) {
                    out.append("  link to ")
                            .append(l.getSpanContext().getTraceId())
                            .append('/')
                            .append(l.getSpanContext().getSpanId())
                            .append(' ')
                            .append(l.getAttributes().asMap())
                            .append('\n');
                }
                s.getAttributes()
                        .forEach((k, v) -> out.append("  ")
                                .append(k.getKey())
                                .append(" = ")
                                .append(v)
                                .append('\n'));
            }
        }
        Files.writeString(Path.of("target", "trace-of-one-job.txt"), out);
    }

    /** The consumer's span for a job that committed, once exported. */
    private static SpanData processed(InMemorySpanExporter exported, long jobId) {
        return exported.getFinishedSpanItems().stream()
                .filter(s -> s.getKind() == SpanKind.CONSUMER
                        && Long.valueOf(jobId).equals(s.getAttributes().get(Tracing.JOB_ID))
                        && !"rolled back".equals(s.getAttributes().get(Tracing.OUTCOME)))
                .findFirst()
                .orElse(null);
    }

    /** The consumer's span of the record sent with parent span {@code parent}, dead-lettered unread. */
    private static SpanData unreadSpan(InMemorySpanExporter exported, String parent) {
        return exported.getFinishedSpanItems().stream()
                .filter(s -> s.getKind() == SpanKind.CONSUMER
                        && parent.equals(s.getParentSpanId())
                        && "dead_letter".equals(s.getAttributes().get(Tracing.OUTCOME)))
                .findFirst()
                .orElse(null);
    }

    /** The consumer's span for a job with that outcome, once exported. */
    private static SpanData outcome(InMemorySpanExporter exported, long jobId, String outcome) {
        return exported.getFinishedSpanItems().stream()
                .filter(s -> s.getKind() == SpanKind.CONSUMER
                        && Long.valueOf(jobId).equals(s.getAttributes().get(Tracing.JOB_ID))
                        && outcome.equals(s.getAttributes().get(Tracing.OUTCOME)))
                .findFirst()
                .orElse(null);
    }

    /** What an effect saw while it ran: the MDC's job id, trace id and span id, and the current span's id. */
    private record Seen(String jobId, String traceId, String spanId, String currentSpanId) {}

    /**
     * The ledger's effect, noting what it saw for each job; a job of {@link #FAILS_ONCE} throws the
     * first time, one of {@link #FAILS_UNTIL_RETRIED} until a patient retry runs it (on the consumer's
     * retry thread), one of {@link #FAILS_UNTIL_REPLAYED} until {@link #replayable}, one whose payload
     * names {@link #FAILS_FOR_GOOD} always.
     */
    private static final class SeeingEffect implements Effect {
        static final String FAILS_ONCE = "fails-once";
        static final String FAILS_UNTIL_RETRIED = "fails-until-retried";
        static final String FAILS_UNTIL_REPLAYED = "fails-until-replayed";
        /** A payload field: the job's effect always fails. */
        static final String FAILS_FOR_GOOD = "fails-for-good";

        final Map<Long, Seen> seen = new ConcurrentHashMap<>();
        final AtomicBoolean replayable = new AtomicBoolean();
        private final LedgerEffect ledger = new LedgerEffect();
        private final AtomicBoolean failed = new AtomicBoolean();

        @Override
        public void apply(DSLContext tx, Job job) {
            seen.put(
                    job.jobId(),
                    new Seen(
                            MDC.get("job_id"),
                            MDC.get("trace_id"),
                            MDC.get("span_id"),
                            Span.current().getSpanContext().getSpanId()));
            if (job.resource().equals(FAILS_ONCE) && failed.compareAndSet(false, true)) {
                throw new IllegalStateException("the effect fails once");
            }
            if (job.resource().equals(FAILS_UNTIL_RETRIED)
                    && !Thread.currentThread().getName().equals("consumer-retry")) {
                throw new IllegalStateException("the effect fails until a patient retry");
            }
            if (job.payloadJson() != null && job.payloadJson().contains(FAILS_FOR_GOOD)) {
                throw new IllegalStateException("the effect fails for good");
            }
            if (job.resource().equals(FAILS_UNTIL_REPLAYED) && !replayable.get()) {
                throw new IllegalStateException("the effect fails until the replay");
            }
            ledger.apply(tx, job);
        }
    }
}
