package dev.fencedjobs.consumer;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.internal.Next;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

/**
 * The consumer loop's steps on a settable clock, with Kafka's own in-memory consumer and the
 * consumer's database in memory: when it commits offsets, retries an effect, gives a record up and
 * backs off, exactly. The same paths against real PostgreSQL and Kafka are {@code FencedConsumerTest}'s.
 */
class ConsumerLoopTest {

    private static final TopicPartition TP = new TopicPartition("jobs", 0);
    private static final int ATTEMPTS = 3;
    private static final Duration ATTEMPT_BACKOFF = Duration.ofMillis(200);

    private long now = TimeUnit.SECONDS.toNanos(5);
    private final Ticker ticker = () -> now;
    private final MockConsumer<String, byte[]> kafka = new MockConsumer<>("earliest");
    private final MemoryStore store = new MemoryStore();
    private final List<Map<TopicPartition, OffsetAndMetadata>> commits = new ArrayList<>();
    private final ConsumerLoop loop = new ConsumerLoop(
            kafka,
            store,
            (consumer, offsets) -> {
                commits.add(offsets);
                consumer.commitSync(offsets);
            },
            ATTEMPTS,
            ATTEMPT_BACKOFF,
            ticker,
            new SimpleMeterRegistry());
    private long nextOffset;

    ConsumerLoopTest() {
        kafka.assign(List.of(TP));
        kafka.updateBeginningOffsets(Map.of(TP, 0L));
    }

    private void send(long... jobs) {
        for (long job : jobs) {
            kafka.addRecord(new ConsumerRecord<>(
                    TP.topic(),
                    TP.partition(),
                    nextOffset++,
                    "r-" + job,
                    ("job " + job).getBytes(StandardCharsets.UTF_8)));
        }
    }

    private long committed() {
        return kafka.committed(Set.of(TP)).get(TP).offset();
    }

    @Test
    void aBatchIsWrittenToTheDatabaseThenItsOffsetsAreCommitted() {
        assertThat(loop.step())
                .as("nothing polled: poll again (the poll itself waits)")
                .isEqualTo(Next.again());
        assertThat(commits).isEmpty();

        send(1, 2, 3);
        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(store.transactions).containsExactly(List.of(1L, 2L, 3L));
        assertThat(committed()).isEqualTo(3);
        assertThat(loop.status()).containsEntry("applied", 3L).containsEntry("kafka", "ok");
    }

    @Test
    void anEffectThatThrowsRetriesItsRecordsOneAtATimeAndGivesUpOnlyOnTheBadOne() {
        store.failures.put(2L, Integer.MAX_VALUE);
        send(1, 2, 3);
        assertThat(loop.step())
                .as("the batch rolled back; job 1 alone went through; job 2's first attempt failed")
                .isEqualTo(Next.again());
        assertThat(store.applied).containsExactly(1L);

        Next wait = loop.step();
        assertThat(wait).isEqualTo(Next.backOff(now + ATTEMPT_BACKOFF.toNanos(), "effect attempt 1 of 3 failed"));
        now = wait.atNanos();
        wait = loop.step();
        assertThat(wait).isEqualTo(Next.backOff(now + ATTEMPT_BACKOFF.toNanos(), "effect attempt 2 of 3 failed"));
        assertThat(commits).as("no offset commit while the batch is in hand").isEmpty();
        now = wait.atNanos();
        assertThat(loop.step())
                .as("the third attempt fails: given up, on to job 3")
                .isEqualTo(Next.again());
        assertThat(store.givenUp)
                .containsExactly(Map.entry(2L, "effect failed 3 times: IllegalStateException: job 2 fails"));

        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(store.applied).containsExactly(1L, 3L);
        assertThat(store.transactions)
                .containsExactly(List.of(1L, 2L, 3L), List.of(1L), List.of(2L), List.of(2L), List.of(2L), List.of(3L));
        assertThat(commits).hasSize(1);
        assertThat(committed()).isEqualTo(3);
        assertThat(loop.status()).containsEntry("applied", 2L).containsEntry("deadLettered", 1L);
    }

