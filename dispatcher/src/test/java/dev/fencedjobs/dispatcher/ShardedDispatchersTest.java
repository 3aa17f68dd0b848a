package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.PostgresExtension;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.jooq.DSLContext;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Dispatcher replicas sharing the shards (docs/shards.md) on a real PostgreSQL: every live replica
 * holds its share, a replica that joins gets its share by handoff and one that stops gives its
 * shards to the others, each job is completed by its shard's holder with that shard's token, and
 * the shard count changes while jobs flow with nothing lost and every resource's tokens growing.
 * The relay is stood in for by moving its positions in SQL (it is not what is tested here).
 */
class ShardedDispatchersTest {

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

    private void shards(int n) {
        dsl.execute("SELECT shards_set(?)", n);
        dsl.execute("UPDATE outbox_position SET published_through = (SELECT coalesce(max(id), 0) FROM outbox)");
        dsl.execute("SELECT shards_switch()");
    }

    @SuppressWarnings("unchecked")
    private static int holding(Dispatcher d) {
        return (Integer) ((Map<String, Object>) d.status().get("shards")).get("holding");
    }

    private static List<Integer> holdings(List<Dispatcher> replicas) {
        List<Integer> h = new ArrayList<>();
        for (Dispatcher d : replicas) {
            h.add(holding(d));
        }
        return h;
    }

    private int liveLeases() {
        return dsl.fetchSingle("SELECT count(*)::int FROM leader_lease l, unnest(shard_list()) s"
                        + " WHERE l.role = shard_role('scheduler', s) AND l.expires_at > clock_timestamp()")
                .get(0, Integer.class);
    }

    private void insert(int jobs, int resources) {
        insert(dsl, jobs, resources);
    }

