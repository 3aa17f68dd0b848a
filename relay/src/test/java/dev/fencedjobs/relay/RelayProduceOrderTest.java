package dev.fencedjobs.relay;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.KafkaProcess;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.ProduceRefusingProxy;
import dev.fencedjobs.testing.TopicReader;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * KAFKA-15591, forced: a broker (before 4.5) holds no state for a fresh producer and accepts any
 * first sequence number, so when a fresh producer's first produce request is refused
 * ({@code NOT_LEADER_OR_FOLLOWER}) and its second is appended, the first can never land before
 * the second. On a new topic or a moved leader that happens by timing; here a proxy refuses each
 * fresh producer's first request and lets the one behind it through, every time. With five
 * requests in flight this test failed (a resource's first rows arrived after later ones); the
 * relay now never has a second request in flight, so there is none to let through.
 */
class RelayProduceOrderTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void aBrokerThatRefusesAFreshProducersFirstRequestAndAppendsTheNextCannotReorderAResource() throws Exception {
        try (ProduceRefusingProxy proxy = new ProduceRefusingProxy(300);
                KafkaProcess broker = new KafkaProcess(proxy.port())) {
            proxy.target(broker.port());
            try (RelayFixture fixture = new RelayFixture(postgres.database(), "localhost:" + proxy.port())) {
                // Rows of about 90 kB for one resource: two fit in a producer batch (256 kB), so one
                // relay batch takes a dozen produce requests to the same partition.
                fixture.insertLargeOutbox(24, "r-1", 90_000);
                // The relay creates the topic and writes it at once, with a fresh producer whose
                // first produce request is refused; the one behind it, if any, is appended.
                proxy.refuseNextProduce();
                Relay first = fixture.start();
                await().atMost(Duration.ofSeconds(60)).until(() -> fixture.unpublished() == 0);
                // A new leader (a new token, so a fresh producer) meets the same on a partition
                // that already holds records.
                first.close();
                proxy.refuseNextProduce();
                fixture.insertLargeOutbox(24, "r-1", 90_000);
                fixture.start();
                await().atMost(Duration.ofSeconds(60)).until(() -> fixture.unpublished() == 0);

                try (TopicReader reader = fixture.reader()) {
                    reader.readAtLeast(48, Duration.ofSeconds(30));
                    List<ConsumerRecord<String, byte[]>> records = reader.readFor(Duration.ofSeconds(1));
                    fixture.assertAllArrivedInCommitOrderPerResource(records);
                }
                assertThat(proxy.refused())
                        .as("first produce requests refused with NOT_LEADER_OR_FOLLOWER")
                        .isEqualTo(2);
                assertThat(proxy.maxProducesInFlight())
                        .as("produce requests ever in flight at once on a connection")
                        .isEqualTo(1);
            }
        }
    }
}
