package dev.fencedjobs.relay;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.KafkaProcess;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.ProduceReorderingProxy;
import dev.fencedjobs.testing.TopicReader;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * KAFKA-15591, forced: a broker (before 4.5) holds no state for a fresh producer and accepts any
 * first sequence number, so when a fresh producer's first produce request is refused and its
 * second is appended, the first can never land before the second. On a new topic or a moved
 * leader that happens by timing; here a proxy makes the broker see the second request first,
 * every time. With five requests in flight this test failed (rows 1 and 2 arrived after 3 and 4);
 * the relay now never has a second request in flight.
 */
class RelayProduceOrderTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void aBrokerThatTakesAFreshProducersSecondRequestBeforeItsFirstCannotReorderAResource() throws Exception {
        try (ProduceReorderingProxy proxy = new ProduceReorderingProxy(300);
                KafkaProcess broker = new KafkaProcess(proxy.port())) {
            proxy.target(broker.port());
            try (RelayFixture fixture = new RelayFixture(postgres.database(), "localhost:" + proxy.port())) {
                // Rows of about 90 kB for one resource: two fit in a producer batch (256 kB), so one
                // relay batch takes a dozen produce requests to the same partition.
                fixture.insertLargeOutbox(24, "r-1", 90_000);
                // The relay creates the topic and writes it at once, with a fresh producer whose
                // first produce request the broker will see after the one behind it, if there is one.
                proxy.reorderNextProduce();
                Relay first = fixture.start();
                await().atMost(Duration.ofSeconds(60)).until(() -> fixture.unpublished() == 0);
                // A new leader (a new token, so a fresh producer) meets the same on a partition
                // that already holds records.
                first.close();
                proxy.reorderNextProduce();
                fixture.insertLargeOutbox(24, "r-1", 90_000);
                fixture.start();
                await().atMost(Duration.ofSeconds(60)).until(() -> fixture.unpublished() == 0);

                try (TopicReader reader = fixture.reader()) {
                    List<ConsumerRecord<String, byte[]>> records = reader.readAtLeast(48, Duration.ofSeconds(30));
                    records = reader.readFor(Duration.ofSeconds(1));
                    fixture.assertAllArrivedInCommitOrderPerResource(records);
                }
                assertThat(proxy.held()).as("produce requests the proxy held back").isGreaterThanOrEqualTo(2);
                assertThat(proxy.maxProducesInFlight()).as("produce requests ever in flight at once on a connection").isEqualTo(1);
            }
        }
    }
}