    private static void insert(DSLContext dsl, int jobs, int resources) {
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'r-' || mod(g, ?) FROM generate_series(1, ?) g",
                resources,
                jobs);
    }

    @Test
    void liveReplicasShareTheShardsAndEachJobIsCompletedUnderItsShardsToken() {
        shards(4);
        Dispatcher a = fixture.start();
        Dispatcher b = fixture.start();
        await().atMost(Duration.ofSeconds(30)).untilAsserted(() -> {
            assertThat(holdings(List.of(a, b))).containsExactly(2, 2);
            assertThat(liveLeases()).isEqualTo(4);
        });

        insert(2000, 200);
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.pending() == 0);
        fixture.assertExactlyOnceWithOutbox(2000);
        assertThat(dsl.fetchSingle(
                                "SELECT count(*)::int FROM jobs j JOIN lease_takeover t"
                                        + " ON t.role = shard_role('scheduler', j.shard) AND t.fencing_token = j.completed_by_token")
                        .get(0, Integer.class))
                .as("jobs completed with a token of their own shard's lease")
                .isEqualTo(2000);
        assertThat(dsl.fetchSingle(
                                "SELECT count(DISTINCT t.holder_id)::int FROM jobs j JOIN lease_takeover t"
                                        + " ON t.role = shard_role('scheduler', j.shard) AND t.fencing_token = j.completed_by_token")
                        .get(0, Integer.class))
                .as("both replicas completed jobs")
                .isEqualTo(2);

        // A third joins: it gets its share by handoff, none holds two more than another.
        Dispatcher c = fixture.start();
        await().atMost(Duration.ofSeconds(30)).untilAsserted(() -> {
            List<Integer> h = holdings(List.of(a, b, c));
            assertThat(h.stream().mapToInt(Integer::intValue).sum()).isEqualTo(4);
            assertThat(h).allSatisfy(n -> assertThat(n).isBetween(1, 2));
        });

        // One stops: its shards go to the others at once (released, not waited out).
        a.close();
        await().atMost(Duration.ofSeconds(5)).untilAsserted(() -> {
            assertThat(holdings(List.of(b, c))).containsExactlyInAnyOrder(2, 2);
            assertThat(liveLeases()).isEqualTo(4);
        });
        insert(500, 50);
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.pending() == 0);
        fixture.assertExactlyOnceWithOutbox(2500);
    }

    @Test
    void theShardCountChangesWhileJobsFlowWithNothingLostAndEveryResourcesTokensGrowing() throws Exception {
        shards(4);
        SimpleMeterRegistry metersA = new SimpleMeterRegistry();
        SimpleMeterRegistry metersB = new SimpleMeterRegistry();
        Dispatcher a = fixture.start(metersA);
        Dispatcher b = fixture.start(metersB);
        AtomicBoolean flowing = new AtomicBoolean(true);
        AtomicInteger inserted = new AtomicInteger();
        // A producer, and a stand-in for the relays: every shard's position moves to the last row.
        // A producer on a connection of its own: a switch holds producers' inserts while it moves the pending jobs
        // (docs/shards.md), for less than the fixture's statement timeout (30 s).
        Thread producer = new Thread(() -> fixture.dsl().connection(c -> {
            DSLContext producing = org.jooq.impl.DSL.using(c, org.jooq.SQLDialect.POSTGRES);
            try {
                while (flowing.get()) {
                    insert(producing, 50, 40);
                    inserted.addAndGet(50);
                    sleep(10);
                }
            } finally {
                producing.execute("RESET statement_timeout");
            }
        }));
        Thread relays = new Thread(() -> {
            while (flowing.get() || fixture.pending() > 0) {
                dsl.execute("UPDATE outbox_position SET published_through = greatest(published_through,"
                        + " (SELECT coalesce(max(id), 0) FROM outbox))");
                sleep(20);
            }
        });
        producer.start();
        relays.start();
        try {
            await().atMost(Duration.ofSeconds(30)).until(() -> fixture.completed() > 500);
            for (int n : new int[] {8, 2, 4}) {
                dsl.execute("SELECT shards_set(?)", n);
                await().atMost(Duration.ofSeconds(30))
                        .alias("the holder of shard 0 puts " + n + " shards in force")
                        .until(() -> dsl.fetchSingle("SELECT shard_count FROM shard_map")
                                        .get(0, Integer.class)
                                == n);
                int before = fixture.completed();
                await().atMost(Duration.ofSeconds(30)).until(() -> fixture.completed() > before + 200);
            }
        } finally {
            flowing.set(false);
            producer.join();
        }
        await().atMost(Duration.ofSeconds(30)).until(() -> fixture.pending() == 0);
        relays.join();
        fixture.assertExactlyOnceWithOutbox(inserted.get());
        // The last switch ended every lease: the shares settle again, each keeper's turn a renewal apart.
        await().atMost(Duration.ofSeconds(10))
                .untilAsserted(() -> assertThat(holdings(List.of(a, b))).containsExactlyInAnyOrder(2, 2));
        // The leader gauges follow the shards that left the map (4 to 7) and came back (2, 3): one per shard of
        // the map in each replica, and one replica shows each shard held.
        await().atMost(Duration.ofSeconds(10)).untilAsserted(() -> {
            Map<String, Double> inA = leaderGauges(metersA);
            Map<String, Double> inB = leaderGauges(metersB);
            List<String> roles = List.of("scheduler", "scheduler/1", "scheduler/2", "scheduler/3");
            assertThat(inA).containsOnlyKeys(roles);
            assertThat(inB).containsOnlyKeys(roles);
            for (String role : roles) {
                assertThat(inA.get(role) + inB.get(role)).as(role).isEqualTo(1.0);
            }
        });
        // Per resource, in outbox order (each shard's publishing order), the tokens never go back; and
        // every job was completed with a token of its shard at the time.
        assertThat(dsl.fetchSingle("SELECT count(*)::int FROM (SELECT fencing_token < lag(fencing_token)"
                                + " OVER (PARTITION BY resource ORDER BY id) AS back FROM outbox) o WHERE back")
                        .get(0, Integer.class))
                .isZero();
        assertThat(dsl.fetchSingle("SELECT count(*)::int FROM outbox o JOIN lease_takeover t"
                                + " ON t.role = shard_role('scheduler', o.shard) AND t.fencing_token = o.fencing_token")
                        .get(0, Integer.class))
                .isEqualTo(inserted.get());
        assertThat(dsl.fetchSingle("SELECT generation FROM shard_map").get(0, Integer.class))
                .as("three switches after the first")
                .isEqualTo(5);
    }

    /** The replica's {@code fencedjobs_leader} gauges by role. */
    private static Map<String, Double> leaderGauges(MeterRegistry registry) {
        Map<String, Double> byRole = new TreeMap<>();
        for (Gauge g : registry.find("fencedjobs_leader").gauges()) {
            byRole.put(g.getId().getTag("role"), g.value());
        }
        return byRole;
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
