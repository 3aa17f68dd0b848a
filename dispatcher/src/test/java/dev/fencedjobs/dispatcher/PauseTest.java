package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.testing.PostgresExtension;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.awaitility.Awaitility;
import org.jooq.DSLContext;
import org.jooq.exception.DataAccessException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Pause and resume (dispatch_pauses, migration V15; docs/dispatch.md) on a real PostgreSQL: the
 * batch passes a paused key over and completes nothing while everything is paused, the jobs stay
 * pending and go in their order once resumed, the guard refuses a completion of a paused key's job
 * whoever writes it, and a pause waits for a batch in flight while a batch waits for a pause.
 */
class PauseTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private DispatcherFixture fixture;
    private DSLContext dsl;

    @BeforeEach
    void database() {
        var db = postgres.database();
        fixture = new DispatcherFixture(db.url(), db.user(), db.password());
        dsl = fixture.dsl();
        fixture.schedulerLease(1);
    }

    @AfterEach
    void close() {
        fixture.close();
    }

    /** Three due jobs for each of {@code keys} (as dispatch keys), in order a, b, c within each. */
    private void due(String... keys) {
        for (String key : keys) {
            for (String name : List.of("a", "b", "c")) {
                dsl.execute(
                        "INSERT INTO jobs (due_at, resource, dispatch_key) VALUES (clock_timestamp() - interval '1 minute', ?, ?)",
                        key + "-" + name,
                        key);
            }
        }
    }

    /** One batch of shard 0 as its lease holder runs it, in the transaction dispatch_batch_begin opens. */
    private int batch() {
        return dsl.transactionResult(c -> {
            assertThat(c.dsl().fetchSingle("SELECT dispatch_batch_begin()").get(0, Boolean.class))
                    .as("the policy path")
                    .isTrue();
            return c.dsl()
                    .fetchSingle("SELECT completed FROM dispatch_batch(1, 0, 100, NULL)")
                    .get(0, Integer.class);
        });
    }

    private List<String> completedInOrder() {
        return dsl.fetch("SELECT resource FROM outbox ORDER BY id").getValues(0, String.class);
    }

    private long pending(String key) {
        return dsl.fetchSingle(
                        "SELECT count(*) FROM jobs WHERE state = 'pending' AND dispatch_key = ? AND due_at <= clock_timestamp()",
                        key)
                .get(0, Long.class);
    }

    @Test
    void aPausedKeysJobsStayPendingAndDue_theOthersGo_andOnResumeTheyGoInTheirOrder() {
        due("tenant-1", "tenant-2");
        dsl.execute("INSERT INTO dispatch_pauses (dispatch_key, reason) VALUES ('tenant-1', 'downstream maintenance')");

        assertThat(batch()).isEqualTo(3);
        assertThat(batch()).as("nothing more to do while tenant-1 is paused").isZero();
        assertThat(completedInOrder()).containsExactly("tenant-2-a", "tenant-2-b", "tenant-2-c");
        assertThat(pending("tenant-1")).as("tenant-1's jobs: pending and due").isEqualTo(3);

        dsl.execute("DELETE FROM dispatch_pauses WHERE dispatch_key = 'tenant-1'");
        assertThat(batch()).isEqualTo(3);
        assertThat(completedInOrder())
                .containsExactly("tenant-2-a", "tenant-2-b", "tenant-2-c", "tenant-1-a", "tenant-1-b", "tenant-1-c");
    }

    @Test
    void whileEverythingIsPausedNothingCompletes_andAKeyOfItsOwnIsPausedAsWell() {
        due("tenant-1", "tenant-2");
        dsl.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES (NULL)");
        assertThat(batch()).isZero();
        assertThat(completedInOrder()).isEmpty();
        assertThatThrownBy(() -> dsl.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES (NULL)"))
                .as("one pause of everything")
                .isInstanceOf(DataAccessException.class)
                .hasMessageContaining("dispatch_pauses_everything");

        dsl.execute("DELETE FROM dispatch_pauses WHERE dispatch_key IS NULL");
        assertThat(batch()).isEqualTo(6);
    }

    @Test
    void whatTheGaugesRead_keysPaused_everything_andTheOldestPausesAge() {
        FencedJobBatches batches = new FencedJobBatches(dsl, null);
        assertThat(batches.paused()).isEqualTo(new JobBatches.Paused(0, false, 0));

        dsl.execute(
                "INSERT INTO dispatch_pauses (dispatch_key, paused_at) VALUES ('tenant-1', clock_timestamp() - interval '1 hour')");
        dsl.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES ('tenant-2')");
        JobBatches.Paused two = batches.paused();
        assertThat(two.keys()).isEqualTo(2);
        assertThat(two.everything()).isFalse();
        assertThat(two.longestSeconds()).as("the older pause's age").isBetween(3600.0, 3700.0);

        dsl.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES (NULL)");
        assertThat(batches.paused().keys()).as("everything is no key").isEqualTo(2);
        assertThat(batches.paused().everything()).isTrue();
    }

    @Test
    void theGuardRefusesTheCompletionOfAPausedKeysJob_withTheCurrentToken_whoeverWritesIt() {
        due("tenant-1");
        dsl.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES ('tenant-1')");
        long id = dsl.fetchSingle("SELECT min(id) FROM jobs").get(0, Long.class);
        assertThatThrownBy(() -> dsl.execute(
                        "UPDATE jobs SET state = 'completed', completed_by_token = 1, completed_at = clock_timestamp() WHERE id = ?",
                        id))
                .isInstanceOf(DataAccessException.class)
                .hasMessageContaining("job " + id + " (key tenant-1) completed while its key is paused");
        assertThat(pending("tenant-1")).isEqualTo(3);
    }

    @Test
    void aPauseWaitsForTheBatchInFlight_andABatchThatStartsMeanwhileWaitsForThePauseAndThenPassesTheKeyOver()
            throws Exception {
        due("tenant-1");
        // A batch in flight: its transaction opened with dispatch_batch_begin, not yet committed.
        try (var inFlight = dsl.configuration().connectionProvider().acquire()) {
            inFlight.setAutoCommit(false);
            try (var s = inFlight.createStatement()) {
                s.execute("SELECT dispatch_batch_begin()");
            }
            CompletableFuture<Void> pause = CompletableFuture.runAsync(
                    () -> dsl.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES ('tenant-1')"));
            awaitWaitingOnJobs();
            assertThat(pause).as("the pause waits for the batch in flight").isNotDone();
            // The batch completes the key's jobs and commits: before the pause, which then commits.
            try (var s = inFlight.createStatement();
                    var rs = s.executeQuery("SELECT completed FROM dispatch_batch(1, 0, 1, NULL)")) {
                rs.next();
                assertThat(rs.getInt(1)).isEqualTo(1);
            }
            inFlight.commit();
            pause.get(30, TimeUnit.SECONDS);
            inFlight.setAutoCommit(true);
        }
        assertThat(batch()).as("after the pause committed").isZero();
        assertThat(pending("tenant-1")).isEqualTo(2);

        // A pause waiting for a producer's open transaction (it holds jobs too): a batch that starts meanwhile waits
        // behind the pause, and sees it.
        dsl.execute("DELETE FROM dispatch_pauses");
        try (var producer = dsl.configuration().connectionProvider().acquire()) {
            producer.setAutoCommit(false);
            try (var s = producer.createStatement()) {
                s.execute(
                        "INSERT INTO jobs (due_at, resource, dispatch_key) VALUES (clock_timestamp(), 'tenant-1-d', 'tenant-1')");
            }
            CompletableFuture<Void> pause = CompletableFuture.runAsync(
                    () -> dsl.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES ('tenant-1')"));
            awaitWaitingOnJobs();
            CompletableFuture<Integer> later = CompletableFuture.supplyAsync(this::batch);
            await(() -> waitingOnJobs() >= 2);
            assertThat(later).as("the batch waits behind the pause").isNotDone();
            producer.commit();
            pause.get(30, TimeUnit.SECONDS);
            assertThat(later.get(30, TimeUnit.SECONDS))
                    .as("the batch saw the pause")
                    .isZero();
            producer.setAutoCommit(true);
        }
        assertThat(pending("tenant-1")).isEqualTo(3);
    }

    private long waitingOnJobs() {
        return dsl.fetchSingle("SELECT count(*) FROM pg_locks WHERE relation = 'jobs'::regclass AND NOT granted")
                .get(0, Long.class);
    }

    private void awaitWaitingOnJobs() {
        await(() -> waitingOnJobs() >= 1);
    }

    private static void await(BooleanSupplier condition) {
        Awaitility.await().atMost(Duration.ofSeconds(30)).until(condition::getAsBoolean);
    }
}
