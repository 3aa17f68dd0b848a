package dev.fencedjobs.dispatcher;

import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static dev.fencedjobs.db.jooq.Tables.LEADER_LEASE;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.runtime.internal.ServiceEnvironment;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.ServiceProcess;
import dev.fencedjobs.testing.TestDatabase;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Dispatcher replicas as real processes from the packaged jar, stopped with real signals. */
class DispatcherProcessIT {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private final List<ServiceProcess> processes = new ArrayList<>();
    private DispatcherFixture fixture;
    private String testName;

    @BeforeEach
    void setUp(TestInfo info) {
        TestDatabase db = postgres.database();
        fixture = new DispatcherFixture(db.url(), db.user(), db.password());
        testName = info.getTestMethod().orElseThrow().getName();
    }

    @AfterEach
    void tearDown() {
        processes.forEach(ServiceProcess::close);
        fixture.close();
    }

    private ServiceProcess replica(Duration leaseDuration, Duration renewInterval) {
        return replica(leaseDuration, renewInterval, true);
    }

    private ServiceProcess replica(Duration leaseDuration, Duration renewInterval, boolean fastTakeover) {
        TestDatabase db = postgres.database();
        Map<String, String> env = ServiceEnvironment.database(db.url(), db.user(), db.password())
                .lease(leaseDuration, renewInterval)
                .fastTakeover(fastTakeover)
                .serverTimeouts(Duration.ofMillis(500), Duration.ofMillis(500), Duration.ofSeconds(1))
                .httpPort(0)
                .toMap();
        ServiceProcess p = ServiceProcess.start(
                testName + "-" + (processes.size() + 1),
                Path.of(System.getProperty("dispatcher.jar")),
                env,
                Path.of("target", "process-logs"));
        processes.add(p);
        return p;
    }

    /** The process whose holder id (host-pid-random) holds the lease now. */
    private ServiceProcess leaderProcess() {
        await().atMost(Duration.ofSeconds(30))
                .until(() -> fixture.dsl().fetchExists(LEADER_LEASE, LEADER_LEASE.ROLE.eq(DispatcherConfig.ROLE)));
        String holder = fixture.dsl()
                .select(LEADER_LEASE.HOLDER_ID)
                .from(LEADER_LEASE)
                .where(LEADER_LEASE.ROLE.eq(DispatcherConfig.ROLE))
                .fetchSingle()
                .value1();
        return processes.stream()
                .filter(p -> holder.contains("-" + p.pid() + "-"))
                .findFirst()
                .orElseThrow();
    }

