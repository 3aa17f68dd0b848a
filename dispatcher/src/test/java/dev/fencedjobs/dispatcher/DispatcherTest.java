package dev.fencedjobs.dispatcher;

import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static dev.fencedjobs.db.jooq.Tables.LEASE_TAKEOVER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

class DispatcherTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private DispatcherFixture fixture;

    @BeforeEach
    void setUp() {
        TestDatabase db = postgres.database();
        fixture = new DispatcherFixture(db.url(), db.user(), db.password());
    }

    @AfterEach
    void tearDown() {
        fixture.close();
    }

    @Test
    void threeReplicasComplete20000JobsExactlyOnceWithOneOutboxRowEach() throws Exception {
        // Half due at once, half due over the next three seconds, while replicas come and go.
        fixture.dsl()
                .execute(
                        "INSERT INTO jobs (resource, due_at, payload) "
                                + "SELECT 'r-' || (g % 50), clock_timestamp(), jsonb_build_object('n', g) FROM generate_series(1, 10000) g");
        fixture.start();
        fixture.start();
        fixture.start();
        Thread producer = new Thread(() -> {
            for (int chunk = 0; chunk < 20; chunk++) {
                fixture.dsl()
                        .execute(
                                "INSERT INTO jobs (resource, due_at) SELECT 'r-' || (g % 50), "
                                        + "clock_timestamp() + (random() * 3000 || ' milliseconds')::interval FROM generate_series(1, 500) g");
                sleep(ThreadLocalRandom.current().nextInt(50, 150));
            }
        });
        producer.start();
        // A graceful handoff in the middle, so more than one token completes jobs.
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.leader().isPresent() && fixture.completed() > 3000);
        fixture.leader().orElseThrow().close();
        fixture.start();
        producer.join();

        await().atMost(Duration.ofSeconds(60)).until(() -> fixture.pending() == 0);
        fixture.assertExactlyOnceWithOutbox(20_000);
        List<Long> tokens =
                fixture.dsl().selectDistinct(JOBS.COMPLETED_BY_TOKEN).from(JOBS).fetch(r -> r.value1());
        assertThat(tokens).hasSizeGreaterThanOrEqualTo(2);
        assertThat(fixture.dsl().fetchCount(LEASE_TAKEOVER, LEASE_TAKEOVER.FENCING_TOKEN.in(tokens)))
                .as("every completing token was a recorded takeover")
                .isEqualTo(tokens.size());
    }

    @Test
    void aPausedFormerLeaderThatResumesWritesNothingAndStepsDown() {
        PauseSwitch pause = new PauseSwitch();
        Dispatcher a = fixture.start(
                fixture.config(new LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW), 100),
                pause::lease,
                pause::batches);
        await().atMost(Duration.ofSeconds(10)).until(() -> a.state() == RunningService.State.LEADING);
        FencingToken tokenA = a.token().orElseThrow();

        // A stops in its tracks: its worker will block in the next batch, holding its grant.
        pause.pause();
        fixture.dsl().execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, 1000)");
        await().atMost(Duration.ofSeconds(10)).until(() -> pause.blocked() >= 1);

        Dispatcher b = fixture.start();
        await().atMost(Duration.ofSeconds(15)).until(() -> b.state() == RunningService.State.LEADING);
        await().atMost(Duration.ofSeconds(15)).until(() -> fixture.pending() == 0);
        FencingToken tokenB = b.token().orElseThrow();
        assertThat(tokenB).isEqualTo(tokenA.next());

        // A resumes with its stale grant: its guard fails, it writes nothing and steps down. The only
        // jobs it could write now are these 100: B completed every other one already.
        long before = fixture.dsl()
                .select(org.jooq.impl.DSL.max(JOBS.ID))
                .from(JOBS)
                .fetchSingle()
                .value1();
        fixture.dsl().execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, 100)");
        pause.resume();
        await().atMost(Duration.ofSeconds(10)).until(() -> a.state() == RunningService.State.FOLLOWING);
        await().atMost(Duration.ofSeconds(10)).until(() -> fixture.pending() == 0);
        assertThat(fixture.dsl().fetchCount(JOBS, JOBS.ID.gt(before).and(JOBS.COMPLETED_BY_TOKEN.eq(tokenB.value()))))
                .as("the jobs inserted while the paused former leader resumed: every one completed by the new leader")
                .isEqualTo(100);
        // A batch of A's can have passed the pause switch just before it closed, and then completed
        // up to one batch (100) of the 1,000 while A still led: that is A's to do, before the takeover.
        int byA = fixture.dsl().fetchCount(JOBS, JOBS.COMPLETED_BY_TOKEN.eq(tokenA.value()));
        assertThat(byA)
                .as("jobs completed by the paused leader: at most the batch in flight when the pause took hold")
                .isLessThanOrEqualTo(100);
        assertThat(fixture.dsl().fetchCount(JOBS, JOBS.COMPLETED_BY_TOKEN.eq(tokenB.value())))
                .isEqualTo(1100 - byA);
        fixture.assertExactlyOnceWithOutbox(1100);
        assertThat(a.state()).isEqualTo(RunningService.State.FOLLOWING);
    }

    @Test
    void gracefulShutdownHandsOverWithoutWaitingForTheLeaseToExpire() {
        LeaseConfig longLease = new LeaseConfig(Duration.ofSeconds(30), Duration.ofSeconds(5));
        Dispatcher a =
                fixture.start(fixture.config(longLease, 500), UnaryOperator.identity(), UnaryOperator.identity());
        await().atMost(Duration.ofSeconds(10)).until(() -> a.state() == RunningService.State.LEADING);
        Dispatcher b =
                fixture.start(fixture.config(longLease, 500), UnaryOperator.identity(), UnaryOperator.identity());
        long tokenA = fixture.currentToken();
        // Renewals only move it later: a takeover before it came from the release, not from expiry.
        java.time.OffsetDateTime expiryBeforeStop = fixture.dsl()
                .fetchOne("SELECT expires_at FROM leader_lease WHERE role = 'scheduler'")
                .get(0, java.time.OffsetDateTime.class);

        a.close();
        await().atMost(Duration.ofSeconds(10)).until(() -> b.state() == RunningService.State.LEADING);
        assertThat(fixture.currentToken()).isEqualTo(tokenA + 1);
        java.time.OffsetDateTime acquired = fixture.dsl()
                .select(LEASE_TAKEOVER.ACQUIRED_AT)
                .from(LEASE_TAKEOVER)
                .where(LEASE_TAKEOVER.ROLE.eq("scheduler").and(LEASE_TAKEOVER.FENCING_TOKEN.eq(tokenA + 1)))
                .fetchSingle()
                .value1();
        assertThat(acquired)
                .as("the follower's acquisition, in database time, against the leader's expiry before it stopped")
                .isBefore(expiryBeforeStop);

        fixture.dsl().execute("INSERT INTO jobs (due_at) VALUES (clock_timestamp())");
        await().atMost(Duration.ofSeconds(5)).until(() -> fixture.pending() == 0);
        fixture.assertExactlyOnceWithOutbox(1);
    }

    /**
     * The loop's reactions to {@code jobs_due} are {@code DispatchLoopTest}'s, on a settable clock;
     * here, against the server, the payload the triggers send is what the loop reads: the earliest
     * due time the statement wrote and its transaction.
     */
    @Test
    void theTriggersNotifyTheDueTimeAndTransactionTheLoopReads() throws Exception {
        TestDatabase db = postgres.database();
        try (java.sql.Connection listen = java.sql.DriverManager.getConnection(db.url(), db.user(), db.password());
                java.sql.Connection write = java.sql.DriverManager.getConnection(db.url(), db.user(), db.password())) {
            listen.createStatement().execute("LISTEN jobs_due");
            write.setAutoCommit(false);
            java.sql.ResultSet rs = write.createStatement()
                    .executeQuery("INSERT INTO jobs (due_at, resource) VALUES "
                            + "(clock_timestamp() + interval '1 hour', 'a'), (clock_timestamp() + interval '300 milliseconds', 'b') "
                            + "RETURNING (SELECT pg_current_xact_id()::text::bigint)");
            rs.next();
            long insertXid = rs.getLong(1);
            write.commit();
            ScanPosition.Notified inserted = ScanPosition.Notified.parse(nextNotification(listen));
            assertThat(inserted).isEqualTo(new ScanPosition.Notified(dueMillis("b"), insertXid));

            rs = write.createStatement()
                    .executeQuery(
                            "UPDATE jobs SET due_at = due_at - interval '1 minute' WHERE resource = 'a' RETURNING pg_current_xact_id()::text::bigint");
            rs.next();
            long updateXid = rs.getLong(1);
            write.commit();
            assertThat(ScanPosition.Notified.parse(nextNotification(listen)))
                    .as("a job moved earlier")
                    .isEqualTo(new ScanPosition.Notified(dueMillis("a"), updateXid));
        }
    }

    private long dueMillis(String resource) {
        return fixture.dsl()
                .select(JOBS.DUE_AT)
                .from(JOBS)
                .where(JOBS.RESOURCE.eq(resource))
                .fetchSingle()
                .value1()
                .toInstant()
                .toEpochMilli();
    }

    private static String nextNotification(java.sql.Connection listen) throws java.sql.SQLException {
        org.postgresql.PGNotification[] got =
                listen.unwrap(org.postgresql.PGConnection.class).getNotifications(10_000);
        assertThat(got).as("a jobs_due notification").isNotNull().hasSize(1);
        return got[0].getParameter();
    }

    @Test
    void aJobInsertedWhileTheLeaderSleepsIsCompletedNeverBeforeItIsDue() {
        LeaseConfig slow = new LeaseConfig(Duration.ofSeconds(30), Duration.ofSeconds(10));
        Dispatcher a = fixture.start(fixture.config(slow, 500), UnaryOperator.identity(), UnaryOperator.identity());
        await().atMost(Duration.ofSeconds(10)).until(() -> a.state() == RunningService.State.LEADING);
        fixture.dsl()
                .execute("INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp() + interval '1 hour', 'later')");
        fixture.dsl()
                .execute(
                        "INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp() + interval '300 milliseconds', 'soon')");
        await().atMost(Duration.ofSeconds(10))
                .until(() ->
                        fixture.dsl().fetchCount(JOBS, JOBS.RESOURCE.eq("soon").and(JOBS.STATE.eq("completed"))) == 1);
        assertThat(fixture.dsl()
                        .fetchOne("SELECT completed_at >= due_at FROM jobs WHERE resource = 'soon'")
                        .get(0, Boolean.class))
                .as("completed at or after its due time, in database time")
                .isTrue();
        assertThat(fixture.dsl().fetchCount(JOBS, JOBS.RESOURCE.eq("later").and(JOBS.STATE.eq("pending"))))
                .isEqualTo(1);

        fixture.dsl().execute("UPDATE jobs SET due_at = clock_timestamp() WHERE resource = 'later'");
        await().atMost(Duration.ofSeconds(10)).until(() -> fixture.pending() == 0);
        fixture.assertExactlyOnceWithOutbox(2);
    }

    @Test
    void theWarmUpWritesAndLocksNothing() {
        fixture.dsl().execute("INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp(), 'due')");
        dev.fencedjobs.lease.Lease lease = new dev.fencedjobs.lease.Lease(
                fixture.dsl(), "scheduler", "warm", Duration.ofSeconds(30), dev.fencedjobs.db.internal.Ticker.system());
        assertThat(lease.acquireOrRenew()).isPresent();

        new FencedJobBatches(fixture.dsl(), lease).warmUp();

        assertThat(fixture.pending()).as("the due job is still pending").isEqualTo(1);
        assertThat(fixture.dsl().fetchCount(dev.fencedjobs.db.jooq.Tables.OUTBOX))
                .isZero();
        assertThat(lease.read().orElseThrow().live())
                .as("the lease is untouched")
                .isTrue();
    }

    @Test
    void theBacklogGaugesCountDueJobsOnlyAndTheLongestWait() {
        FencedJobBatches batches = new FencedJobBatches(fixture.dsl(), null);
        assertThat(batches.backlog()).isEqualTo(new JobBatches.Backlog(0, 0));
        fixture.dsl()
                .execute(
                        "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp() - interval '90 seconds', 'late' FROM generate_series(1, 3)");
        fixture.dsl()
                .execute(
                        "INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp() - interval '5 seconds', 'due')");
        fixture.dsl()
                .execute(
                        "INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp() + interval '1 hour', 'future')");
        fixture.dsl().execute("SELECT cancel_job(id) FROM jobs WHERE resource = 'due'");

        JobBatches.Backlog backlog = batches.backlog();

        assertThat(backlog.due())
                .as("due and pending: not the cancelled one, not the future one")
                .isEqualTo(3);
        assertThat(backlog.oldestDueSeconds()).isBetween(90.0, 150.0);
    }

    @Test
    void theOpsEndpointServesHealthMetricsAndStatus() throws Exception {
        Dispatcher a = fixture.start();
        await().atMost(Duration.ofSeconds(10)).until(() -> a.state() == RunningService.State.LEADING);
        fixture.dsl().execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, 10)");
        await().atMost(Duration.ofSeconds(10)).until(() -> fixture.pending() == 0);

        java.net.http.HttpClient http = java.net.http.HttpClient.newHttpClient();
        java.util.function.Function<String, java.net.http.HttpResponse<String>> get = path -> {
            try {
                return http.send(
                        java.net.http.HttpRequest.newBuilder(
                                        java.net.URI.create("http://localhost:" + a.httpPort() + path))
                                .build(),
                        java.net.http.HttpResponse.BodyHandlers.ofString());
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        };
        assertThat(get.apply("/health/live").statusCode()).isEqualTo(200);
        assertThat(get.apply("/health/ready").statusCode()).isEqualTo(200);
        String metrics = get.apply("/metrics").body();
        assertThat(metrics)
                .contains("fencedjobs_leader{role=\"scheduler\",service=\"dispatcher\"} 1.0")
                .contains("fencedjobs_lease_token{")
                .contains("fencedjobs_lease_takeovers_total{")
                .contains("fencedjobs_lease_renewals_total{")
                .contains("fencedjobs_lease_renewal_seconds_count{")
                .contains("fencedjobs_lease_renewal_failures_total{")
                .contains("fencedjobs_jobs_completed_total{service=\"dispatcher\"} 10.0")
                .contains("fencedjobs_batch_jobs_sum{")
                .contains("fencedjobs_batch_seconds_count{")
                .contains("fencedjobs_guard_rejections_total{")
                .contains("fencedjobs_jobs_due{service=\"dispatcher\",shard=\"0\"} 0.0")
                .contains("fencedjobs_jobs_oldest_due_seconds{");
        String status = get.apply("/status").body();
        assertThat(status)
                .contains("\"role\" : \"scheduler\"")
                .contains("\"holder\" : \"replica-1\"")
                .contains("\"state\" : \"LEADER\"")
                .contains("\"token\" : 1")
                .contains("\"leaseExpiresAt\"")
                .contains("\"lastBatch\"")
                .contains("\"completed\" : 10");
    }

    static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
