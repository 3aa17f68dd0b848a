package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_RESOURCE_FENCE;
import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.LongStream;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Only records a trusted relay key signed are applied. Each forgery here is a well-formed envelope
 * that the fence would otherwise have taken: it must have no effect, move no fence, claim no job
 * id, be dead-lettered as unauthenticated and counted, and every real job around it is applied.
 */
class RecordAuthenticationTest {

    private static final long HUGE_TOKEN = 9_000_000_000_000L;

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private ConsumerFixture fixture;

    @BeforeEach
    void setUp() throws Exception {
        fixture = new ConsumerFixture(postgres.database(), TestKafka.shared().bootstrapServers(), 3);
    }

    @AfterEach
    void tearDown() {
        fixture.close();
    }

    /** Real jobs {@code from..to} of r-1 and r-2 with token 1, outbox id = job id, signed as one relay batch. */
    private void realJobs(long from, long to) {
        List<ProducerRecord<String, byte[]>> batch = new ArrayList<>();
        for (long job = from; job <= to; job++) {
            String resource = "r-" + (1 + job % 2);
            batch.add(new ProducerRecord<>(fixture.topic, resource, ConsumerFixture.envelope(job, resource, 1)));
        }
        fixture.sendBatch(batch);
        fixture.flush();
    }

    private ProducerRecord<String, byte[]> forged(long jobId, long outboxId, long token) {
        OffsetDateTime now = OffsetDateTime.now(ZoneOffset.UTC);
        byte[] value = new Envelope(
                        Envelope.VERSION, outboxId, jobId, "r-1", FencingToken.of(token), "{\"forged\":true}", now, now)
                .toJson();
        return new ProducerRecord<>(fixture.topic, "r-1", value);
    }

    private Map<String, List<Long>> fences() {
        return fixture.dsl()
                .select(
                        CONSUMER_RESOURCE_FENCE.RESOURCE,
                        CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN,
                        CONSUMER_RESOURCE_FENCE.HIGHEST_OUTBOX_ID,
                        CONSUMER_RESOURCE_FENCE.TOKEN_FIRST_OUTBOX_ID)
                .from(CONSUMER_RESOURCE_FENCE)
                .fetchMap(r -> r.value1(), r -> List.of(r.value2(), r.value3(), r.value4()));
    }

    private List<Long> ledgerJobs() {
        return fixture.dsl()
                .select(LEDGER.JOB_ID)
                .from(LEDGER)
                .orderBy(LEDGER.JOB_ID)
                .fetch(r -> r.value1());
    }

    private List<String> unauthenticatedReasons() {
        return fixture.dsl()
                .select(CONSUMER_DEAD_LETTER.REASON)
                .from(CONSUMER_DEAD_LETTER)
                .where(CONSUMER_DEAD_LETTER.REASON.startsWith("unauthenticated"))
                .orderBy(CONSUMER_DEAD_LETTER.ID)
                .fetch(r -> r.value1());
    }

