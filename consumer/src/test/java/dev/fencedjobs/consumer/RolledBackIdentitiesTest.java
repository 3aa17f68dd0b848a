package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_LATE;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED_REISSUED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REUSED;
import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestKafka;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * What a database rolled back by a failover hands out twice, seen from the consumer: a job id on
 * another job, and a token to another tenure. Each new job is applied once, each reuse reported once.
 */
class RolledBackIdentitiesTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private static final OffsetDateTime T0 = OffsetDateTime.of(2026, 12, 1, 9, 0, 0, 0, ZoneOffset.UTC);
    private static final OffsetDateTime ACQUIRED_A = T0.minusMinutes(10);
    private static final OffsetDateTime ACQUIRED_B = T0.minusMinutes(5);

    private ConsumerFixture fixture;

    @BeforeEach
    void setUp() throws Exception {
        // One partition: the records of different resources keep the order they are sent in.
        fixture = new ConsumerFixture(postgres.database(), TestKafka.shared().bootstrapServers(), 1);
    }

    @AfterEach
    void tearDown() {
        fixture.close();
    }

    private void send(
            long outboxId,
            long jobId,
            String resource,
            long token,
            OffsetDateTime createdAt,
            String holder,
            OffsetDateTime acquiredAt) {
        fixture.sendRaw(
                resource,
                new Envelope(
                                Envelope.VERSION,
                                outboxId,
                                jobId,
                                resource,
                                FencingToken.of(token),
                                "{\"job\":" + jobId + "}",
                                T0,
                                T0,
                                createdAt,
                                holder,
                                acquiredAt)
                        .toJson());
    }

    private long reused(String kind) {
        return fixture.dsl().fetchCount(CONSUMER_REUSED, CONSUMER_REUSED.KIND.eq(kind));
    }

    @Test
    void aJobIdHandedOutAgainIsANewJobAppliedOnceAndReportedOnce() {
        FencedConsumer consumer = fixture.start();
        send(1, 1, "r", 1, T0, "a", ACQUIRED_A);
        send(2, 2, "r", 1, T0.plusSeconds(1), "a", ACQUIRED_A);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.ledgerRows() == 2);

        // The promoted database gives ids 1 and 2 to jobs created after the promotion; in one batch with a
        // redelivery of the first job 2, and with the second job 1 twice.
        send(1, 1, "r", 1L << 32 | 1, T0.plusSeconds(10), "b", ACQUIRED_B);
        send(2, 2, "r", 1, T0.plusSeconds(1), "a", ACQUIRED_A);
        send(3, 2, "r", 1L << 32 | 1, T0.plusSeconds(11), "b", ACQUIRED_B);
        send(1, 1, "r", 1L << 32 | 1, T0.plusSeconds(10), "b", ACQUIRED_B);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() ->
                        fixture.ledgerRows() == 4 && (long) consumer.status().get("duplicates") == 2);

        assertThat(fixture.dsl().fetchCount(LEDGER, LEDGER.JOB_ID.eq(1L)))
                .as("two jobs with id 1, one effect each")
                .isEqualTo(2);
        assertThat(fixture.dsl().fetchCount(LEDGER, LEDGER.JOB_ID.eq(2L))).isEqualTo(2);
        assertThat(fixture.dsl()
                        .fetchCount(fixture.dsl()
                                .selectDistinct(LEDGER.JOB_ID, LEDGER.JOB_CREATED_AT)
                                .from(LEDGER)))
                .isEqualTo(4);
        assertThat(reused("job_id")).isEqualTo(2);
        assertThat(consumer.status().get("reused")).isEqualTo(2L);
        assertThat(fixture.dsl().fetchCount(CONSUMER_PROCESSED_REISSUED)).isEqualTo(2);
        assertThat(fixture.dsl()
                        .select(CONSUMER_REUSED.PREVIOUS)
                        .from(CONSUMER_REUSED)
                        .where(CONSUMER_REUSED.JOB_ID.eq(1L))
                        .fetchSingle()
                        .value1())
                .contains("job 1 created at " + T0.toLocalDateTime().toString().substring(0, 16));
        // The promoted database's outbox ids start over below those seen; a higher token starts over with them: nothing
        // is late.
        assertThat(fixture.dsl().fetchCount(CONSUMER_LATE)).isZero();
        assertThat(fixture.dsl().fetchCount(CONSUMER_REJECTED)).isZero();

        // All of it again: duplicates only, and no reuse reported twice.
        send(1, 1, "r", 1, T0, "a", ACQUIRED_A);
        send(1, 1, "r", 1L << 32 | 1, T0.plusSeconds(10), "b", ACQUIRED_B);
        send(3, 2, "r", 1L << 32 | 1, T0.plusSeconds(11), "b", ACQUIRED_B);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> (long) consumer.status().get("duplicates") == 5);
        assertThat(fixture.ledgerRows()).isEqualTo(4);
        assertThat(reused("job_id")).isEqualTo(2);
    }

    @Test
    void aJobWithAReissuedIdWhoseEffectKeepsFailingIsDeadLetteredUnderItsOwnIdentityAndReported() {
        Effect failsForTheSecondJob = new Effect() {
            @Override
            public void apply(org.jooq.DSLContext tx, Job job) {
                if (!job.createdAt().isEqual(T0)) {
                    throw new IllegalStateException("downstream refused job " + job.idempotencyKey());
                }
                new LedgerEffect().apply(tx, job);
            }
        };
        // Patient retries off: the dead letter after the quick tries is what this test is about.
        FencedConsumer consumer = fixture.start(
                fixture.config(500).withRetries(EffectRetries.OFF), failsForTheSecondJob, FencedConsumer.COMMIT_SYNC);
        send(1, 5, "r", 1, T0, "a", ACQUIRED_A);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.ledgerRows() == 1);
        send(9, 5, "r", 1L << 32 | 1, T0.plusSeconds(10), "b", ACQUIRED_B);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> (long) consumer.status().get("deadLettered") == 1);
        assertThat(fixture.dsl()
                        .select(CONSUMER_PROCESSED_REISSUED.OUTCOME)
                        .from(CONSUMER_PROCESSED_REISSUED)
                        .fetchSingle()
                        .value1())
                .isEqualTo("dead_letter");
        assertThat(reused("job_id")).isEqualTo(1);
        assertThat(consumer.status().get("reused")).isEqualTo(1L);

        send(9, 5, "r", 1L << 32 | 1, T0.plusSeconds(10), "b", ACQUIRED_B);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> (long) consumer.status().get("duplicates") == 1);
        assertThat(fixture.ledgerRows()).isEqualTo(1);
        assertThat(reused("job_id")).isEqualTo(1);
    }

    /** Records written by anything but the relay may carry nanoseconds; the database keeps microseconds. */
    @Test
    void creationTimesFinerThanTheDatabaseKeepsStillMakeOneJob() {
        FencedConsumer consumer = fixture.start();
        OffsetDateTime roundsDown = T0.plusNanos(1_234_499);
        OffsetDateTime roundsUp = T0.plusSeconds(1).plusNanos(7_000_501);
        OffsetDateTime halfToEven = T0.plusSeconds(2).plusNanos(3_500);
        send(1, 21, "r", 1, roundsDown, "a", ACQUIRED_A.plusNanos(999));
        send(2, 22, "r", 1, roundsUp, "a", ACQUIRED_A.plusNanos(999));
        send(3, 23, "r", 1, halfToEven, "a", ACQUIRED_A.plusNanos(999));
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.ledgerRows() == 3);
        send(1, 21, "r", 1, roundsDown, "a", ACQUIRED_A.plusNanos(999));
        send(
                2,
                22,
                "r",
                1,
                roundsUp.plusNanos(899),
                "a",
                ACQUIRED_A.plusNanos(999)); // 7,001,400 ns: the same microsecond
        send(3, 23, "r", 1, halfToEven, "a", ACQUIRED_A.plusNanos(999));
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> (long) consumer.status().get("duplicates") == 3);
        assertThat(fixture.ledgerRows()).isEqualTo(3);
        assertThat(reused("job_id") + reused("token")).isZero();
        assertThat(fixture.dsl()
                        .select(LEDGER.JOB_CREATED_AT)
                        .from(LEDGER)
                        .orderBy(LEDGER.JOB_ID)
                        .fetch(r -> r.value1().toInstant()))
                .containsExactly(
                        T0.plusNanos(1_234_000).toInstant(),
                        T0.plusSeconds(1).plusNanos(7_001_000).toInstant(),
                        T0.plusSeconds(2).plusNanos(4_000).toInstant());
    }

    @Test
    void aRecordWithoutTheCreationTimeIsADuplicateOfAnyJobWithItsId() {
        FencedConsumer consumer = fixture.start();
        send(1, 7, "r", 1, null, null, null);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.ledgerRows() == 1);
        send(1, 7, "r", 1, T0, "a", ACQUIRED_A);
        send(2, 8, "r", 1, T0, "a", ACQUIRED_A);
        send(2, 8, "r", 1, null, null, null);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> (long) consumer.status().get("duplicates") == 2);
        assertThat(fixture.ledgerRows()).isEqualTo(2);
        assertThat(reused("job_id")).isZero();
        assertThat(fixture.dsl().fetchCount(CONSUMER_PROCESSED)).isEqualTo(2);
    }

    @Test
    void aTokenIssuedAgainToAnotherTenureIsReportedOnceAndItsJobsApplied() {
        FencedConsumer consumer = fixture.start();
        send(1, 10, "r", 5, T0, "a", ACQUIRED_A);
        send(2, 11, "r", 5, T0, "a", ACQUIRED_A);
        send(3, 12, "r", 5, T0, "b", ACQUIRED_B);
        send(4, 13, "r", 5, T0, "b", ACQUIRED_B);
        send(5, 14, "r", 5, T0, null, null);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.ledgerRows() == 5);
        assertThat(reused("token")).isEqualTo(1);
        assertThat(consumer.status().get("reused")).isEqualTo(1L);
        assertThat(fixture.dsl()
                        .select(CONSUMER_REUSED.JOB_ID, CONSUMER_REUSED.TOKEN_HOLDER, CONSUMER_REUSED.PREVIOUS)
                        .from(CONSUMER_REUSED)
                        .fetchSingle()
                        .intoArray())
                .containsExactly(12L, "b", "a since " + ACQUIRED_A);
    }
}
