package dev.fencedjobs.relay;

import static dev.fencedjobs.db.jooq.Tables.OUTBOX;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.TraceContext;
import dev.fencedjobs.testing.CompletedJobs;
import dev.fencedjobs.testing.Gate;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestKafka;
import dev.fencedjobs.testing.TopicReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.UnaryOperator;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

class RelayTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private RelayFixture fixture;

    @BeforeEach
    void setUp() {
        fixture = new RelayFixture(postgres.database(), TestKafka.shared().bootstrapServers());
    }

    @AfterEach
    void tearDown() {
        fixture.close();
    }

    @Test
    void tenThousandRowsOverFiftyResourcesAllArriveInCommitOrderPerResource() throws Exception {
        fixture.start();
        for (int i = 0; i < 20; i++) {
            fixture.insertOutbox(500, 50);
            Thread.sleep(20);
        }
        try (TopicReader reader = fixture.reader()) {
            List<ConsumerRecord<String, byte[]>> records = reader.readAtLeast(10_000, Duration.ofSeconds(60));
            assertThat(records).hasSize(10_000);
            fixture.assertAllArrivedInCommitOrderPerResource(records);
            fixture.assertAllSignedByTheRelay(records);
            assertThat(RelayFixture.countsByOutboxId(records).values())
                    .as("no duplicates without faults")
                    .containsOnly(1);

            ConsumerRecord<String, byte[]> first = records.get(0);
            Envelope envelope = Envelope.parse(first.value());
            assertThat(first.key()).isEqualTo(envelope.resource());
            assertThat(TopicReader.headerLong(first, Envelope.JOB_ID_HEADER)).isEqualTo(envelope.jobId());
            assertThat(TopicReader.headerLong(first, Envelope.TOKEN_HEADER))
                    .isEqualTo(1L)
                    .isEqualTo(envelope.fencingToken().value());
            assertThat(envelope.payloadJson()).startsWith("{\"n\":");
        }
        await().atMost(Duration.ofSeconds(10)).until(() -> fixture.unpublished() == 0);
    }

    @Test
    void aRelayKilledAfterTheBrokerAcknowledgedButBeforeMarkingCausesExactlyThatBatchAgain() throws Exception {
        // Relay A "dies" right after the broker acknowledged its batch: its mark and its lease stop for good.
        Gate dead = new Gate();
        List<List<Long>> unmarked = new CopyOnWriteArrayList<>();
        UnaryOperator<OutboxStore> dyingAfterAck = delegate -> new DelegatingStore(delegate) {
            @Override
            public boolean markPublished(Grant grant, List<Long> published, Map<Long, String> failed) {
                if (published.contains(3001L)) {
                    unmarked.add(List.copyOf(published));
                    dead.close();
                }
                dead.pass();
                return super.markPublished(grant, published, failed);
            }
        };
        fixture.insertOutbox(3000, 20);
        Relay a = fixture.start(
                fixture.config(500),
                lease -> RelayFixture.pausing(dead, lease),
                dyingAfterAck,
                UnaryOperator.identity());
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.unpublished() == 0);
        fixture.insertOutbox(2000, 20);
        await().atMost(Duration.ofSeconds(30)).until(() -> dead.waiting() >= 1);

        Relay b = fixture.start();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.unpublished() == 0);
        try (TopicReader reader = fixture.reader()) {
            reader.readAtLeast(5000 + 500, Duration.ofSeconds(60));
            List<ConsumerRecord<String, byte[]>> records = reader.readFor(Duration.ofSeconds(2));
            fixture.assertAllArrivedInCommitOrderPerResource(records);
            Set<Long> duplicated = RelayFixture.countsByOutboxId(records).entrySet().stream()
                    .filter(e -> e.getValue() > 1)
                    .map(Map.Entry::getKey)
                    .collect(Collectors.toCollection(TreeSet::new));
            assertThat(unmarked).hasSize(1);
            assertThat(duplicated)
                    .as("the duplicates are exactly the batch acknowledged but not marked")
                    .containsExactlyElementsOf(new TreeSet<>(unmarked.get(0)));
            assertThat(RelayFixture.countsByOutboxId(records).values()).containsOnly(1, 2);
        }
        assertThat(b.state()).isEqualTo(RunningService.State.LEADING);
        dead.open();
        await().atMost(Duration.ofSeconds(10)).until(() -> a.state() == RunningService.State.FOLLOWING);
    }

    @Test
    void withTwoReplicasOnlyTheHolderPublishesAndARelayPausedAfterReadingSendsNothingWhenItResumes() throws Exception {
        Gate pausedA = new Gate();
        List<Long> heldBatch = new CopyOnWriteArrayList<>();
        // A stops right after reading rows, before it looks at its lease again and sends.
        UnaryOperator<OutboxStore> pauseAfterRead = delegate -> new DelegatingStore(delegate) {
            @Override
            public List<OutboxRow> unpublished(int limit) {
                List<OutboxRow> rows = super.unpublished(limit);
                if (rows.stream().anyMatch(r -> r.id() == 1001L)) {
                    rows.forEach(r -> heldBatch.add(r.id()));
                    pausedA.close();
                }
                pausedA.pass();
                return rows;
            }
        };
        Relay a = fixture.start(
                fixture.config(500),
                lease -> RelayFixture.pausing(pausedA, lease),
                pauseAfterRead,
                UnaryOperator.identity());
        await().atMost(Duration.ofSeconds(10)).until(() -> a.state() == RunningService.State.LEADING);
        Relay b = fixture.start();
        fixture.insertOutbox(1000, 10);
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.unpublished() == 0);
        assertThat(b.state()).as("the other replica stays a follower").isEqualTo(RunningService.State.FOLLOWING);
        assertThat(metric(b, "fencedjobs_relay_published_total"))
                .as("a follower publishes nothing")
                .isZero();

        fixture.insertOutbox(1000, 10);
        await().atMost(Duration.ofSeconds(10)).until(() -> pausedA.waiting() >= 1);
        await().atMost(Duration.ofSeconds(30))
                .until(() -> b.state() == RunningService.State.LEADING && fixture.unpublished() == 0);
        double publishedByA = metric(a, "fencedjobs_relay_published_total");

        // A resumes holding rows it read under a grant whose local deadline has passed: it sends
        // none of them, marks nothing and becomes a follower.
        pausedA.open();
        await().atMost(Duration.ofSeconds(15)).until(() -> a.state() == RunningService.State.FOLLOWING);
        assertThat(metric(a, "fencedjobs_relay_published_total")).isEqualTo(publishedByA);
        try (TopicReader reader = fixture.reader()) {
            reader.readAtLeast(2000, Duration.ofSeconds(30));
            List<ConsumerRecord<String, byte[]>> records = reader.readFor(Duration.ofSeconds(2));
            fixture.assertAllArrivedInCommitOrderPerResource(records);
            assertThat(heldBatch).isNotEmpty();
            Map<Long, Integer> counts = RelayFixture.countsByOutboxId(records);
            assertThat(heldBatch)
                    .allSatisfy(id -> assertThat(counts.get(id))
                            .as("row %d: B's copy only", id)
                            .isEqualTo(1));
        }
    }

    @Test
    void aRelayPausedWhileSendingCanOnlyAddDuplicatesAfterTheNewLeadersCopiesAndCannotMark() throws Exception {
        Gate pausedA = new Gate();
        List<Long> heldBatch = new CopyOnWriteArrayList<>();
        // A stops inside the send, after its last lease check: the window no local check closes.
        UnaryOperator<Publisher> pauseBeforeSend = delegate -> new Publisher() {
            @Override
            public void publish(FencingToken token, List<ProducerRecord<String, byte[]>> records) {
                if (records.stream()
                        .anyMatch(r -> TopicReader.headerLong(toConsumer(r), Envelope.OUTBOX_ID_HEADER) == 1001L)) {
                    records.forEach(
                            r -> heldBatch.add(TopicReader.headerLong(toConsumer(r), Envelope.OUTBOX_ID_HEADER)));
                    pausedA.close();
                }
                pausedA.pass();
                delegate.publish(token, records);
            }

            @Override
            public void reset() {
                delegate.reset();
            }

            @Override
            public void close() {
                delegate.close();
            }
        };
        Relay a = fixture.start(
                fixture.config(500),
                lease -> RelayFixture.pausing(pausedA, lease),
                UnaryOperator.identity(),
                pauseBeforeSend);
        await().atMost(Duration.ofSeconds(10)).until(() -> a.state() == RunningService.State.LEADING);
        Relay b = fixture.start();
        fixture.insertOutbox(1000, 10);
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.unpublished() == 0);

        fixture.insertOutbox(1000, 10);
        await().atMost(Duration.ofSeconds(10)).until(() -> pausedA.waiting() >= 1);
        await().atMost(Duration.ofSeconds(30))
                .until(() -> b.state() == RunningService.State.LEADING && fixture.unpublished() == 0);
        org.jooq.Record markedByB = fixture.position();
        double publishedByA = metric(a, "fencedjobs_relay_published_total");

        // A resumes and sends the rows it held: the broker takes them, but the lease guard refuses
        // A's mark, so A changes nothing in the database and becomes a follower.
        // Its lease thread, resumed with it, may find B's lease first and make it a follower before
        // the worker reaches its mark: wait for the mark's refusal itself.
        pausedA.open();
        await().atMost(Duration.ofSeconds(15)).until(() -> metric(a, "fencedjobs_guard_rejections_total") == 1.0);
        await().atMost(Duration.ofSeconds(5)).until(() -> a.state() == RunningService.State.FOLLOWING);
        assertThat(metric(a, "fencedjobs_relay_published_total")).isEqualTo(publishedByA);
        assertThat(fixture.position()).as("the position as B set it").isEqualTo(markedByB);
        try (TopicReader reader = fixture.reader()) {
            reader.readAtLeast(2000 + heldBatch.size(), Duration.ofSeconds(30));
            List<ConsumerRecord<String, byte[]>> records = reader.readFor(Duration.ofSeconds(2));
            fixture.assertAllArrivedInCommitOrderPerResource(records);
            assertThat(heldBatch).isNotEmpty();
            Map<Long, Integer> counts = RelayFixture.countsByOutboxId(records);
            Set<Long> duplicated = counts.entrySet().stream()
                    .filter(e -> e.getValue() > 1)
                    .map(Map.Entry::getKey)
                    .collect(Collectors.toCollection(TreeSet::new));
            assertThat(duplicated)
                    .as("the only second copies are A's held batch")
                    .containsExactlyElementsOf(new TreeSet<>(heldBatch));
            assertThat(counts.values()).containsOnly(1, 2);
        }
    }

    @Test
    void aJobsTraceContextTravelsAsTheW3CHeadersOutsideTheSignedEnvelope() throws Exception {
        String parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        fixture.dsl().transaction(tx -> {
            tx.dsl().execute(CompletedJobs.LEASE);
            tx.dsl().execute("SET LOCAL fenced_jobs.traceparent = '" + parent + "'");
            tx.dsl().execute("SET LOCAL fenced_jobs.tracestate = 'congo=t61rcWkgMzE'");
            tx.dsl().execute(CompletedJobs.statement(4, "'traced-' || g", "'{}'"));
        });
        fixture.insertOutbox(4, "'untraced-' || g", "'{}'");
        fixture.start();
        try (TopicReader reader = fixture.reader()) {
            List<ConsumerRecord<String, byte[]>> records = reader.readAtLeast(8, Duration.ofSeconds(60));
            assertThat(records).hasSize(8);
            fixture.assertAllSignedByTheRelay(records);
            for (ConsumerRecord<String, byte[]> r : records) {
                Header traceparent = r.headers().lastHeader(TraceContext.TRACEPARENT_HEADER);
                Header tracestate = r.headers().lastHeader(TraceContext.TRACESTATE_HEADER);
                if (r.key().startsWith("traced-")) {
                    assertThat(new String(traceparent.value(), StandardCharsets.US_ASCII))
                            .isEqualTo(parent);
                    assertThat(new String(tracestate.value(), StandardCharsets.US_ASCII))
                            .isEqualTo("congo=t61rcWkgMzE");
                } else {
                    assertThat(traceparent)
                            .as("a job without a context: no header")
                            .isNull();
                    assertThat(tracestate).isNull();
                }
                // The envelope stays version 1 and as it was: the context is in the headers only.
                assertThat(new String(r.value(), StandardCharsets.UTF_8))
                        .doesNotContain("4bf92f3577b34da6a3ce929d0e0e4736");
                assertThat(Envelope.parse(r.value()).version()).isEqualTo(1);
            }
        }
    }

    @Test
    void aRowTooLargeToSendIsSetAsideWithItsReasonAndTheRestFlows() throws Exception {
        fixture.insertOutbox(10, 2);
        fixture.insertOutbox(1, "'big'", "jsonb_build_object('blob', repeat('x', 200000))");
        fixture.insertOutbox(10, 2);
        Relay relay = fixture.start();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.unpublished() == 0);
        String error = fixture.dsl()
                .select(OUTBOX.PUBLISH_ERROR)
                .from(OUTBOX)
                .where(OUTBOX.RESOURCE.eq("big"))
                .fetchSingle()
                .value1();
        assertThat(error).startsWith("record of about ").contains("exceeds MAX_RECORD_BYTES=100000");
        assertThat(metric(relay, "fencedjobs_relay_rejected_rows_total")).isEqualTo(1.0);
        try (TopicReader reader = fixture.reader()) {
            reader.readAtLeast(20, Duration.ofSeconds(30));
            List<ConsumerRecord<String, byte[]>> records = reader.readFor(Duration.ofSeconds(1));
            assertThat(records).hasSize(20);
            fixture.assertAllArrivedInCommitOrderPerResource(records);
        }
    }

    @Test
    void statusAndMetricsShowTheLag() throws Exception {
        Relay relay = fixture.start(
                fixture.config(500), UnaryOperator.identity(), UnaryOperator.identity(), delegate -> new Publisher() {
                    @Override
                    public void publish(FencingToken token, List<ProducerRecord<String, byte[]>> records) {
                        throw new IllegalStateException("broker unavailable (simulated)");
                    }

                    @Override
                    public void reset() {}

                    @Override
                    public void close() {}
                });
        fixture.insertOutbox(42, 3);
        await().atMost(Duration.ofSeconds(10))
                .until(() -> relay.status().get("kafka").toString().contains("broker unavailable"));
        Map<String, Object> status = relay.status();
        assertThat(status.get("unpublishedRows")).isEqualTo(42L);
        assertThat((Double) status.get("oldestUnpublishedSeconds")).isGreaterThanOrEqualTo(0.0);
        assertThat(metric(relay, "fencedjobs_outbox_unpublished")).isEqualTo(42.0);
        assertThat(fixture.unpublished()).as("nothing marked while Kafka fails").isEqualTo(42);
    }

    static double metric(Relay relay, String name) throws Exception {
        java.net.http.HttpResponse<String> response = java.net.http.HttpClient.newHttpClient()
                .send(
                        java.net.http.HttpRequest.newBuilder(
                                        java.net.URI.create("http://localhost:" + relay.httpPort() + "/metrics"))
                                .build(),
                        java.net.http.HttpResponse.BodyHandlers.ofString());
        return response.body()
                .lines()
                .filter(l -> l.startsWith(name + "{") || l.startsWith(name + " "))
                .mapToDouble(l -> Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1)))
                .sum();
    }

    private static ConsumerRecord<String, byte[]> toConsumer(ProducerRecord<String, byte[]> r) {
        ConsumerRecord<String, byte[]> c = new ConsumerRecord<>(r.topic(), 0, 0, r.key(), r.value());
        r.headers().forEach(h -> c.headers().add(h));
        return c;
    }

    /** Passes everything through; tests override what they break. */
    static class DelegatingStore implements OutboxStore {
        private final OutboxStore delegate;

        DelegatingStore(OutboxStore delegate) {
            this.delegate = delegate;
        }

        @Override
        public List<OutboxRow> unpublished(int limit) {
            return delegate.unpublished(limit);
        }

        @Override
        public boolean markPublished(Grant grant, List<Long> published, Map<Long, String> failed) {
            return delegate.markPublished(grant, published, failed);
        }

        @Override
        public int purgePublished(Duration retention, int limit) {
            return delegate.purgePublished(retention, limit);
        }

        @Override
        public Lag lag() {
            return delegate.lag();
        }
    }
}
