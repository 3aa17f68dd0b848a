package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED;
import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestKafka;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import org.jooq.DSLContext;
import org.jooq.Record;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Dead letters an operator acts on, against a real PostgreSQL and Kafka: a replay goes through the
 * same dedup and fence path as a fresh record, so it applies an effect at most once, and each
 * letter says what became of it.
 */
class DeadLetterReplayTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private ConsumerFixture fixture;
    private final AtomicBoolean downstreamDown = new AtomicBoolean(true);
    /** Refuses jobs 3 and 30 while the downstream is down. */
    private final Effect effect = new Effect() {
        private final LedgerEffect ledger = new LedgerEffect();

        @Override
        public void apply(DSLContext tx, Job job) {
            if ((job.jobId() == 3 || job.jobId() == 30) && downstreamDown.get()) {
                throw new IllegalStateException("downstream refused job " + job.jobId());
            }
            ledger.apply(tx, job);
        }
    };

    @BeforeEach
    void setUp() throws Exception {
        fixture = new ConsumerFixture(postgres.database(), TestKafka.shared().bootstrapServers(), 3);
    }

    @AfterEach
    void tearDown() {
        fixture.close();
    }

    private void requestReplay(long id) {
        // What `fenced-jobs dead-letters replay` writes.
        assertThat(fixture.dsl()
                        .execute(
                                "UPDATE consumer_dead_letter SET status = 'replay_requested', status_by = 'test', "
                                        + "status_at = clock_timestamp() WHERE id = ? AND status = 'dead'",
                                id))
                .isEqualTo(1);
    }

    private Record letter(long id) {
        return fixture.dsl()
                .fetchOne("SELECT status, replay_outcome, status_by FROM consumer_dead_letter WHERE id = ?", id);
    }

    private long deadLetterOfJob(long job) {
        return fixture.dsl()
                .select(CONSUMER_DEAD_LETTER.ID)
                .from(CONSUMER_DEAD_LETTER)
                .where(CONSUMER_DEAD_LETTER.JOB_ID.eq(job))
                .fetchSingle()
                .value1();
    }

    private long ledgerRowsOf(long job) {
        return fixture.dsl().fetchCount(LEDGER, LEDGER.JOB_ID.eq(job));
    }

    @Test
    void aReplayedEffectIsAppliedOnceAndNeitherItsRedeliveryNorASecondReplayAppliesItAgain() {
        FencedConsumer consumer =
                fixture.start(fixture.config(500).withRetries(EffectRetries.OFF), effect, FencedConsumer.COMMIT_SYNC);
        for (long job = 1; job <= 4; job++) {
            fixture.send(job, "acct", 1);
        }
        fixture.flush();
        await().atMost(Duration.ofSeconds(30))
                .until(() -> fixture.ledgerRows() == 3 && fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER) == 1);
        long id = deadLetterOfJob(3);
        assertThat(letter(id).get("status", String.class)).isEqualTo("dead");

        // The effect fails again: rolled back, still dead, and says why.
        requestReplay(id);
        await().atMost(Duration.ofSeconds(30))
                .until(() -> "dead".equals(letter(id).get("status", String.class)));
        assertThat(letter(id).get("replay_outcome", String.class))
                .isEqualTo("effect failed on replay: IllegalStateException: downstream refused job 3");
        assertThat(ledgerRowsOf(3)).isZero();

        downstreamDown.set(false);
        requestReplay(id);
        await().atMost(Duration.ofSeconds(30))
                .until(() -> "replayed".equals(letter(id).get("status", String.class)));
        // Job 4, after it in commit order, was applied long before: the replay is applied and reported late.
        assertThat(letter(id).get("replay_outcome", String.class))
                .isEqualTo("applied (late: a later row of its resource had been applied)");
        assertThat(letter(id).get("status_by", String.class)).isEqualTo("test");
        assertThat(ledgerRowsOf(3)).isEqualTo(1);
        // The replay thread counts a replay once its transaction has returned, after the letter's status committed.
        await().atMost(Duration.ofSeconds(30))
                .until(() -> Long.valueOf(2L).equals(consumer.status().get("deadLettersReplayed")));

        // Replayed is final; the record redelivered by Kafka is a duplicate.
        assertThat(fixture.dsl()
                        .execute(
                                "UPDATE consumer_dead_letter SET status = 'replay_requested' WHERE id = ? AND status = 'dead'",
                                id))
                .isZero();
        assertThatThrownBy(() -> fixture.dsl()
                        .execute("UPDATE consumer_dead_letter SET status = 'replay_requested' WHERE id = ?", id))
                .hasMessageContaining("dead letter " + id + " was replayed by test");
        fixture.send(3, "acct", 1);
        fixture.send(5, "acct", 1);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> ledgerRowsOf(5) == 1);
        assertThat(ledgerRowsOf(3)).isEqualTo(1);
        assertThat(fixture.dsl().fetchValue("SELECT value FROM consumer_counters WHERE name = 'duplicates'"))
                .isEqualTo(1L);
        assertThat(consumer.status().get("deadLettersReplayed"))
                .as("a redelivered record is no replay")
                .isEqualTo(2L);
    }

    @Test
    void aReplayBelowTheResourcesFenceIsRejectedAsStaleAndAnUnreadableRecordStaysDead() {
        fixture.start(fixture.config(500).withRetries(EffectRetries.OFF), effect, FencedConsumer.COMMIT_SYNC);
        fixture.send(30, "acct", 1); // outbox row 30, token 1: dead-lettered
        fixture.sendRaw("acct", "not json at all");
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER) == 2);
        // Then token 2 is applied on the resource from outbox row 10: a row 30 of token 1 contradicts
        // commit order (a former leader's), and the fence refuses it, replayed or not.
        fixture.send(10, "acct", 2);
        fixture.flush();
        await().atMost(Duration.ofSeconds(30)).until(() -> ledgerRowsOf(10) == 1);

        downstreamDown.set(false);
        long stale = deadLetterOfJob(30);
        long unreadable = fixture.dsl()
                .select(CONSUMER_DEAD_LETTER.ID)
                .from(CONSUMER_DEAD_LETTER)
                .where(CONSUMER_DEAD_LETTER.JOB_ID.isNull())
                .fetchSingle()
                .value1();
        requestReplay(stale);
        requestReplay(unreadable);
        await().atMost(Duration.ofSeconds(30))
                .until(() -> "replayed".equals(letter(stale).get("status", String.class))
                        && letter(unreadable).get("replay_outcome") != null);
        assertThat(letter(stale).get("replay_outcome", String.class)).startsWith("rejected as stale");
        assertThat(ledgerRowsOf(30)).isZero();
        assertThat(fixture.dsl().fetchCount(CONSUMER_REJECTED, CONSUMER_REJECTED.JOB_ID.eq(30L)))
                .isEqualTo(1);
        assertThat(letter(unreadable).get("status", String.class)).isEqualTo("dead");
        assertThat(letter(unreadable).get("replay_outcome", String.class)).startsWith("still unreadable: not JSON");
        assertThat(fixture.dsl().fetchCount(CONSUMER_DEAD_LETTER))
                .as("a replay adds no letter")
                .isEqualTo(2);
    }
}
