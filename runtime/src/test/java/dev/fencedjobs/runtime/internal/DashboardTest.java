package dev.fencedjobs.runtime.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.MigratedDatabase;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.testing.CompletedJobs;
import dev.fencedjobs.testing.SequentialReads;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The dashboard's samples, taken one at a time against a real database: jobs completed per
 * second from the jobs table, and a consumer's applied rate and due-to-effect latency from memory.
 */
class DashboardTest {

    @RegisterExtension
    static final MigratedDatabase db = new MigratedDatabase();
    /** Its own database: its 30,000 jobs completed just now would count in the other tests' samples. */
    @RegisterExtension
    static final MigratedDatabase agedOutbox = new MigratedDatabase();
    /** Its own database: two shards. */
    @RegisterExtension
    static final MigratedDatabase sharded = new MigratedDatabase();

    @Test
    @SuppressWarnings("unchecked")
    void samplesCountTheJobsCompletedSinceThePreviousOneAndWhatTheConsumerApplied() {
        // 40 jobs completed 2 to 3 seconds ago (inside the first sample's 5 s, which ends a second behind the clock),
        // 7 an hour ago (outside), 5 pending.
        db.dsl()
                .execute(
                        "INSERT INTO jobs (resource, due_at, state, completed_at, completed_by_token) SELECT 'r', clock_timestamp(), 'completed',"
                                + " clock_timestamp() - interval '2 seconds' - g * interval '10 milliseconds', 1 FROM generate_series(1, 40) g");
        db.dsl()
                .execute(
                        "INSERT INTO jobs (resource, due_at, state, completed_at, completed_by_token) SELECT 'r', clock_timestamp(), 'completed',"
                                + " clock_timestamp() - interval '1 hour', 1 FROM generate_series(1, 7) g");
        db.dsl()
                .execute(
                        "INSERT INTO jobs (resource, due_at) SELECT 'r', clock_timestamp() - interval '1 minute' FROM generate_series(1, 5) g");
        AtomicLong applied = new AtomicLong(100);
        LatencyWindow window = new LatencyWindow();
        try (Dashboard dashboard = new Dashboard(
                "consumer", db.pool(), new Dashboard.ConsumerSide(() -> 3, applied::get, window), false)) {
            dashboard.sampleOnce();
            Map<String, Object> first = last(dashboard);
            assertThat((Double) first.get("completedPerSecond"))
                    .as("40 jobs in the first 5 s")
                    .isCloseTo(8.0, within(0.05));
            assertThat(first.get("dueBacklog")).isEqualTo(5L);
            assertThat(first.get("consumerLag")).isEqualTo(3L);
            assertThat(first.get("appliedPerSecond"))
                    .as("no rate before a second count")
                    .isNull();
            assertThat(first.get("dueToEffectP99Seconds"))
                    .as("nothing applied: no latency, rather than 0")
                    .isNull();

            // The next sample counts from where the first one stopped: those 40 are not counted again.
            applied.addAndGet(50);
            for (int i = 0; i < 99; i++) {
                window.record(20_000_000L); // 20 ms
            }
            window.record(4_000_000_000L); // 4 s
            dashboard.sampleOnce();
            Map<String, Object> second = last(dashboard);
            assertThat(second.get("completedPerSecond")).isEqualTo(0.0);
            assertThat((Double) second.get("appliedPerSecond")).isPositive();
            assertThat((Double) second.get("dueToEffectP50Seconds")).isBetween(0.020, 0.022);
            assertThat((Double) second.get("dueToEffectP99Seconds"))
                    .as("99 of 100 within 20 ms")
                    .isBetween(0.020, 0.022);
            assertThat(second.get("dueToEffectMaxSeconds")).isEqualTo(4.0);

            Map<String, Object> page = dashboard.snapshot();
            assertThat((List<Map<String, Object>>) page.get("samples")).hasSize(2);
            assertThat(page).containsEntry("consumer", true).containsEntry("keptMinutes", 10L);
        }
    }

    @Test
    void aServiceThatIsNotAConsumerSamplesNoConsumerSeries() {
        try (Dashboard dashboard = new Dashboard("dispatcher", db.pool(), null, false)) {
            dashboard.sampleOnce();
            Map<String, Object> sample = last(dashboard);
            assertThat(sample)
                    .containsEntry("consumerLag", null)
                    .containsEntry("appliedPerSecond", null)
                    .containsEntry("dueToEffectP99Seconds", null);
            assertThat(sample.get("completedPerSecond")).isNotNull();
            assertThat(dashboard.snapshot()).containsEntry("consumer", false);
        }
    }

