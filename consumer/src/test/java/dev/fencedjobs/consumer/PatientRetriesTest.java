package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_WAITING;
import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestKafka;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.jooq.DSLContext;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Patient retries against a real PostgreSQL and Kafka: a resource whose effect keeps failing waits,
 * in order and durably, while the other resources of its partition flow on.
 */
class PatientRetriesTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private ConsumerFixture fixture;
    /** The downstream refuses every job of these resources. */
    private final Set<String> down = ConcurrentHashMap.newKeySet();

    private final Effect effect = new Effect() {
        private final LedgerEffect ledger = new LedgerEffect();

        @Override
        public void apply(DSLContext tx, Job job) {
            if (down.contains(job.resource())) {
                throw new IllegalStateException("payment gateway down for " + job.resource());
            }
            ledger.apply(tx, job);
        }
    };

    @BeforeEach
    void setUp() throws Exception {
        // One partition: every resource shares it, so "the others flow" is tested where it is hardest.
        fixture = new ConsumerFixture(postgres.database(), TestKafka.shared().bootstrapServers(), 1);
    }

    @AfterEach
    void tearDown() {
        fixture.close();
    }

    private ConsumerConfig config(EffectRetries retries) {
        ConsumerConfig base = fixture.config(500);
        // One quick try, 50 ms base: the patient ones start at once.
        return new ConsumerConfig(
                base.service(),
                base.kafka(),
                base.groupId(),
                base.batchSize(),
                1,
                Duration.ofMillis(50),
                base.processedRetention(),
                base.membership(),
                base.recordsRetention(),
                retries);
    }

    private java.util.List<Long> ledgerJobs() {
        return fixture.dsl()
                .select(LEDGER.JOB_ID)
                .from(LEDGER)
                .orderBy(LEDGER.ID)
                .fetch(LEDGER.JOB_ID);
    }

    @Test
    void aFailingResourceWaitsInOrderAcrossARestartWhileTheOthersFlow() {
        down.add("pay");
        FencedConsumer first = fixture.start(
                config(new EffectRetries(Duration.ofHours(1), Duration.ofMillis(300))),
                effect,
                FencedConsumer.COMMIT_SYNC);
        fixture.send(1, "pay", 1);
        fixture.send(2, "other", 1);
        fixture.send(3, "pay", 1);
        fixture.send(4, "other", 1);
        fixture.send(5, "pay", 1);
        fixture.flush();
        // Job 5 may come in a later poll than 1 to 4: both resources' records must be through before the checks.
        await().atMost(Duration.ofSeconds(30))
                .until(() -> ledgerJobs().size() == 2 && fixture.dsl().fetchCount(CONSUMER_WAITING) == 3);
        assertThat(ledgerJobs())
                .as("the other resource of the same partition flows")
                .containsExactly(2L, 4L);
        assertThat(fixture.dsl()
                        .select(CONSUMER_WAITING.JOB_ID)
                        .from(CONSUMER_WAITING)
                        .orderBy(CONSUMER_WAITING.SEQ)
                        .fetch(CONSUMER_WAITING.JOB_ID))
                .as("job 1 first, its resource's later records behind it")
                .containsExactly(1L, 3L, 5L);
        // It keeps being tried, backing off; the records behind it are not tried while it fails.
        await().atMost(Duration.ofSeconds(30))
                .until(() -> fixture.dsl()
                                .select(CONSUMER_WAITING.ATTEMPTS)
                                .from(CONSUMER_WAITING)
                                .where(CONSUMER_WAITING.JOB_ID.eq(1L))
                                .fetchSingle()
                                .value1()
                        >= 4);
        assertThat(fixture.dsl()
                        .fetchCount(
                                CONSUMER_WAITING,
                                CONSUMER_WAITING.ATTEMPTS.gt(0).and(CONSUMER_WAITING.JOB_ID.ne(1L))))
                .isZero();
        assertThat(fixture.dsl()
                        .select(CONSUMER_WAITING.LAST_ERROR)
                        .from(CONSUMER_WAITING)
                        .where(CONSUMER_WAITING.JOB_ID.eq(1L))
                        .fetchSingle()
                        .value1())
                .contains("payment gateway down for pay");
        @SuppressWarnings("unchecked")
        java.util.Map<String, Object> retry =
                (java.util.Map<String, Object>) first.status().get("patientRetries");
        assertThat((long) retry.get("putToWait")).isEqualTo(3);
        assertThat(fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER)).isZero();

        // A restart loses nothing: the waiting records are in the database, their offsets committed.
        first.close();
        FencedConsumer second = fixture.start(
                config(new EffectRetries(Duration.ofHours(1), Duration.ofMillis(300))),
                effect,
                FencedConsumer.COMMIT_SYNC);
        fixture.send(6, "other", 1);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> ledgerJobs().contains(6L));
        down.remove("pay");
        await().atMost(Duration.ofSeconds(30)).until(() -> ledgerJobs().size() == 6);
        assertThat(ledgerJobs())
                .as("the waiting resource's effects in their order")
                .containsSubsequence(1L, 3L, 5L);
        assertThat(fixture.dsl().fetchCount(CONSUMER_WAITING)).isZero();
        assertThat(fixture.distinctLedgerJobs()).isEqualTo(6);
        // Its records redelivered now are duplicates.
        fixture.send(3, "pay", 1);
        fixture.send(7, "pay", 1);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> ledgerJobs().contains(7L));
        assertThat(ledgerJobs()).hasSize(7);
        assertThat((long) second.status().get("duplicates")).isEqualTo(1);
    }

    @Test
    void aRecordPastTheMaximumAgeIsDeadLetteredAndItsResourceMovesOn() {
        java.util.concurrent.atomic.AtomicInteger job2Tries = new java.util.concurrent.atomic.AtomicInteger();
        Effect onlyJob1Fails = (tx, job) -> {
            if (job.jobId() == 1) {
                throw new IllegalStateException("refused for good");
            }
            // Job 2 waited behind job 1 past the maximum age; its own first failure starts its own age.
            if (job.jobId() == 2 && job2Tries.incrementAndGet() == 1) {
                throw new IllegalStateException("a blip for job 2");
            }
            new LedgerEffect().apply(tx, job);
        };
        fixture.start(
                config(new EffectRetries(Duration.ofSeconds(2), Duration.ofMillis(200))),
                onlyJob1Fails,
                FencedConsumer.COMMIT_SYNC);
        fixture.send(1, "pay", 1);
        fixture.send(2, "pay", 1);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER) == 1
                        && ledgerJobs().contains(2L));
        String reason = fixture.dsl()
                .select(CONSUMER_DEAD_LETTER.REASON)
                .from(CONSUMER_DEAD_LETTER)
                .fetchSingle()
                .value1();
        assertThat(reason)
                .startsWith("effect failed ")
                .contains(" times over PT", "(EFFECT_RETRY_MAX_AGE PT2S): IllegalStateException: refused for good");
        assertThat(ledgerJobs()).containsExactly(2L);
        assertThat(job2Tries.get())
                .as("job 2 failed once, after waiting longer than the maximum age, and was tried again")
                .isEqualTo(2);
        assertThat(fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER)).isEqualTo(1);
        assertThat(fixture.dsl().fetchCount(CONSUMER_WAITING)).isZero();
        // Dead-lettered like any other: its claim makes a redelivery a duplicate, and a replay is the way back.
        assertThat(fixture.dsl()
                        .fetchOne("SELECT outcome FROM consumer_processed WHERE job_id = 1")
                        .get(0, String.class))
                .isEqualTo("dead_letter");
    }

    @Test
    void whileNothingWaitsItLooksOnceAMinuteAndEverySecondAgainOnceItPutsARecordToWait() {
        java.util.concurrent.atomic.AtomicInteger statements = new java.util.concurrent.atomic.AtomicInteger();
        org.jooq.Configuration counted = fixture.dsl()
                .configuration()
                .derive(new org.jooq.impl.DefaultExecuteListenerProvider(new org.jooq.ExecuteListener() {
                    @Override
                    public void executeStart(org.jooq.ExecuteContext ctx) {
                        statements.incrementAndGet();
                    }
                }));
        long[] now = {1_000_000_000L};
        PatientRetries retries = new PatientRetries(
                org.jooq.impl.DSL.using(counted),
                new BatchProcessor(
                        effect,
                        new dev.fencedjobs.runtime.internal.RecordVerifier(
                                dev.fencedjobs.runtime.RecordTrust.NONE, Duration.ofDays(7))),
                EffectRetries.DEFAULT,
                Duration.ofMillis(50),
                () -> 0.5,
                () -> now[0]);

        assertThat(retries.retryOne()).isZero();
        assertThat(statements.get())
                .as("the first look, at start: records may wait from before a restart")
                .isEqualTo(1);
        for (int second = 1; second < 60; second++) {
            now[0] += Duration.ofSeconds(1).toNanos();
            assertThat(retries.retryOne()).isZero();
        }
        assertThat(statements.get()).as("nothing waited: no look for a minute").isEqualTo(1);
        now[0] += Duration.ofSeconds(1).toNanos();
        retries.retryOne();
        assertThat(statements.get())
                .as("a minute after: another consumer may have put one to wait")
                .isEqualTo(2);

        retries.putToWait();
        retries.retryOne();
        assertThat(statements.get())
                .as("this consumer put a record to wait: it looks at once")
                .isEqualTo(3);
        now[0] += Duration.ofSeconds(1).toNanos();
        retries.retryOne();
        assertThat(statements.get())
                .as("and found none waiting (this test put none): quiet again")
                .isEqualTo(3);
    }

    @Test
    void theBackOffDoublesUpToItsCapWithJitter() {
        EffectRetries r = new EffectRetries(Duration.ofHours(6), Duration.ofMinutes(5));
        Duration base = Duration.ofMillis(200);
        assertThat(r.backoff(base, 0, 0.999999)).isEqualTo(Duration.ofMillis(199));
        assertThat(r.backoff(base, 3, 0.999999)).isEqualTo(Duration.ofMillis(1599));
        assertThat(r.backoff(base, 3, 0.0)).as("half at the least").isEqualTo(Duration.ofMillis(800));
        assertThat(r.backoff(base, 20, 0.999999)).as("capped").isEqualTo(Duration.ofMillis(299_999));
        assertThat(r.backoff(base, 1_000, 0.0)).isEqualTo(Duration.ofSeconds(150));
        assertThat(r.backoff(Duration.ZERO, 0, 0.0))
                .as("a base of 0 starts at 100 ms")
                .isEqualTo(Duration.ofMillis(50));
        assertThat(EffectRetries.OFF.enabled()).isFalse();
        assertThat(EffectRetries.DEFAULT.maxAge()).isEqualTo(Duration.ofHours(24));
    }
}
