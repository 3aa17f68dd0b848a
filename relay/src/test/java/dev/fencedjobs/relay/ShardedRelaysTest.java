package dev.fencedjobs.relay;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestKafka;
import dev.fencedjobs.testing.TopicReader;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Relay replicas sharing the outbox's shards (docs/shards.md) on a real PostgreSQL and Kafka: each
 * live replica holds its share of the shards' relay leases, each shard's rows are published from
 * its own position, and every row arrives, signed, in commit order per resource; one replica that
 * stops leaves its shards to the other at once.
 */
class ShardedRelaysTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private RelayFixture fixture;

    @BeforeEach
    void setUp() {
        fixture = new RelayFixture(postgres.database(), TestKafka.shared().bootstrapServers());
        fixture.dsl().execute("SELECT shards_set(4)");
        fixture.dsl().execute("SELECT shards_switch()");
    }

    @AfterEach
    void tearDown() {
        fixture.close();
    }

    @SuppressWarnings("unchecked")
    private static int holding(Relay r) {
        return (Integer) ((Map<String, Object>) r.status().get("shards")).get("holding");
    }

    @Test
    void twoRelaysShareFourShardsAndEveryRowArrivesInCommitOrderPerResource() throws Exception {
        Relay a = fixture.start();
        Relay b = fixture.start();
        await().atMost(Duration.ofSeconds(30))
                .untilAsserted(() -> assertThat(List.of(holding(a), holding(b))).containsExactly(2, 2));
        for (int i = 0; i < 10; i++) {
            fixture.insertOutbox(500, 50);
            Thread.sleep(20);
        }
        assertThat(fixture.dsl()
                        .fetchSingle("SELECT count(DISTINCT shard)::int FROM outbox")
                        .get(0, Integer.class))
                .isEqualTo(4);
        await().atMost(Duration.ofSeconds(60)).until(() -> fixture.unpublished() == 0);

        // One stops: its shards go to the other, which publishes what comes after.
        a.close();
        await().atMost(Duration.ofSeconds(10))
                .untilAsserted(() -> assertThat(holding(b)).isEqualTo(4));
        fixture.insertOutbox(1000, 50);
        await().atMost(Duration.ofSeconds(60)).until(() -> fixture.unpublished() == 0);

        try (TopicReader reader = fixture.reader()) {
            List<ConsumerRecord<String, byte[]>> records = reader.readAtLeast(6000, Duration.ofSeconds(60));
            fixture.assertAllArrivedInCommitOrderPerResource(records);
            fixture.assertAllSignedByTheRelay(records);
            assertThat(RelayFixture.countsByOutboxId(records)).hasSize(6000);
        }
        assertThat(fixture.dsl()
                        .fetchSingle("SELECT count(*)::int FROM outbox_position p, unnest(shard_list()) s"
                                + " WHERE p.role = shard_role('relay', s)"
                                + " AND p.published_through >= (SELECT max(id) FROM outbox o WHERE o.shard = s)")
                        .get(0, Integer.class))
                .as("every shard's position at its last row")
                .isEqualTo(4);
    }
}
