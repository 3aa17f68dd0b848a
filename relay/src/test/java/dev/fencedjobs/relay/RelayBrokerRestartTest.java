package dev.fencedjobs.relay;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.KafkaProcess;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.ThreadDumps;
import dev.fencedjobs.testing.TopicReader;
import java.time.Duration;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The broker is a separate process that the test kills mid-stream and starts again. */
class RelayBrokerRestartTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void theBrokerStopsMidStreamAndComesBackAndEveryRowArrives() throws Exception {
        try (KafkaProcess broker = new KafkaProcess();
                RelayFixture fixture = new RelayFixture(postgres.database(), broker.bootstrapServers())) {
            Relay relay = fixture.start();
            for (int i = 0; i < 5; i++) {
                fixture.insertOutbox(400, 25);
                Thread.sleep(100);
            }
            await().atMost(Duration.ofSeconds(60)).until(() -> fixture.unpublished() == 0);

            broker.kill();
            for (int i = 0; i < 5; i++) {
                fixture.insertOutbox(400, 25);
                Thread.sleep(100);
            }
            ThreadDumps.onFailure(() -> await().atMost(Duration.ofSeconds(45))
                    .until(() -> !"ok".equals(relay.status().get("kafka"))));
            // One more failed attempt at the batch after the one that made Kafka "not ok": sent again,
            // not acknowledged, and nothing marked.
            double failures = RelayTest.metric(relay, "fencedjobs_relay_publish_failures_total");
            ThreadDumps.onFailure(() -> await().atMost(Duration.ofSeconds(60))
                    .until(() -> RelayTest.metric(relay, "fencedjobs_relay_publish_failures_total") >= failures + 1));
            assertThat(fixture.unpublished())
                    .as("nothing is marked while the broker is away")
                    .isEqualTo(2000);

            broker.start();
            ThreadDumps.onFailure(() -> await().atMost(Duration.ofSeconds(90)).until(() -> fixture.unpublished() == 0));
            try (TopicReader reader = fixture.reader()) {
                reader.readAtLeast(4000, Duration.ofSeconds(60));
                List<ConsumerRecord<String, byte[]>> records = reader.readFor(Duration.ofSeconds(1));
                fixture.assertAllArrivedInCommitOrderPerResource(records);
                assertThat(RelayFixture.countsByOutboxId(records)).hasSize(4000);
            }
            assertThat(RelayTest.metric(relay, "fencedjobs_relay_publish_failures_total"))
                    .isGreaterThanOrEqualTo(1);
        }
    }
}