    @Test
    void forgedTamperedAndUnsignedRecordsHaveNoEffectMoveNoFenceAndEveryRealJobIsApplied() {
        FencedConsumer consumer = fixture.start();
        realJobs(1, 20);
        await().atMost(Duration.ofSeconds(30)).until(() -> ledgerJobs().size() == 20);
        Map<String, List<Long>> fencesBefore = fences();

        // 1 and 2: the two forgeries of the security review, unsigned: a huge token with a high and with a low outbox
        // id.
        fixture.sendAsIs(forged(777_777_777L, 777_777_777L, HUGE_TOKEN));
        fixture.sendAsIs(forged(777_777_778L, 1, HUGE_TOKEN));
        // 3: the same, signed, but with a key of the forger's own (or one retired, which is the same to the consumer).
        RecordTrust stranger = RecordTrust.generate();
        ProducerRecord<String, byte[]> ownKey = forged(777_777_779L, 1, HUGE_TOKEN);
        RecordSignatures.sign(stranger, System.currentTimeMillis(), List.of(ownKey));
        fixture.sendAsIs(ownKey);
        // 4: a genuine record of a relay batch, its payload changed on the way (token and all else kept).
        List<ProducerRecord<String, byte[]>> genuine = List.of(
                new ProducerRecord<>(fixture.topic, "r-1", ConsumerFixture.envelope(777_777_780L, "r-1", 1)),
                new ProducerRecord<>(fixture.topic, "r-2", ConsumerFixture.envelope(777_777_781L, "r-2", 1)));
        RecordSignatures.sign(fixture.trust, System.currentTimeMillis(), genuine);
        byte[] changed = new String(genuine.get(0).value(), StandardCharsets.UTF_8)
                .replace("{\"job\":777777780}", "{\"job\":1}")
                .getBytes(StandardCharsets.UTF_8);
        assertThat(changed).isNotEqualTo(genuine.get(0).value());
        ProducerRecord<String, byte[]> tampered = new ProducerRecord<>(
                fixture.topic, null, "r-1", changed, genuine.get(0).headers());
        fixture.sendAsIs(tampered);
        // 5: the untampered sibling of that batch, moved to another resource's key: the key is signed too.
        fixture.sendAsIs(new ProducerRecord<>(
                fixture.topic,
                null,
                "r-1",
                genuine.get(1).value(),
                genuine.get(1).headers()));
        fixture.flush();

        realJobs(21, 220);
        await().atMost(Duration.ofSeconds(60))
                .until(() ->
                        ledgerJobs().size() >= 220 && unauthenticatedReasons().size() == 5);

        assertThat(ledgerJobs())
                .as("every real job once, no forged one")
                .containsExactlyElementsOf(
                        LongStream.rangeClosed(1, 220).boxed().toList());
        assertThat(fixture.dsl().fetchCount(CONSUMER_PROCESSED, CONSUMER_PROCESSED.JOB_ID.ge(777_777_777L)))
                .as("no forged job id claimed")
                .isZero();
        Map<String, List<Long>> fencesAfter = fences();
        assertThat(fencesAfter.get("r-1").get(0))
                .as("r-1's token")
                .isEqualTo(fencesBefore.get("r-1").get(0))
                .isEqualTo(1L);
        assertThat(fencesAfter.get("r-1").get(1))
                .as("r-1's highest outbox id: the last real one")
                .isEqualTo(220L);
        assertThat(fencesAfter.get("r-2").get(1)).isEqualTo(219L);
        assertThat(unauthenticatedReasons())
                .satisfiesExactly(
                        r -> assertThat(r).isEqualTo("unauthenticated: unsigned record (RECORD_SIGNATURES=required)"),
                        r -> assertThat(r).isEqualTo("unauthenticated: unsigned record (RECORD_SIGNATURES=required)"),
                        r -> assertThat(r)
                                .contains("signed with key "
                                        + stranger.signingKeyId().orElseThrow()
                                        + ", which this consumer does not trust"),
                        r -> assertThat(r).contains("signature does not match the record"),
                        r -> assertThat(r).contains("signature does not match the record"));
        assertThat(((Number) consumer.status().get("unauthenticated")).longValue())
                .isEqualTo(5);
        assertThat(((Number) consumer.status().get("applied")).longValue()).isEqualTo(220);
        assertThat(consumer.status().get("signatures").toString())
                .doesNotContain("PRIVATE")
                .contains("required");

        // A replay cannot launder one: it is checked again as it arrived, and stays dead.
        fixture.dsl()
                .execute(
                        "UPDATE consumer_dead_letter SET status = 'replay_requested' WHERE reason LIKE 'unauthenticated%' "
                                + "AND id = (SELECT min(id) FROM consumer_dead_letter)");
        await().atMost(Duration.ofSeconds(30))
                .until(() -> fixture.dsl()
                                .fetchCount(
                                        CONSUMER_DEAD_LETTER,
                                        CONSUMER_DEAD_LETTER.REPLAY_OUTCOME.startsWith("still unauthenticated"))
                        == 1);
        assertThat(ledgerJobs()).hasSize(220);
        assertThat(fences()).isEqualTo(fencesAfter);
    }

