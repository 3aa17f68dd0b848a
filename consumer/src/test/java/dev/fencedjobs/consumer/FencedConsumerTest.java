package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_LATE;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_RESOURCE_FENCE;
import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.jooq.DSLContext;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

class FencedConsumerTest {

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

    private long processed() {
        return fixture.dsl().fetchCount(CONSUMER_PROCESSED);
    }

    @Test
    void processedIdsAndRecordsPastTheirRetentionsArePurgedInChunksAndYoungerOnesStay() {
        // More than two chunks of processed ids two days old, a younger one, and an old and a young rejection.
        fixture.dsl()
                .execute(
                        "INSERT INTO consumer_processed (job_id, resource, fencing_token, outcome, processed_at)"
                                + " SELECT g, 'r', 1, 'applied', clock_timestamp() - interval '2 days' FROM generate_series(1, 12000) g");
        fixture.dsl()
                .execute("INSERT INTO consumer_processed (job_id, resource, fencing_token, outcome, processed_at)"
                        + " VALUES (20000, 'r', 1, 'applied', clock_timestamp() - interval '1 hour')");
        fixture.dsl()
                .execute(
                        "INSERT INTO consumer_rejected (job_id, resource, fencing_token, highest_token, topic, kafka_partition, kafka_offset,"
                                + " rejected_at) VALUES (1, 'r', 1, 2, 't', 0, 0, clock_timestamp() - interval '40 days'),"
                                + " (2, 'r', 1, 2, 't', 0, 1, clock_timestamp() - interval '1 day')");
        ConsumerConfig base = fixture.config(500);
        fixture.start(
                new ConsumerConfig(
                        base.service(),
                        base.kafka(),
                        base.groupId(),
                        base.batchSize(),
                        base.effectMaxAttempts(),
                        base.effectRetryBackoff(),
                        Duration.ofDays(1),
                        base.membership(),
                        Duration.ofDays(30)),
                new LedgerEffect(),
                FencedConsumer.COMMIT_SYNC);

        // Chunks of 5,000, again soon while they come back full: all gone well within the idle interval of a minute.
        await().atMost(Duration.ofSeconds(30)).until(() -> processed() == 1);
        assertThat(fixture.dsl().fetchCount(CONSUMER_PROCESSED, CONSUMER_PROCESSED.JOB_ID.eq(20000L)))
                .as("the younger id stays")
                .isEqualTo(1);
        assertThat(fixture.dsl().fetchCount(dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED))
                .as("the younger rejection stays")
                .isEqualTo(1);
        assertThat(fixture.dsl()
                        .fetchCount(
                                dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED,
                                dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED.JOB_ID.eq(2L)))
                .isEqualTo(1);
    }

    @Test
    void theSameRecordTwiceOrAWholeBatchReplayedGivesOneEffectEach() {
        FencedConsumer consumer = fixture.start();
        for (long job = 1; job <= 100; job++) {
            fixture.send(job, "r-" + (job % 5), 1);
        }
        fixture.send(7, "r-2", 1); // the same record again, right behind
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> processed() == 100 && (long) consumer.status().get("duplicates") == 1);

