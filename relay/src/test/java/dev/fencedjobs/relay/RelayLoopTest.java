package dev.fencedjobs.relay;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.lease.ScriptedGrants;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.runtime.internal.Next;
import dev.fencedjobs.runtime.internal.Tracing;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.opentelemetry.api.OpenTelemetry;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TimeoutException;
import org.junit.jupiter.api.Test;

/**
 * The relay loop's steps on a settable clock, with the outbox and the broker in memory. The same
 * paths against real PostgreSQL and Kafka are {@code RelayTest}'s.
 */
class RelayLoopTest {

    private static final int BATCH = 3;
    private static final Duration POLL = Duration.ofSeconds(1);

    private long now = TimeUnit.SECONDS.toNanos(5);
    private final Ticker ticker = () -> now;
    private final ScriptedGrants grants = new ScriptedGrants("relay");
    private final MemoryOutbox outbox = new MemoryOutbox();
    private final MemoryBroker broker = new MemoryBroker();
    private final RelayLoop loop = new RelayLoop(
            config(), grants, outbox, broker, ticker, new SimpleMeterRegistry(), new Tracing(OpenTelemetry.noop()));

    private static RelayConfig config() {
        DatabaseConfig database = DatabaseConfig.of("jdbc:postgresql://localhost/unused", "u", "p");
        return new RelayConfig(
                new ServiceConfig(database, 0, Duration.ofSeconds(10), false),
                new LeaseConfig(Duration.ofSeconds(10), Duration.ofSeconds(3)),
                new KafkaSettings("localhost:9092", "jobs").withTrust(dev.fencedjobs.runtime.RecordTrust.generate()),
                3,
                (short) 1,
                BATCH,
                POLL,
                2048,
                Duration.ofHours(1));
    }

    private void lead(long token) {
        outbox.heldToken = token;
        grants.lead(token);
    }

    @Test
    void aLeaderSendsMarksAndSleepsForThePollIntervalWhenTheOutboxRunsDry() {
        outbox.insert(2);
        assertThat(loop.step()).as("a follower").isEqualTo(Next.await());
        assertThat(broker.sent).isEmpty();

        lead(1);
        assertThat(loop.step()).isEqualTo(Next.sleepUntil(now + POLL.toNanos()));
        assertThat(broker.prepared).containsExactly(1L);
        assertThat(broker.sentIds()).containsExactly(1L, 2L);
        assertThat(broker.sent).allSatisfy(s -> assertThat(s.token()).isEqualTo(1));
        assertThat(outbox.position).isEqualTo(2);

        assertThat(loop.step())
                .as("nothing new: the poll interval again")
                .isEqualTo(Next.sleepUntil(now + POLL.toNanos()));
        assertThat(broker.prepared).as("ready once per token").containsExactly(1L);
    }

    @Test
    void aFollowerIsReadyOnlyOnceItStoodBy() {
        assertThat(loop.ready())
                .as("before its first stand-by, a takeover would wait for the producer")
                .isFalse();
        assertThat(loop.step()).isEqualTo(Next.await());
        assertThat(broker.standBys).isEqualTo(1);
        assertThat(loop.ready()).isTrue();
    }

    @Test
    void aFullBatchGoesAgainAtOnce() {
        lead(1);
        outbox.insert(7);
        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(loop.step()).isEqualTo(Next.sleepUntil(now + POLL.toNanos()));
        assertThat(broker.sentIds()).containsExactly(1L, 2L, 3L, 4L, 5L, 6L, 7L);
    }