    /**
     * A sample reads the outbox rows the relay has not published, not the whole outbox. With the
     * position in a subquery, the planner took a third of the table to be after it and read all of
     * it, every five seconds in every service: at the end of a 12-minute benchmark, 800,000 rows
     * and 170 ms a sample.
     */
    @Test
    void theOutboxLagReadsTheUnpublishedRowsNotTheWholeOutbox() throws Exception {
        agedOutbox.dsl().connection(c -> CompletedJobs.agedOutbox(c, 10));
        // One connection, so that the sample's statistics are flushed from the session that made them.
        try (HikariDataSource one = Database.pool(
                        MigratedDatabase.config(agedOutbox.database()).withPoolSize(1), "test-one");
                Dashboard dashboard = new Dashboard("relay", one, null, false)) {
            long before = outboxReadSequentially(one);
            dashboard.sampleOnce();
            long read = outboxReadSequentially(one) - before;

            assertThat((Double) last(dashboard).get("outboxLagSeconds"))
                    .as("the oldest unpublished row's age")
                    .isBetween(0.0, 60.0);
            assertThat(read).as("outbox rows read sequentially by one sample").isLessThan(1_000);
        }
    }

    /** Each shard's lease on the page, with what waits for its holder: due jobs, unpublished rows. */
    @Test
    @SuppressWarnings("unchecked")
    void eachShardsLeaseShowsWhatWaitsForItsHolder() throws Exception {
        sharded.dsl().execute("SELECT shards_set(2)");
        sharded.dsl().execute("SELECT shards_switch()");
        // 'r-1' and 'r-2' fall in different shards of two: 3 due jobs of one, 5 of the other, and
        // 4 completed jobs' rows, none published.
        assertThat(sharded.dsl()
                        .fetchSingle("SELECT shard_of('r-1', 2) <> shard_of('r-2', 2)")
                        .get(0, Boolean.class))
                .isTrue();
        sharded.dsl()
                .execute("INSERT INTO jobs (resource, due_at) SELECT CASE WHEN g <= 3 THEN 'r-1' ELSE 'r-2' END,"
                        + " clock_timestamp() FROM generate_series(1, 8) g");
        sharded.dsl().connection(c -> CompletedJobs.insert(c, 4, "'r-1'", "'{}'"));
        sharded.dsl()
                .execute("INSERT INTO leader_lease SELECT shard_role('relay', s), 'relay-x', 1, clock_timestamp()"
                        + " FROM unnest(shard_list()) s ORDER BY s");
        try (Dashboard dashboard = new Dashboard("dispatcher", sharded.pool(), null, false)) {
            Map<String, Map<String, Object>> byRole = new java.util.TreeMap<>();
            for (Map<String, Object> r :
                    (List<Map<String, Object>>) dashboard.snapshot().get("roles")) {
                byRole.put((String) r.get("role"), r);
            }
            assertThat(byRole).containsOnlyKeys("relay", "relay/1", "scheduler", "scheduler/1");
            String one = sharded.dsl()
                    .fetchSingle("SELECT shard_role('scheduler', shard_of('r-1', 2))")
                    .get(0, String.class);
            String two = one.equals("scheduler") ? "scheduler/1" : "scheduler";
            assertThat(byRole.get(one)).containsEntry("dueJobs", 3L);
            assertThat(byRole.get(two)).containsEntry("dueJobs", 5L);
            String relayOne = one.replace("scheduler", "relay");
            String relayTwo = two.replace("scheduler", "relay");
            assertThat(byRole.get(relayOne)).containsEntry("unpublished", 4L);
            assertThat(byRole.get(relayTwo)).containsEntry("unpublished", 0L);
        }
    }

    /** {@code outbox}'s rows read sequentially, with the counts of the pool's one session in. */
    private static long outboxReadSequentially(HikariDataSource one) throws SQLException {
        try (Connection c = one.getConnection()) {
            return SequentialReads.flushedOf(c, "outbox");
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> last(Dashboard dashboard) {
        List<Map<String, Object>> samples =
                (List<Map<String, Object>>) dashboard.snapshot().get("samples");
        return samples.get(samples.size() - 1);
    }
}
