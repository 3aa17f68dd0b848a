package dev.fencedjobs.consumer.example;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TestKafka;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Runs the embedded-consumer example against a real PostgreSQL and Kafka, and checks the README shows its code. */
class ShippingServiceTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void theEmbeddedConsumerShipsEachOrderOnceOnTheApplicationsPoolAndRegistry() throws Exception {
        TestDatabase db = postgres.database();
        String topic = "shipping-" + UUID.randomUUID();
        String bootstrap = TestKafka.shared().bootstrapServers();
        TestKafka.createTopic(bootstrap, topic, 2);
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement()) {
            s.execute(
                    "CREATE TABLE shipments (order_id text NOT NULL, job_id bigint NOT NULL, fencing_token bigint NOT NULL)");
        }
        RecordTrust relayKeys = RecordTrust.generate();
        ShippingService service = new ShippingService(db.url(), db.user(), db.password(), bootstrap, topic, relayKeys);
        try {
            assertThat(service.consumer().httpPort())
                    .as("no ops endpoint unless asked")
                    .isEqualTo(-1);
            assertThat(service.consumer().state()).isEqualTo(RunningService.State.RUNNING);
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            try (KafkaProducer<String, byte[]> producer =
                    new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
                java.util.List<ProducerRecord<String, byte[]>> records = new java.util.ArrayList<>();
                for (long job : new long[] {1, 2, 2, 3}) { // job 2 delivered twice, as after a relay's retry
                    records.add(new ProducerRecord<>(topic, "orders", envelope(job, "A-" + job)));
                }
                RecordSignatures.sign(relayKeys, System.currentTimeMillis(), records);
                for (ProducerRecord<String, byte[]> r : records) {
                    producer.send(r).get();
                }
            }
            await().atMost(Duration.ofSeconds(60))
                    .until(() -> shipments(db).size() == 3
                            && service.registry()
                                            .find("fencedjobs_consumer_duplicates")
                                            .counter()
                                    != null
                            && service.registry()
                                            .find("fencedjobs_consumer_duplicates")
                                            .counter()
                                            .count()
                                    == 1);
            assertThat(shipments(db)).containsExactly("A-1/1", "A-2/2", "A-3/3");
            assertThat(service.registry()
                            .get("fencedjobs_consumer_applied")
                            .tag("service", "consumer")
                            .counter()
                            .count())
                    .isEqualTo(3);
        } finally {
            service.consumer().close();
        }
        assertThat(service.consumer().state()).isEqualTo(RunningService.State.STOPPED);
        assertThat(service.pool().isClosed())
                .as("the application's pool is the application's to close")
                .isFalse();
        assertThat(service.registry().find("fencedjobs_consumer_applied").meters())
                .as("a stopped consumer reports nothing")
                .isEmpty();
        service.close();
    }

    @Test
    void theReadmeShowsTheExamplesCode() throws Exception {
        List<String> region = new ArrayList<>();
        boolean in = false;
        for (String line :
                Files.readAllLines(Path.of("src/test/java/dev/fencedjobs/consumer/example/ShippingService.java"))) {
            if (line.contains("README:end")) {
                break;
            }
            if (in) {
                region.add(line);
            }
            in |= line.contains("README:begin");
        }
        int indent = region.stream()
                .filter(l -> !l.isBlank())
                .mapToInt(l -> l.length() - l.stripLeading().length())
                .min()
                .orElse(0);
        String code = String.join(
                "\n",
                region.stream().map(l -> l.isBlank() ? "" : l.substring(indent)).toList());
        assertThat(code).contains("FencedConsumer.builder(");
        assertThat(Files.readString(Path.of("..", "README.md")))
                .as("README's Embedding section, copied from ShippingService")
                .contains(code);
    }

    private static byte[] envelope(long jobId, String order) {
        return new Envelope(
                        Envelope.VERSION,
                        jobId,
                        jobId,
                        "orders",
                        FencingToken.of(1),
                        "{\"order\":\"" + order + "\"}",
                        OffsetDateTime.now(ZoneOffset.UTC),
                        OffsetDateTime.now(ZoneOffset.UTC))
                .toJson();
    }

    private static List<String> shipments(TestDatabase db) throws Exception {
        List<String> rows = new ArrayList<>();
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT order_id, job_id FROM shipments ORDER BY job_id")) {
            while (rs.next()) {
                rows.add(rs.getString(1) + "/" + rs.getLong(2));
            }
        }
        return rows;
    }
}