    @Test
    void kafkaDownMarksNothingBacksOffAndSendsTheSameRowsAgain() {
        lead(1);
        outbox.insert(2);
        broker.failNext = new TimeoutException("Expiring 2 record(s)");
        Next next = loop.step();
        assertThat(next.kind()).isEqualTo(Next.Kind.BACK_OFF);
        assertThat(next.atNanos() - now).as("the first back-off: 50 to 100 ms").isBetween(ms(50), ms(100));
        assertThat(outbox.position).as("nothing marked").isZero();
        assertThat(loop.ready()).as("not ready while Kafka fails").isFalse();
        assertThat(grants.stepDowns())
                .as("Kafka's fault is no reason to give up the lease")
                .isEmpty();

        now = next.atNanos();
        assertThat(loop.step()).isEqualTo(Next.sleepUntil(now + POLL.toNanos()));
        assertThat(outbox.position).isEqualTo(2);
        assertThat(broker.sentIds()).as("the failed send and the one after it").containsExactly(1L, 2L, 1L, 2L);
        assertThat(loop.ready()).isTrue();
    }

    @Test
    void aRejectedGuardStepsDownAndTheNextLeaderSendsTheRowsAgainUnderItsToken() {
        lead(1);
        outbox.insert(2);
        outbox.heldToken = 2;
        String reason =
                "lease guard rejected token 1; 2 sent rows stay unmarked and will be sent again by the next leader";
        assertThat(loop.step()).isEqualTo(Next.steppedDown(reason));
        assertThat(grants.stepDowns()).containsExactly(reason);
        assertThat(outbox.position).isZero();
        assertThat(broker.resets).as("the producer of token 1 is dropped").isEqualTo(1);
        assertThat(loop.step()).isEqualTo(Next.await());

        lead(2);
        loop.step();
        assertThat(broker.prepared).containsExactly(1L, 2L);
        assertThat(broker.sent).extracting(Sent::token).containsExactly(1L, 1L, 2L, 2L);
        assertThat(outbox.position).isEqualTo(2);
    }

    @Test
    void aGrantThatLapsedWhileTheRowsWereReadSendsNone() {
        lead(1);
        outbox.insert(2);
        outbox.onRead = grants::lose;
        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(broker.sent).isEmpty();
        assertThat(loop.step()).isEqualTo(Next.await());
    }

    @Test
    void aRowTooLargeToSendIsSetAsideWithItsReasonAndTheRestGoOn() {
        lead(1);
        outbox.insert(1);
        outbox.insertPayload("\"" + "x".repeat(4000) + "\"");
        outbox.insert(1);
        loop.step();
        assertThat(broker.sentIds()).containsExactly(1L, 3L);
        assertThat(outbox.errors).containsOnlyKeys(2L);
        assertThat(outbox.errors.get(2L))
                .startsWith("record of about ")
                .endsWith("bytes exceeds MAX_RECORD_BYTES=2048");
        assertThat(outbox.position).isEqualTo(3);
    }

    @Test
    void aBrokerThatRefusesTheNewLeaderBacksOffBeforeAnyRowIsRead() {
        broker.failPrepare = new TimeoutException("topic metadata");
        lead(1);
        outbox.insert(1);
        Next next = loop.step();
        assertThat(next.kind()).isEqualTo(Next.Kind.BACK_OFF);
        assertThat(outbox.reads).isZero();
        assertThat(broker.prepared).isEmpty();

        broker.failPrepare = null;
        now = next.atNanos();
        loop.step();
        assertThat(broker.prepared).containsExactly(1L);
        assertThat(outbox.position).isEqualTo(1);
    }

    @Test
    void aDatabaseFaultStepsDownAndBacksOff() {
        lead(1);
        outbox.insert(1);
        outbox.failNext = new IllegalStateException("connection reset");
        Next next = loop.step();
        assertThat(next).isEqualTo(Next.backOff(next.atNanos(), "reading the outbox failed (IllegalStateException)"));
        assertThat(next.atNanos() - now).isBetween(ms(50), ms(100));
        assertThat(grants.stepDowns()).containsExactly("reading the outbox failed (IllegalStateException)");
        assertThat(broker.sent).isEmpty();
    }

