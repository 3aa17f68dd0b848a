package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.testing.PostgresExtension;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.UnaryOperator;
import org.jooq.DSLContext;
import org.jooq.Record;
import org.jooq.exception.DataAccessException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The dispatch policy (docs/dispatch.md) on a real PostgreSQL: {@code dispatch_batch} called as the
 * lease holder would, with a scheduler lease row of the test's own, then a running dispatcher under
 * a rate limit.
 */
class DispatchPolicyTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private DispatcherFixture fixture;
    private DSLContext dsl;

    @BeforeEach
    void database() {
        var db = postgres.database();
        fixture = new DispatcherFixture(db.url(), db.user(), db.password());
        dsl = fixture.dsl();
    }

    @AfterEach
    void close() {
        fixture.close();
    }

    private void lease(long token) {
        fixture.schedulerLease(token);
    }

    private Record batch(long token, int limit) {
        return dsl.fetchSingle("SELECT * FROM dispatch_batch(?, 0, ?, NULL)", token, limit);
    }

    /** A bulk insert that sets up a backlog. */
    private void backlog(String insert) {
        dsl.execute(insert);
    }

    private <T> T value(Class<T> type, String sql) {
        return dsl.fetchSingle(sql).get(0, type);
    }

    private List<String> outboxResources() {
        return dsl.fetch("SELECT resource FROM outbox ORDER BY id").getValues(0, String.class);
    }

    @Test
    void withoutPrioritiesKeysOrLimitsThePlainPathDecides() {
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'r-' || g FROM generate_series(1, 10) g");
        assertThat(value(Boolean.class, "SELECT dispatch_policy_active()")).isFalse();

        dsl.execute(
                "INSERT INTO jobs (due_at, resource, priority) VALUES (clock_timestamp() + interval '1 hour', 'later', 5)");
        assertThat(value(Boolean.class, "SELECT dispatch_policy_active()"))
                .as("a pending job with a priority")
                .isTrue();
        dsl.execute("DELETE FROM jobs WHERE resource = 'later'");
        dsl.execute("INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES ('r-1', 10, 10)");
        assertThat(value(Boolean.class, "SELECT dispatch_policy_active()"))
                .as("a limit")
                .isTrue();
    }

    @Test
    void thePolicyPathReadsEachKeyThroughItsIndexInRankOrder() {
        dsl.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)");
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'tenant-' || mod(g, 50) FROM generate_series(1, 20000) g");
        // The two statements dispatch_batch runs for each key, as it runs them (after the batch's SET LOCAL enable_sort
        // = off).
        String skip =
                "SELECT min(coalesce(dispatch_key, resource)) FROM jobs WHERE state = 'pending' AND shard = 0 AND coalesce(dispatch_key, resource) > 'tenant-1'";
        String take =
                "SELECT j.id FROM jobs j WHERE j.state = 'pending' AND j.shard = 0 AND coalesce(j.dispatch_key, j.resource) = 'tenant-1' AND j.due_at <= clock_timestamp()"
                        + " ORDER BY (j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second', j.id LIMIT 100";
        for (String query : List.of(skip, take)) {
            String plan = dsl.transactionResult(c -> {
                c.dsl().execute("SET LOCAL enable_sort = off");
                return String.join("\n", c.dsl().fetch("EXPLAIN " + query).getValues(0, String.class));
            });
            assertThat(plan)
                    .as(query)
                    .contains("jobs_pending_key")
                    .doesNotContain("Sort")
                    .doesNotContain("Seq Scan");
        }
    }

    @Test
    void aPriorityRanksAJobOfItsKeyAsIfItWereDueThatManySecondsEarlier() {
        lease(1);
        // One key (the dispatch key), so that only the ranks decide; resources name the jobs.
        String insert =
                "INSERT INTO jobs (due_at, resource, priority, dispatch_key) VALUES (clock_timestamp() + ?::interval, ?, ?, 'k')";
        dsl.execute(insert, "-30 seconds", "plain-30s", 0);
        dsl.execute(insert, "-120 seconds", "plain-120s", 0);
        dsl.execute(insert, "0 seconds", "urgent-60", 60);
        dsl.execute(insert, "-10 seconds", "low", -600);
        dsl.execute(insert, "1 hour", "not-due", 7200);

        for (int i = 0; i < 5; i++) {
            batch(1, 1);
        }

        // Ranks: plain-120s now-120, urgent-60 now-60, plain-30s now-30, low now+590. A priority
        // never makes a job due: not-due stays pending. Aging: the plain job that waited two
        // minutes goes before the urgent one, which is worth one.
        assertThat(outboxResources()).containsExactly("plain-120s", "urgent-60", "plain-30s", "low");
        assertThat(value(String.class, "SELECT state FROM jobs WHERE resource = 'not-due'"))
                .isEqualTo("pending");
    }

    @Test
    void oneKeysBacklogDoesNotDelayAnotherKeysJobBeyondOneBatch() {
        lease(1);
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp() - interval '1 minute', 'r-' || mod(g, 7), 'tenant-big'"
                        + " FROM generate_series(1, 5000) g");
        dsl.execute(
                "INSERT INTO jobs (due_at, resource, dispatch_key) VALUES (clock_timestamp(), 'r-small', 'tenant-small')");

        Record first = batch(1, 100);

        assertThat(first.get("completed", Integer.class)).isEqualTo(100);
        assertThat(first.get("more", Boolean.class)).isTrue();
        assertThat(value(String.class, "SELECT state FROM jobs WHERE dispatch_key = 'tenant-small'"))
                .as("the small tenant's one job, due after 5,000 of the big one's, in the first batch")
                .isEqualTo("completed");
        assertThat(value(
                        Integer.class,
                        "SELECT count(*) FROM jobs WHERE dispatch_key = 'tenant-big' AND state = 'completed'"))
                .as("the room it left goes to the big tenant")
                .isEqualTo(99);
    }

    @Test
    void aLimitHoldsJobsBackUntilItsTokensComeAndATakeoverNeitherResetsNorExceedsIt() {
        lease(1);
        dsl.execute("INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES ('tenant-a', 1, 5)");
        dsl.execute(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'tenant-a' FROM generate_series(1, 50)");
        dsl.execute("INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'free' FROM generate_series(1, 20)");

        Record first = batch(1, 100);
        assertThat(first.get("completed", Integer.class))
                .as("the burst, and every job of the unlimited key")
                .isEqualTo(5 + 20);
        assertThat(first.get("held_keys", Integer.class)).isEqualTo(1);
        assertThat(first.get("more", Boolean.class)).isFalse();
        Duration untilToken = Duration.between(
                first.get("database_now", OffsetDateTime.class), first.get("next_at", OffsetDateTime.class));
        assertThat(untilToken)
                .as("the next token, at 1 a second")
                .isBetween(Duration.ofMillis(999), Duration.ofMillis(1001));

        // A takeover: the new holder finds the bucket as the last batch left it.
        lease(2);
        Record afterTakeover = batch(2, 100);
        assertThat(afterTakeover.get("completed", Integer.class)).isLessThanOrEqualTo(1);
        // The former holder's batch is refused by the guard on jobs, its tokens by the guard on the limit.
        dsl.execute("INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp(), 'free')");
        assertThatThrownBy(() -> batch(1, 100))
                .isInstanceOf(DataAccessException.class)
                .hasMessageContaining("only the shard's lease holder completes its jobs");
        assertThatThrownBy(() -> dsl.execute("UPDATE dispatch_limits SET tokens = 5, refilled_by_token = 1"))
                .hasMessageContaining("only a lease holder spends a limit's tokens");
        assertThatThrownBy(() -> dsl.execute("UPDATE dispatch_limits SET tokens = 5, refilled_by_token = 2"))
                .as("with the current token, but faster than the limit refills")
                .hasMessageContaining("never refills them faster");
        assertThatThrownBy(
                        () -> dsl.execute("UPDATE dispatch_limits SET refilled_at = refilled_at - interval '1 hour'"))
                .as("time moved back")
                .hasMessageContaining("never refills them faster");

        // Raised while running: the next batch may spend what the new rate refilled.
        dsl.execute("UPDATE dispatch_limits SET per_second = 1000000, burst = 1000");
        await().atMost(Duration.ofSeconds(5)).until(() -> batch(2, 100).get("completed", Integer.class) > 0);
        assertThat(value(Integer.class, "SELECT count(*) FROM jobs WHERE state = 'pending'"))
                .as("held back, never dropped: each pending job is completed in time")
                .isLessThan(50 - 5);
        fixture.assertExactlyOnceWithOutbox(fixture.completed());
        assertThat(fixture.completed()).isGreaterThan(5 + 20);
    }

    @Test
    void eachBatchVisitsAtMostItsSizeOfKeysAndTheNextStartsAfterTheLastOneWrappingRound() {
        lease(1);
        dsl.execute(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', k FROM unnest(ARRAY['a', 'b', 'c', 'd', 'e']) k,"
                        + " generate_series(1, 3)");
        List<List<String>> visited = new ArrayList<>();
        String start = null;
        for (String expectedNext : new String[] {"b", "d", "a", "c"}) {
            Record r = dsl.fetchSingle("SELECT * FROM dispatch_batch(?, 0, ?, ?)", 1L, 2, start);
            assertThat(r.get("completed", Integer.class))
                    .as("one job of each of two keys")
                    .isEqualTo(2);
            assertThat(r.get("more", Boolean.class)).isTrue();
            assertThat(r.get("next_key", String.class)).isEqualTo(expectedNext);
            start = r.get("next_key", String.class);
            visited.add(dsl.fetch(
                            "SELECT j.dispatch_key FROM outbox o JOIN jobs j ON j.id = o.job_id WHERE o.id > (SELECT max(id) FROM outbox) - 2"
                                    + " ORDER BY j.dispatch_key")
                    .getValues(0, String.class));
        }
        assertThat(visited)
                .as("a b, c d, e then round to a, b c")
                .containsExactly(List.of("a", "b"), List.of("c", "d"), List.of("a", "e"), List.of("b", "c"));
        // Fewer keys than the batch: every key, with room left to those that have more.
        Record all = dsl.fetchSingle("SELECT * FROM dispatch_batch(?, 0, ?, ?)", 1L, 100, start);
        assertThat(all.get("completed", Integer.class)).isEqualTo(15 - 8);
        assertThat(all.get("more", Boolean.class)).isFalse();
        assertThat(value(Integer.class, "SELECT count(*) FROM jobs WHERE state = 'pending'"))
                .isZero();
        fixture.assertExactlyOnceWithOutbox(15);
    }

    @Test
    void keysWithNothingDueTakeNoPlaceInABatchAndLeaveNothingForTheNext() {
        lease(1);
        // 1,000 keys, each with one job due tomorrow; two with two due jobs each; and one whose only
        // job is due but deferred by a negative priority (ranked a minute after its due time).
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp() + interval '1 day', 'r', 'idle-' || g"
                        + " FROM generate_series(1, 1000) g");
        backlog("INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', k"
                + " FROM unnest(ARRAY['b', 'm']) k, generate_series(1, 2) n");
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key, priority) VALUES (clock_timestamp(), 'r', 'z', -60)");

        Record r = batch(1, 10);

        assertThat(r.get("completed", Integer.class))
                .as("every due job, the deferred one too")
                .isEqualTo(5);
        assertThat(r.get("more", Boolean.class))
                .as("the idle keys leave no batch to run at once")
                .isFalse();
        assertThat(r.get("next_at", OffsetDateTime.class))
                .as("the next job due: tomorrow's")
                .isAfter(OffsetDateTime.now(ZoneOffset.UTC).plusHours(23));
        assertThat(value(Integer.class, "SELECT count(*) FROM jobs WHERE state = 'pending'"))
                .isEqualTo(1000);
    }

    @Test
    void aBatchCompletesNoMoreThanItsLimitWhateverTheKeysShares() {
        lease(1);
        backlog("INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', k"
                + " FROM unnest(ARRAY['a', 'b', 'c']) k, generate_series(1, 5)");

        Record r = batch(1, 4);

        assertThat(r.get("completed", Integer.class))
                .as("4 over 3 keys: 2, 1 and 1, not 2 each")
                .isEqualTo(4);
        assertThat(dsl.fetch(
                                "SELECT j.dispatch_key, count(*) FROM jobs j WHERE j.state = 'completed' GROUP BY 1 ORDER BY 1")
                        .map(x -> x.get(0, String.class) + "=" + x.get(1, Long.class)))
                .containsExactly("a=2", "b=1", "c=1");
    }

    @Test
    void withMoreKeysThanAChunkABatchVisits64KeysAndEachTakesItsShare() {
        lease(1);
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'k' || lpad(k::text, 3, '0')"
                        + " FROM generate_series(0, 199) k, generate_series(1, 10)");

        Record r = batch(1, 128);

        assertThat(r.get("completed", Integer.class)).isEqualTo(128);
        assertThat(r.get("more", Boolean.class)).isTrue();
        assertThat(r.get("next_key", String.class))
                .as("the next batch starts after the last key visited")
                .isEqualTo("k063");
        assertThat(dsl.fetch(
                                "SELECT count(*) FROM jobs WHERE state = 'completed' GROUP BY dispatch_key ORDER BY dispatch_key")
                        .getValues(0, Long.class))
                .as("64 keys, two jobs each, rather than 128 keys one each")
                .hasSize(64)
                .containsOnly(2L);
    }

    @Test
    void keysWithFewJobsDoNotLeaveTheBatchShortTheWalkGoesOnToTheNextChunk() {
        lease(1);
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'k' || lpad(k::text, 3, '0')"
                        + " FROM generate_series(0, 199) k");

        Record r = batch(1, 100);

        assertThat(r.get("completed", Integer.class))
                .as("one job each of the first 100 keys: two chunks")
                .isEqualTo(100);
        assertThat(r.get("next_key", String.class)).isEqualTo("k099");
        assertThat(value(String.class, "SELECT max(dispatch_key) FROM jobs WHERE state = 'completed'"))
                .isEqualTo("k099");
    }

    @Test
    void aLaterChunkOfKeysWithoutLimitsWhileOthersHaveThemSaysPlainlyThatNothingIsLeft() {
        lease(1);
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'k' || lpad(k::text, 3, '0')"
                        + " FROM generate_series(0, 99) k");
        dsl.execute("INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES ('k001', 1000, 1000)");

        Record r = batch(1, 200);

        assertThat(r.get("completed", Integer.class)).isEqualTo(100);
        assertThat(r.get("more", Boolean.class))
                .as("the second chunk's keys have no limit row: none was left behind a lock")
                .isFalse();
    }

    @Test
    void aLimitAnotherBatchHoldsInALaterChunkIsNotWaitedForItsKeyGoesInTheNextBatch() {
        lease(1);
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'k' || lpad(k::text, 3, '0')"
                        + " FROM generate_series(0, 99) k");
        dsl.execute("INSERT INTO dispatch_limits (dispatch_key, per_second, burst)"
                + " SELECT 'k' || lpad(k::text, 3, '0'), 1000, 1000 FROM generate_series(0, 99) k");
        dsl.transaction(c -> {
            // Another batch (of another shard) holds k080's limit, which sorts before keys this batch's
            // first chunk locked: waiting for it could deadlock, so the key waits for the next batch.
            c.dsl().execute("SELECT 1 FROM dispatch_limits WHERE dispatch_key = 'k080' FOR UPDATE");
            Record r = batch(1, 100);
            assertThat(r.get("completed", Integer.class)).isEqualTo(99);
            assertThat(r.get("more", Boolean.class))
                    .as("the next batch at once, for the key left")
                    .isTrue();
        });
        assertThat(batch(1, 100).get("completed", Integer.class)).isEqualTo(1);
        assertThat(value(Long.class, "SELECT count(*) FROM jobs WHERE state = 'pending'"))
                .isZero();
        assertThat(value(Double.class, "SELECT tokens FROM dispatch_limits WHERE dispatch_key = 'k080'"))
                .as("its token spent once")
                .isEqualTo(999.0, org.assertj.core.data.Offset.offset(1.0));
    }

    @Test
    void theBatchPlansItsStatementsWithSortsAllowedWhateverItsTransactionSays() {
        // The batch's transaction sets enable_sort = off for the plain path before the path is known
        // (FencedJobBatches.policyActive); under it the limits' lock read all of dispatch_limits in key order.
        assertThat(dsl.fetch("SELECT unnest(proconfig) FROM pg_proc WHERE proname = 'dispatch_batch' AND pronargs = 4")
                        .getValues(0, String.class))
                .contains("enable_sort=on");
        lease(1);
        backlog("INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'k' || k"
                + " FROM generate_series(1, 3) k");
        dsl.execute("INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES ('k1', 10, 10)");
        dsl.transaction(c -> {
            c.dsl().execute("SET LOCAL enable_sort = off");
            assertThat(c.dsl()
                            .fetchSingle("SELECT completed FROM dispatch_batch(1, 0, 10, NULL)")
                            .get(0, Integer.class))
                    .isEqualTo(3);
            assertThat(c.dsl()
                            .fetchSingle("SELECT current_setting('enable_sort')")
                            .get(0, String.class))
                    .as("the transaction's own setting, back after the call")
                    .isEqualTo("off");
        });
    }

    @Test
    void aKeyPausedAndResumedWhileTheWalkIsRememberedGoesInTheNextBatch() {
        lease(1);
        backlog("INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', k"
                + " FROM unnest(ARRAY['a', 'b']) k, generate_series(1, 50)");
        dsl.transaction(c -> {
            DSLContext tx = c.dsl();
            // One session: the first batch's walk went round and is remembered for the next ones.
            tx.fetchSingle("SELECT * FROM dispatch_batch(1, 0, 10, NULL)");
            tx.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES ('b')");
            tx.fetchSingle("SELECT * FROM dispatch_batch(1, 0, 10, NULL)");
            tx.execute("DELETE FROM dispatch_pauses WHERE dispatch_key = 'b'");
            long before = tx.fetchSingle("SELECT count(*) FROM jobs WHERE dispatch_key = 'b' AND state = 'completed'")
                    .get(0, Long.class);
            tx.fetchSingle("SELECT * FROM dispatch_batch(1, 0, 10, NULL)");
            assertThat(tx.fetchSingle("SELECT count(*) FROM jobs WHERE dispatch_key = 'b' AND state = 'completed'")
                            .get(0, Long.class))
                    .as("the remembered keys kept b while it was paused")
                    .isEqualTo(before + 5);
        });
    }

    @Test
    void theKeysOfTheLastWalkServeTheNextBatchUntilAJobIsInserted() {
        lease(1);
        backlog(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'a' FROM generate_series(1, 100)");
        dsl.transaction(c -> {
            DSLContext tx = c.dsl();
            // One session, as a leader's batches mostly are: the walk that went round is remembered in it.
            assertThat(tx.fetchSingle("SELECT * FROM dispatch_batch(1, 0, 10, NULL)")
                            .get("completed", Integer.class))
                    .isEqualTo(10);
            long tenth = tx.fetchSingle("SELECT max(id) FROM jobs WHERE state = 'completed'")
                    .get(0, Long.class);
            assertThat(tx.fetchSingle("SELECT current_setting('fenced_jobs.keys_of_shard_0', true)")
                            .get(0, String.class))
                    .as("the key, and its position: the rank and id of the last job taken")
                    .contains("|{a}|{")
                    .endsWith("|{" + tenth + "}");
            // The next batch of the session reads the key after its position: the next ten in rank order.
            assertThat(tx.fetchSingle("SELECT * FROM dispatch_batch(1, 0, 10, NULL)")
                            .get("completed", Integer.class))
                    .isEqualTo(10);
            assertThat(tx.fetch("SELECT id FROM jobs WHERE state = 'completed' ORDER BY id")
                            .map(x -> x.get(0, Long.class)))
                    .containsExactlyElementsOf(
                            tx.fetch("SELECT id FROM jobs ORDER BY id LIMIT 20").map(x -> x.get(0, Long.class)));
            tx.execute("INSERT INTO jobs (due_at, resource, dispatch_key) VALUES (clock_timestamp(), 'r', 'b')");
            tx.fetchSingle("SELECT * FROM dispatch_batch(1, 0, 10, NULL)");
            assertThat(tx.fetchSingle("SELECT state FROM jobs WHERE dispatch_key = 'b'")
                            .get(0, String.class))
                    .as("a job inserted since the walk: a walk again, which finds its key")
                    .isEqualTo("completed");
        });
    }

    @Test
    void whatWaitsBehindALimitAndTheBusiestKeysAreVisible() throws Exception {
        lease(1);
        dsl.execute(
                "INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES ('tenant-a', 0.001, 5), ('tenant-idle', 10, 10)");
        dsl.execute(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r', 'tenant-a' FROM generate_series(1, 50)");
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'free-' || mod(g, 2) FROM generate_series(1, 30) g");
        dsl.execute(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp() + interval '1 hour', 'r', 'tenant-a'"
                        + " FROM generate_series(1, 7)");
        assertThat(batch(1, 100).get("completed", Integer.class))
                .as("tenant-a's burst and every free job")
                .isEqualTo(5 + 30);
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'late-' || mod(g, 2) FROM generate_series(1, 3) g");

        DispatchOverview.Overview o = dsl.connectionResult(DispatchOverview::read);
        assertThat(o.limitCount()).isEqualTo(2);
        assertThat(o.limits())
                .as("fewest tokens first")
                .extracting(DispatchOverview.Limit::key)
                .containsExactly("tenant-a", "tenant-idle");
        DispatchOverview.Limit a = o.limits().get(0);
        assertThat(a.dueWaiting())
                .as("due jobs of tenant-a still pending; the 7 due in an hour do not count")
                .isEqualTo(50 - 5);
        assertThat(a.tokens()).isLessThan(1);
        assertThat(a.held()).isTrue();
        assertThat(o.limits().get(1).held())
                .as("a full bucket with nothing due")
                .isFalse();
        assertThat(o.busiestKeys())
                .extracting(DispatchOverview.BusyKey::key)
                .as("keys with due jobs, busiest first")
                .containsExactly("tenant-a", "late-1", "late-0");
        assertThat(o.busiestKeys())
                .extracting(DispatchOverview.BusyKey::dueJobs)
                .containsExactly(45L, 2L, 1L);
        assertThat(dsl.connectionResult(DispatchOverview::held))
                .as("due jobs held back by a limit")
                .isEqualTo(45);
        assertThat(o.toMap())
                .containsEntry("limitCount", 2)
                .containsKeys("limits", "busiestKeys", "dueWaitingCap", "busiestAmong");
    }

    @Test
    void aRunningDispatcherKeepsALimitInEveryOneSecondWindowAndSleepsBetweenTokens() {
        int perSecond = 20;
        int burst = 5;
        dsl.execute(
                "INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES ('tenant-a', ?, ?)",
                perSecond,
                burst);
        dsl.execute(
                "INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp(), 'r-' || mod(g, 3), 'tenant-a'"
                        + " FROM generate_series(1, 60) g");
        dsl.execute("INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'free' FROM generate_series(1, 30)");
        AtomicInteger batches = new AtomicInteger();
        Dispatcher leader = fixture.start(
                fixture.config(new LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW), 500),
                UnaryOperator.identity(),
                delegate -> new ObservedBatches(delegate, after -> batches.incrementAndGet()));
        await().atMost(Duration.ofSeconds(10)).until(() -> leader.state() == RunningService.State.LEADING);
        // While it waits for tokens, /status says which limit holds how many jobs back.
        await().atMost(Duration.ofSeconds(20)).until(() -> leader.status().get("heldJobs") instanceof Long n && n > 0);
        assertThat(leader.status().get("dispatch")).asString().contains("key=tenant-a");

        await().atMost(Duration.ofSeconds(20)).until(() -> fixture.pending() == 0);

        // Every window of one second that starts at a completion: at most rate + burst completions.
        Integer worst = value(
                Integer.class,
                "SELECT max(n) FROM (SELECT (SELECT count(*) FROM jobs b WHERE b.dispatch_key = 'tenant-a'"
                        + " AND b.completed_at >= a.completed_at AND b.completed_at <= a.completed_at + interval '1 second') n"
                        + " FROM jobs a WHERE a.dispatch_key = 'tenant-a') w");
        assertThat(worst)
                .as("completions of tenant-a in any one second")
                .isLessThanOrEqualTo(perSecond + burst)
                .isGreaterThan(burst);
        Double seconds = value(
                Double.class,
                "SELECT extract(epoch FROM max(completed_at) - min(completed_at))::float8 FROM jobs WHERE dispatch_key = 'tenant-a'");
        assertThat(seconds)
                .as("60 jobs at 20 a second after a burst of 5")
                .isGreaterThanOrEqualTo((60.0 - burst) / perSecond - 0.01);
        // It slept until each token: about one batch a token, not a loop that spins on the held jobs.
        assertThat(batches.get()).as("batches while 55 tokens came").isLessThan(500);
        fixture.assertExactlyOnceWithOutbox(90);
    }
}