    private void insertAndAwaitCompletion(int jobs) {
        int before = fixture.completed();
        fixture.dsl()
                .execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, " + jobs + ")");
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.completed() == before + jobs);
    }

    @Test
    void aSigkilledLeaderIsReplacedAtOnce_beforeItsLeaseExpires_withTheNextToken() {
        // A 30 s lease: a takeover before its expiry can only be the fast path.
        replica(Duration.ofSeconds(30), Duration.ofSeconds(5));
        replica(Duration.ofSeconds(30), Duration.ofSeconds(5));
        killLeaderAndCheckTakeover(true);
    }

    @Test
    void withTheFastPathOff_aSigkilledLeaderIsReplacedAfterExpiryWithTheNextToken() {
        replica(Duration.ofSeconds(2), Duration.ofMillis(500), false);
        replica(Duration.ofSeconds(2), Duration.ofMillis(500), false);
        killLeaderAndCheckTakeover(false);
    }

    @Test
    void aSigstoppedLeaderKeepsItsSession_andIsReplacedOnlyAfterExpiry() {
        replica(Duration.ofSeconds(2), Duration.ofMillis(500));
        replica(Duration.ofSeconds(2), Duration.ofMillis(500));
        insertAndAwaitCompletion(200);
        ServiceProcess leader = leaderProcess();
        long token = fixture.currentToken();
        awaitFollowerWatching(); // so the takeover at expiry is the one a watching follower makes too
        java.time.OffsetDateTime expiryAtStop = expiryOf(token);
        leader.pause();
        try {
            fixture.dsl()
                    .execute(
                            "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'after-stop' FROM generate_series(1, 200)");
            await().atMost(Duration.ofSeconds(15)).until(() -> fixture.pending() == 0);
            assertThat(fixture.currentToken()).isEqualTo(token + 1);
            assertThat(acquiredAt(token + 1))
                    .as("the takeover from a stopped, not dead, leader")
                    .isAfterOrEqualTo(expiryAtStop);
        } finally {
            leader.resume();
        }
        await().atMost(Duration.ofSeconds(15)).until(() -> leader.output().contains("another holder has the lease"));
        insertAndAwaitCompletion(200);
        fixture.assertExactlyOnceWithOutbox(600);
    }

    /**
     * Waits until a follower waits for the holder's sign of life: its watch session's lock request
     * is queued. A follower that first looks after the holder's session ended sees no sign of life,
     * proves nothing, and waits for the expiry.
     */
    private void awaitFollowerWatching() {
        await().atMost(Duration.ofSeconds(30))
                .until(
                        () -> fixture.dsl()
                                .fetchExists(
                                        fixture.dsl()
                                                .selectFrom("pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid")
                                                .where(
                                                        "l.locktype = 'advisory' AND NOT l.granted AND a.application_name = 'dispatcher-watch'")));
    }

    private void killLeaderAndCheckTakeover(boolean fastPath) {
        insertAndAwaitCompletion(500);
        ServiceProcess leader = leaderProcess();
        long token = fixture.currentToken();
        if (fastPath) {
            awaitFollowerWatching();
        }

        // Read before the kill (the row belongs to the next holder afterwards): a renewal after it only moves the
        // expiry later.
        java.time.OffsetDateTime expiryAtKill = expiryOf(token);
        leader.kill();
        fixture.dsl()
                .execute(
                        "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'after-kill' FROM generate_series(1, 500)");
        await().atMost(Duration.ofSeconds(15)).until(() -> fixture.pending() == 0);

        assertThat(fixture.currentToken()).isEqualTo(token + 1);
        assertThat(leaderProcess()).isNotSameAs(leader);
        assertThat(fixture.dsl()
                        .selectDistinct(JOBS.COMPLETED_BY_TOKEN)
                        .from(JOBS)
                        .where(JOBS.RESOURCE.eq("after-kill"))
                        .fetch(r -> r.value1()))
                .containsExactly(token + 1);
        // In database time, against the killed leader's last renewed expiry.
        if (fastPath) {
            assertThat(acquiredAt(token + 1))
                    .as("the takeover after SIGKILL, on the fast path")
                    .isBefore(expiryAtKill);
        } else {
            assertThat(acquiredAt(token + 1))
                    .as("the takeover after SIGKILL, by the lease")
                    .isAfterOrEqualTo(expiryAtKill);
        }
        fixture.assertExactlyOnceWithOutbox(1000);
        assertThat(leader.output()).doesNotContain("released the lease");
    }

    @Test
    void aSigtermedLeaderFinishesReleasesAndAFollowerTakesOverAtOnce() {
        // A 30 s lease: without the release, the takeover would wait up to 30 s.
        replica(Duration.ofSeconds(30), Duration.ofSeconds(5));
        ServiceProcess follower = replica(Duration.ofSeconds(30), Duration.ofSeconds(5));
        insertAndAwaitCompletion(200);
        ServiceProcess leader = leaderProcess();
        if (leader == follower) {
            follower = processes.get(0);
        }
        long token = fixture.currentToken();

        // Renewals only move it later: a takeover before it came from the release, not from expiry.
        java.time.OffsetDateTime expiryBeforeStop = expiryOf(token);
        leader.terminate();
        assertThat(leader.waitFor()).as("exit code after SIGTERM").isIn(0, 143);
        await().atMost(Duration.ofSeconds(10)).until(() -> fixture.currentToken() == token + 1);

        assertThat(acquiredAt(token + 1))
                .as("the graceful handoff, in database time, against the 30 s lease's expiry")
                .isBefore(expiryBeforeStop);
        assertThat(leaderProcess()).isSameAs(follower);
        assertThat(leader.output())
                .contains("stopping: no new work")
                .contains("released the lease")
                .contains("stopped");
        insertAndAwaitCompletion(200);
        fixture.assertExactlyOnceWithOutbox(400);
    }

    /** The lease's expiry while {@code token} holds it (the last renewal's), in database time. */
    private java.time.OffsetDateTime expiryOf(long token) {
        return fixture.dsl()
                .fetchOne("SELECT expires_at FROM leader_lease WHERE role = 'scheduler' AND fencing_token = ?", token)
                .get(0, java.time.OffsetDateTime.class);
    }

    private java.time.OffsetDateTime acquiredAt(long token) {
        return fixture.dsl()
                .fetchOne(
                        "SELECT acquired_at FROM lease_takeover WHERE role = 'scheduler' AND fencing_token = ?", token)
                .get(0, java.time.OffsetDateTime.class);
    }
}