    @Test
    void aShardsLoopWakesForItsOwnNewRowsAndNotForAnotherShards() {
        assertThat(RelayLoop.wakes(Relay.OUTBOX_INSERTED, "3", "3")).isTrue();
        assertThat(RelayLoop.wakes(Relay.OUTBOX_INSERTED, "1", "3"))
                .as("rows of shard 1 wake shard 1's loop only")
                .isFalse();
        assertThat(RelayLoop.wakes(Relay.OUTBOX_INSERTED, "", "3"))
                .as("a trigger from before shards names none: every loop wakes")
                .isTrue();
    }

    @Test
    void stopEndsTheLoop() {
        lead(1);
        loop.stop();
        assertThat(loop.step()).isEqualTo(Next.stopped());
        assertThat(outbox.reads).isZero();
    }

    private static long ms(long millis) {
        return TimeUnit.MILLISECONDS.toNanos(millis);
    }

    record Sent(long token, long outboxId) {}

    /** The outbox in memory: rows in id order, the relay's position, a guard that accepts one token. */
    static final class MemoryOutbox implements OutboxStore {
        final List<OutboxRow> rows = new ArrayList<>();
        final Map<Long, String> errors = new LinkedHashMap<>();
        long position;
        long heldToken;
        int reads;
        RuntimeException failNext;
        Runnable onRead = () -> {};

        void insert(int count) {
            for (int i = 0; i < count; i++) {
                insertPayload("{}");
            }
        }

        void insertPayload(String json) {
            long id = rows.size() + 1L;
            OffsetDateTime at = OffsetDateTime.parse("2027-01-15T08:00:00Z");
            rows.add(new OutboxRow(id, 100 + id, "r-" + id, FencingToken.of(1), json, at, at, at, "test", at, null));
        }

        @Override
        public List<OutboxRow> unpublished(int limit) {
            reads++;
            if (failNext != null) {
                RuntimeException e = failNext;
                failNext = null;
                throw e;
            }
            onRead.run();
            return rows.stream().filter(r -> r.id() > position).limit(limit).toList();
        }

        @Override
        public boolean markPublished(Grant grant, List<Long> published, Map<Long, String> failed) {
            if (grant.token().value() != heldToken) {
                return false;
            }
            errors.putAll(failed);
            position = java.util.stream.Stream.concat(published.stream(), failed.keySet().stream())
                    .mapToLong(Long::longValue)
                    .max()
                    .orElse(position);
            return true;
        }

        @Override
        public int purgePublished(Duration retention, int limit) {
            return 0;
        }

        @Override
        public Lag lag() {
            return new Lag(rows.size() - position, 0);
        }
    }

    /** The broker in memory: what was sent under which token, and the producer's life. */
    static final class MemoryBroker implements Publisher {
        final List<Sent> sent = new ArrayList<>();
        final List<Long> prepared = new ArrayList<>();
        int resets;
        int standBys;

        @Override
        public void standBy() {
            standBys++;
            reset();
        }

        RuntimeException failNext;
        RuntimeException failPrepare;

        List<Long> sentIds() {
            return sent.stream().map(Sent::outboxId).toList();
        }

        @Override
        public void prepare(FencingToken token) {
            if (failPrepare != null) {
                throw failPrepare;
            }
            prepared.add(token.value());
        }

        @Override
        public void publish(FencingToken token, List<ProducerRecord<String, byte[]>> records) {
            for (ProducerRecord<String, byte[]> r : records) {
                long id = Long.parseLong(new String(
                        r.headers()
                                .lastHeader(dev.fencedjobs.runtime.internal.Envelope.OUTBOX_ID_HEADER)
                                .value(),
                        java.nio.charset.StandardCharsets.UTF_8));
                sent.add(new Sent(token.value(), id));
            }
            if (failNext != null) {
                RuntimeException e = failNext;
                failNext = null;
                throw e;
            }
        }

        @Override
        public void reset() {
            resets++;
        }

        @Override
        public void close() {}
    }
}
