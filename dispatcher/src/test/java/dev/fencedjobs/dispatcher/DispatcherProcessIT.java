package dev.fencedjobs.dispatcher;

import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static dev.fencedjobs.db.jooq.Tables.LEADER_LEASE;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.ServiceProcess;
import dev.fencedjobs.testing.TestDatabase;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
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

    private ServiceProcess replica(String leaseDuration, String renewInterval) {
        TestDatabase db = postgres.database();
        Map<String, String> env = new HashMap<>();
        env.put("DATABASE_URL", db.url());
        env.put("DATABASE_USER", db.user());
        env.put("DATABASE_PASSWORD", db.password());
        env.put("LEASE_DURATION", leaseDuration);
        env.put("RENEW_INTERVAL", renewInterval);
        env.put("DATABASE_STATEMENT_TIMEOUT", "500ms");
        env.put("DATABASE_LOCK_TIMEOUT", "500ms");
        env.put("DATABASE_IDLE_IN_TRANSACTION_TIMEOUT", "1s");
        env.put("HTTP_PORT", "0");
        ServiceProcess p = ServiceProcess.start(testName + "-" + (processes.size() + 1),
                Path.of(System.getProperty("dispatcher.jar")), env, Path.of("target", "process-logs"));
        processes.add(p);
        return p;
    }

    /** The process whose holder id (host-pid-random) holds the lease now. */
    private ServiceProcess leaderProcess() {
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.dsl()
                .fetchExists(LEADER_LEASE, LEADER_LEASE.ROLE.eq(DispatcherConfig.ROLE)));
        String holder = fixture.dsl().select(LEADER_LEASE.HOLDER_ID).from(LEADER_LEASE)
                .where(LEADER_LEASE.ROLE.eq(DispatcherConfig.ROLE)).fetchSingle().value1();
        return processes.stream().filter(p -> holder.contains("-" + p.pid() + "-")).findFirst().orElseThrow();
    }

    private void insertAndAwaitCompletion(int jobs) {
        int before = fixture.completed();
        fixture.dsl().execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, " + jobs + ")");
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.completed() == before + jobs);
    }

    @Test
    void aSigkilledLeaderIsReplacedAfterExpiryWithTheNextToken() {
        replica("2s", "500ms");
        replica("2s", "500ms");
        insertAndAwaitCompletion(500);
        ServiceProcess leader = leaderProcess();
        long token = fixture.currentToken();

        long killedAt = System.nanoTime();
        leader.kill();
        fixture.dsl().execute("INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'after-kill' FROM generate_series(1, 500)");
        await().atMost(Duration.ofSeconds(15)).until(() -> fixture.pending() == 0);
        Duration takeover = Duration.ofNanos(System.nanoTime() - killedAt);

        assertThat(fixture.currentToken()).isEqualTo(token + 1);
        assertThat(leaderProcess()).isNotSameAs(leader);
        assertThat(fixture.dsl().selectDistinct(JOBS.COMPLETED_BY_TOKEN).from(JOBS).where(JOBS.RESOURCE.eq("after-kill"))
                .fetch(r -> r.value1())).containsExactly(token + 1);
        assertThat(takeover).as("takeover after SIGKILL with a 2 s lease").isLessThan(Duration.ofSeconds(6));
        fixture.assertExactlyOnceWithOutbox(1000);
        assertThat(leader.output()).doesNotContain("released the lease");
    }

    @Test
    void aSigtermedLeaderFinishesReleasesAndAFollowerTakesOverAtOnce() {
        // A 30 s lease: without the release, the takeover would wait up to 30 s.
        replica("30s", "5s");
        ServiceProcess follower = replica("30s", "5s");
        insertAndAwaitCompletion(200);
        ServiceProcess leader = leaderProcess();
        if (leader == follower) {
            follower = processes.get(0);
        }
        long token = fixture.currentToken();

        long terminatedAt = System.nanoTime();
        leader.terminate();
        assertThat(leader.waitFor()).as("exit code after SIGTERM").isIn(0, 143);
        await().atMost(Duration.ofSeconds(10)).until(() -> fixture.currentToken() == token + 1);
        Duration handoff = Duration.ofNanos(System.nanoTime() - terminatedAt);

        assertThat(handoff).as("graceful handoff with a 30 s lease").isLessThan(Duration.ofSeconds(5));
        assertThat(leaderProcess()).isSameAs(follower);
        assertThat(leader.output()).contains("stopping: no new work").contains("released the lease").contains("stopped");
        insertAndAwaitCompletion(200);
        fixture.assertExactlyOnceWithOutbox(400);
    }
}