    @Test
    void keysRotateWithoutDowntimeAndARetiredKeyIsRefused() {
        RecordTrust next = RecordTrust.generate();
        ConsumerConfig base = fixture.config(500);
        RecordTrust both = fixture.trust.withTrusted(Map.of(
                RecordTrust.keyId(fixture.trust.signing().getPublic()),
                        fixture.trust.signing().getPublic(),
                RecordTrust.keyId(next.signing().getPublic()), next.signing().getPublic()));
        FencedConsumer during = fixture.start(
                withKafka(base, base.kafka().withTrust(both)), new LedgerEffect(), FencedConsumer.COMMIT_SYNC);
        realJobs(1, 10); // signed with the old key
        signedWith(next, 11, 20); // the relays moved to the new one
        await().atMost(Duration.ofSeconds(30)).until(() -> ledgerJobs().size() == 20);
        during.close();

        // The old key retired: only the new one is trusted.
        RecordTrust onlyNext = next.withTrusted(Map.of(
                RecordTrust.keyId(next.signing().getPublic()), next.signing().getPublic()));
        FencedConsumer after = fixture.start(
                withKafka(base, base.kafka().withTrust(onlyNext)), new LedgerEffect(), FencedConsumer.COMMIT_SYNC);
        realJobs(21, 21); // a record signed with the retired key
        signedWith(next, 22, 30);
        await().atMost(Duration.ofSeconds(30))
                .until(() ->
                        ledgerJobs().size() == 29 && unauthenticatedReasons().size() == 1);
        assertThat(ledgerJobs()).doesNotContain(21L);
        assertThat(unauthenticatedReasons().get(0))
                .contains("signed with key " + fixture.trust.signingKeyId().orElseThrow());
        assertThat(((Number) after.status().get("unauthenticated")).longValue()).isEqualTo(1);
    }

    @Test
    void duringARolloutUnsignedRecordsAreAppliedButABadSignatureStillIsNot() {
        ConsumerConfig base = fixture.config(500);
        FencedConsumer consumer = fixture.start(
                withKafka(base, base.kafka().withTrust(fixture.trust.withMode(RecordTrust.Mode.ACCEPT_UNSIGNED))),
                new LedgerEffect(),
                FencedConsumer.COMMIT_SYNC);
        fixture.sendAsIs(new ProducerRecord<>(
                fixture.topic, "r-1", ConsumerFixture.envelope(1, "r-1", 1))); // an old relay's record
        ProducerRecord<String, byte[]> ownKey = forged(2, 2, HUGE_TOKEN);
        RecordSignatures.sign(RecordTrust.generate(), System.currentTimeMillis(), List.of(ownKey));
        fixture.sendAsIs(ownKey);
        realJobs(3, 4);
        await().atMost(Duration.ofSeconds(30))
                .until(() ->
                        ledgerJobs().size() == 3 && unauthenticatedReasons().size() == 1);
        assertThat(ledgerJobs()).containsExactly(1L, 3L, 4L);
        assertThat(fences().get("r-1").get(0)).isEqualTo(1L);
        assertThat(consumer.status().get("signatures").toString()).contains("accept-unsigned");
    }

    @Test
    void aRecordSignedLongerAgoThanTheDedupWindowIsRefusedAsAPossibleReplay() {
        ProducerRecord<String, byte[]> old =
                new ProducerRecord<>(fixture.topic, "r-1", ConsumerFixture.envelope(1, "r-1", 1));
        RecordSignatures.sign(
                fixture.trust, System.currentTimeMillis() - Duration.ofDays(8).toMillis(), List.of(old));
        FencedConsumer consumer = fixture.start();
        fixture.sendAsIs(old);
        realJobs(2, 2);
        await().atMost(Duration.ofSeconds(30))
                .until(() ->
                        ledgerJobs().size() == 1 && unauthenticatedReasons().size() == 1);
        assertThat(ledgerJobs()).containsExactly(2L);
        assertThat(unauthenticatedReasons().get(0)).contains("longer ago than the dedup window (PT168H)");
        assertThat(((Number) consumer.status().get("unauthenticated")).longValue())
                .isEqualTo(1);
    }

    private void signedWith(RecordTrust keys, long from, long to) {
        List<ProducerRecord<String, byte[]>> batch = new ArrayList<>();
        for (long job = from; job <= to; job++) {
            String resource = "r-" + (1 + job % 2);
            batch.add(new ProducerRecord<>(fixture.topic, resource, ConsumerFixture.envelope(job, resource, 1)));
        }
        RecordSignatures.sign(keys, System.currentTimeMillis(), batch);
        batch.forEach(fixture::sendAsIs);
        fixture.flush();
    }

    private static ConsumerConfig withKafka(ConsumerConfig c, dev.fencedjobs.runtime.KafkaSettings kafka) {
        return new ConsumerConfig(
                c.service(),
                kafka,
                c.groupId(),
                c.batchSize(),
                c.effectMaxAttempts(),
                c.effectRetryBackoff(),
                c.processedRetention(),
                c.membership(),
                c.recordsRetention(),
                c.retries());
    }
}