        for (long job = 1; job <= 100; job++) { // the whole stream replayed
            fixture.send(job, "r-" + (job % 5), 1);
        }
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> (long) consumer.status().get("duplicates") == 101);
        assertThat(fixture.ledgerRows()).isEqualTo(100);
        assertThat(fixture.distinctLedgerJobs()).isEqualTo(100);
        assertThat(consumer.status().get("applied")).isEqualTo(100L);
    }

    @Test
    void aLowerTokenAfterAHigherOneIsRejectedAndRecordedAnEqualOneIsApplied() {
        FencedConsumer consumer = fixture.start();
        fixture.send(1, "account-1", 6);
        fixture.send(2, "account-1", 5);
        fixture.send(3, "account-1", 6);
        fixture.send(4, "account-2", 5); // another resource has its own fence
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> processed() == 4);

        DSLContext dsl = fixture.dsl();
        assertThat(dsl.select(LEDGER.JOB_ID).from(LEDGER).orderBy(LEDGER.JOB_ID).fetch(r -> r.value1()))
                .containsExactly(1L, 3L, 4L);
        var rejected = dsl.selectFrom(CONSUMER_REJECTED).fetchSingle();
        assertThat(rejected.getJobId()).isEqualTo(2L);
        assertThat(rejected.getResource()).isEqualTo("account-1");
        assertThat(rejected.getFencingToken()).isEqualTo(5L);
        assertThat(rejected.getHighestToken()).isEqualTo(6L);
        assertThat(rejected.getTopic()).isEqualTo(fixture.topic);
        assertThat(dsl.select(CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN)
                        .from(CONSUMER_RESOURCE_FENCE)
                        .where(CONSUMER_RESOURCE_FENCE.RESOURCE.eq("account-1"))
                        .fetchSingle()
                        .value1())
                .isEqualTo(6L);
        assertThat(dsl.select(CONSUMER_PROCESSED.OUTCOME)
                        .from(CONSUMER_PROCESSED)
                        .where(CONSUMER_PROCESSED.JOB_ID.eq(2L))
                        .fetchSingle()
                        .value1())
                .isEqualTo("rejected");
        assertThat(consumer.status().get("staleRejected")).isEqualTo(1L);
    }

    @Test
    void aLateRecordIsAppliedAndReportedAndOnlyALowerTokenAgainstCommitOrderIsStale() {
        FencedConsumer consumer = fixture.start();
        // Commit order of resource a: outbox rows 1 and 2 with token 1, then 3 and 4 with token 2 (a
        // takeover between them). They arrive 3, 4, 1, 2: rows 1 and 2 are late, not stale. Row 5 with
        // token 1 would have been committed after token 2 began: that contradicts commit order, stale.
        fixture.send(3, "a", 2);
        fixture.send(4, "a", 2);
        fixture.send(1, "a", 1);
        fixture.send(2, "a", 1);
        fixture.send(5, "a", 1);
        // Resource b: the same token, out of order.
        fixture.send(10, "b", 1);
        fixture.send(8, "b", 1);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> processed() == 7);

        DSLContext dsl = fixture.dsl();
        assertThat(dsl.select(LEDGER.JOB_ID).from(LEDGER).orderBy(LEDGER.JOB_ID).fetch(r -> r.value1()))
                .containsExactly(1L, 2L, 3L, 4L, 8L, 10L);
        assertThat(dsl.select(CONSUMER_REJECTED.JOB_ID).from(CONSUMER_REJECTED).fetch(r -> r.value1()))
                .containsExactly(5L);
        assertThat(dsl.select(CONSUMER_LATE.JOB_ID, CONSUMER_LATE.HIGHEST_OUTBOX_ID, CONSUMER_LATE.HIGHEST_TOKEN)
                        .from(CONSUMER_LATE)
                        .orderBy(CONSUMER_LATE.JOB_ID)
                        .fetch(r -> r.value1() + "<" + r.value2() + "@" + r.value3()))
                .as("late records, with the highest outbox id and token applied before each")
                .containsExactly("1<4@2", "2<4@2", "8<10@1");
        var fence = dsl.selectFrom(CONSUMER_RESOURCE_FENCE)
                .where(CONSUMER_RESOURCE_FENCE.RESOURCE.eq("a"))
                .fetchSingle();
        assertThat(fence.getHighestToken()).isEqualTo(2L);
        assertThat(fence.getTokenFirstOutboxId()).isEqualTo(3L);
        assertThat(fence.getHighestOutboxId()).isEqualTo(4L);
        assertThat(consumer.status().get("late")).isEqualTo(3L);
        assertThat(consumer.status().get("staleRejected")).isEqualTo(1L);
    }

    @Test
    void poisonRecordsAreDeadLetteredWithTheirReasonAndTheGoodOnesAroundThemApplied() {
        FencedConsumer consumer = fixture.start();
        fixture.send(1, "p", 1);
        fixture.sendRaw("p", "this is not json");
        fixture.send(2, "p", 1);
        fixture.sendRaw(
                "p",
                "{\"version\":1,\"outboxId\":3,\"jobId\":3,\"resource\":\"p\",\"payload\":{},"
                        + "\"dueAt\":\"2026-11-30T08:00:00Z\",\"completedAt\":\"2026-11-30T08:00:00Z\"}");
        fixture.sendRaw(
                "p",
                new String(ConsumerFixture.envelope(4, "p", 1), StandardCharsets.UTF_8)
                        .replace("\"fencingToken\":1", "\"fencingToken\":-3"));
        fixture.sendRaw("p", (byte[]) null);
        fixture.send(5, "p", 1);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER) == 4 && fixture.ledgerRows() == 3);

        assertThat(fixture.dsl()
                        .select(LEDGER.JOB_ID)
                        .from(LEDGER)
                        .orderBy(LEDGER.JOB_ID)
                        .fetch(r -> r.value1()))
                .containsExactly(1L, 2L, 5L);
        List<String> reasons = fixture.dsl()
                .select(CONSUMER_DEAD_LETTER.REASON)
                .from(CONSUMER_DEAD_LETTER)
                .orderBy(CONSUMER_DEAD_LETTER.KAFKA_OFFSET)
                .fetch(r -> r.value1());
        assertThat(reasons.get(0)).startsWith("not JSON");
        assertThat(reasons.get(1)).isEqualTo("fencingToken is missing");
        assertThat(reasons.get(2)).isEqualTo("fencingToken must be positive, got -3");
        assertThat(reasons.get(3)).isEqualTo("no value (null record)");
        assertThat(new String(
                        fixture.dsl()
                                .select(CONSUMER_DEAD_LETTER.RECORD_VALUE)
                                .from(CONSUMER_DEAD_LETTER)
                                .orderBy(CONSUMER_DEAD_LETTER.KAFKA_OFFSET)
                                .limit(1)
                                .fetchSingle()
                                .value1(),
                        StandardCharsets.UTF_8))
                .isEqualTo("this is not json");
        assertThat(consumer.status().get("deadLettered")).isEqualTo(4L);
    }

    @Test
    void anEffectThatKeepsFailingIsRetriedThenDeadLetteredAndThePartitionMovesOn() {
        Effect failingForJob3 = new Effect() {
            private final LedgerEffect ledger = new LedgerEffect();

            @Override
            public void apply(DSLContext tx, Job job) {
                if (job.jobId() == 3) {
                    throw new IllegalStateException("downstream refused job 3");
                }
                ledger.apply(tx, job);
            }
        };
        // Patient retries off: the quick tries, then the dead letter (PatientRetriesTest has the default).
        FencedConsumer consumer = fixture.start(
                fixture.config(500).withRetries(EffectRetries.OFF), failingForJob3, FencedConsumer.COMMIT_SYNC);
        for (long job = 1; job <= 6; job++) {
            fixture.send(job, "same", 1);
        }
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> fixture.ledgerRows() == 5 && fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER) == 1);
        var dead = fixture.dsl().selectFrom(CONSUMER_DEAD_LETTER).fetchSingle();
        assertThat(dead.getJobId()).isEqualTo(3L);
        assertThat(dead.getReason())
                .isEqualTo("effect failed 3 times: IllegalStateException: downstream refused job 3");
        assertThat(fixture.dsl()
                        .select(CONSUMER_PROCESSED.OUTCOME)
                        .from(CONSUMER_PROCESSED)
                        .where(CONSUMER_PROCESSED.JOB_ID.eq(3L))
                        .fetchSingle()
                        .value1())
                .isEqualTo("dead_letter");

        fixture.send(3, "same", 1); // a redelivery of the dead-lettered job is a duplicate, not a fourth try
        fixture.send(7, "same", 1);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.ledgerRows() == 6);
        assertThat(fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER)).isEqualTo(1);
        assertThat(consumer.status().get("duplicates")).isEqualTo(1L);
    }

    @Test
    void aConsumerKilledAfterItsDatabaseCommitAndBeforeItsOffsetCommitCausesNoDoubleEffect() {
        AtomicBoolean crashed = new AtomicBoolean();
        FencedConsumer first = fixture.start(fixture.config(500), new LedgerEffect(), (consumer, offsets) -> {
            crashed.set(true);
            throw new SimulatedCrash(); // the process dies here: the database has committed, Kafka has not
        });
        for (long job = 1; job <= 300; job++) {
            fixture.send(job, "r-" + (job % 7), 1);
        }
        fixture.flush();
        // The crash is an uncaught Error on the consumer's thread, as intended: Awaitility must not
        // report it as this test's failure.
        await().dontCatchUncaughtExceptions().atMost(Duration.ofSeconds(30)).until(crashed::get);
        int appliedBeforeCrash = fixture.ledgerRows();
        assertThat(appliedBeforeCrash).isPositive();
        first.close();

        FencedConsumer second = fixture.start();
        await().dontCatchUncaughtExceptions().atMost(Duration.ofSeconds(30)).until(() -> processed() == 300);
        await().dontCatchUncaughtExceptions()
                .atMost(Duration.ofSeconds(10))
                .until(() -> (long) second.status().get("duplicates") >= appliedBeforeCrash);
        assertThat(fixture.ledgerRows()).isEqualTo(300);
        assertThat(fixture.distinctLedgerJobs()).isEqualTo(300);
    }

    @Test
    void twoConsumersAndAThirdJoiningMidStreamGiveExactlyOneEffectPerJob() throws Exception {
        fixture.start(fixture.config(200), new LedgerEffect(), FencedConsumer.COMMIT_SYNC);
        fixture.start(fixture.config(200), new LedgerEffect(), FencedConsumer.COMMIT_SYNC);
        for (long job = 1; job <= 5000; job++) {
            fixture.send(job, "r-" + (job % 50), 1);
        }
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.ledgerRows() > 1000);
        fixture.start(fixture.config(200), new LedgerEffect(), FencedConsumer.COMMIT_SYNC);
        for (long job = 5001; job <= 10_000; job++) {
            fixture.send(job, "r-" + (job % 50), 1);
        }
        fixture.flush();
        await().atMost(Duration.ofSeconds(60)).until(() -> processed() == 10_000);
        // Every record committed by the group: none can be delivered again, so the count is final.
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.lag() == 0);
        assertThat(fixture.ledgerRows()).isEqualTo(10_000);
        assertThat(fixture.distinctLedgerJobs()).isEqualTo(10_000);
    }

    /** Thrown past every handler, as a crash would end the process. */
    static final class SimulatedCrash extends Error {
        private static final long serialVersionUID = 1L;
    }
}