    @Test
    void anEffectThatRecoversWithinItsAttemptsIsApplied() {
        store.failures.put(1L, 3); // the batch's transaction, then two of the three attempts
        send(1);
        assertThat(loop.step().reason()).isEqualTo("effect attempt 1 of 3 failed");
        now += ATTEMPT_BACKOFF.toNanos();
        assertThat(loop.step().reason()).isEqualTo("effect attempt 2 of 3 failed");
        now += ATTEMPT_BACKOFF.toNanos();
        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(store.applied).containsExactly(1L);
        assertThat(store.givenUp).isEmpty();
        assertThat(committed()).isEqualTo(1);
    }

    @Test
    void aDatabaseFaultSeeksBackCommitsNothingAndBacksOffLongerEachTime() {
        send(1, 2);
        store.databaseDown = true;
        Next first = loop.step();
        assertThat(first.kind()).isEqualTo(Next.Kind.BACK_OFF);
        assertThat(first.reason()).isEqualTo("database: IllegalStateException");
        assertThat(first.atNanos() - now).as("the first back-off: 50 to 100 ms").isBetween(ms(50), ms(100));
        assertThat(kafka.position(TP)).as("back to the batch's first record").isZero();
        assertThat(commits).isEmpty();
        assertThat(loop.healthy()).isFalse();

        send(3);
        kafka.seek(TP, 2);
        Next second = loop.step();
        assertThat(second.atNanos() - now).as("the second: 100 to 200 ms").isBetween(ms(100), ms(200));

        store.databaseDown = false;
        send(4);
        kafka.seek(TP, 3);
        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(loop.healthy()).isTrue();
        assertThat(committed()).isEqualTo(4);
    }

    @Test
    void aKafkaFaultBacksOffAndMarksTheConsumerUnhealthy() {
        kafka.setPollException(new KafkaException("broker gone"));
        Next next = loop.step();
        assertThat(next.kind()).isEqualTo(Next.Kind.BACK_OFF);
        assertThat(next.reason()).isEqualTo("Kafka: KafkaException");
        assertThat(loop.healthy()).isFalse();
        assertThat(loop.step()).as("the exception was for one poll").isEqualTo(Next.again());
        assertThat(loop.healthy()).isTrue();
    }

    @Test
    void aStopFinishesTheBatchInHandFirst() {
        store.failures.put(1L, 2); // the batch's transaction, then the first attempt
        send(1, 2);
        assertThat(loop.step().reason()).isEqualTo("effect attempt 1 of 3 failed");
        loop.stop();
        now += ATTEMPT_BACKOFF.toNanos();
        assertThat(loop.step()).as("job 1 again").isEqualTo(Next.again());
        assertThat(loop.step()).as("job 2: the batch is done and committed").isEqualTo(Next.again());
        assertThat(committed()).isEqualTo(2);
        assertThat(loop.step()).isEqualTo(Next.stopped());
    }

    private static long ms(long millis) {
        return TimeUnit.MILLISECONDS.toNanos(millis);
    }

    /** The consumer's database in memory: each call one transaction; the effect fails as scripted, rolling its transaction back. */
    static final class MemoryStore implements ConsumerLoop.Store {
        final List<Long> applied = new ArrayList<>();
        final Map<Long, String> givenUp = new LinkedHashMap<>();
        final List<List<Long>> transactions = new ArrayList<>();
        /** Job id to the attempts that still fail. */
        final Map<Long, Integer> failures = new HashMap<>();

        boolean databaseDown;

        private static long job(ConsumerRecord<String, byte[]> r) {
            return Long.parseLong(new String(r.value(), StandardCharsets.UTF_8).substring(4));
        }

        @Override
        public Counts process(List<ConsumerRecord<String, byte[]>> records) {
            if (databaseDown) {
                throw new IllegalStateException("connection refused");
            }
            List<Long> jobs = records.stream().map(MemoryStore::job).toList();
            transactions.add(jobs);
            for (long job : jobs) {
                int left = failures.getOrDefault(job, 0);
                if (left > 0) {
                    failures.put(job, left - 1);
                    throw new BatchProcessor.EffectFailure(new IllegalStateException("job " + job + " fails"));
                }
            }
            int fresh = 0;
            for (long job : jobs) {
                if (!applied.contains(job)) {
                    applied.add(job);
                    fresh++;
                }
            }
            return new Counts(fresh, jobs.size() - fresh, 0, 0, 0, 0);
        }

        @Override
        public Counts giveUp(ConsumerRecord<String, byte[]> record, String reason) {
            givenUp.put(job(record), reason);
            return new Counts(0, 0, 0, 1, 0, 0);
        }
    }
}
