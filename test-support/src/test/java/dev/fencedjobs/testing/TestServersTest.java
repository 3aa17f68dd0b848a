package dev.fencedjobs.testing;

import static org.assertj.core.api.Assertions.assertThat;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

class TestServersTest {

    @RegisterExtension
    static final PostgresExtension postgres = new PostgresExtension();

    @Test
    void eachTestClassGetsItsOwnRealPostgresDatabase() throws Exception {
        try (Connection c = postgres.database().connect();
                Statement s = c.createStatement();
                ResultSet rs =
                        s.executeQuery("SELECT current_database(), current_setting('server_version_num')::int")) {
            assertThat(rs.next()).isTrue();
            assertThat(rs.getString(1)).isEqualTo(postgres.database().name());
            assertThat(rs.getInt(2)).isGreaterThanOrEqualTo(150000);
        }
    }

    @Test
    void theActivityAFailedTestPrintsNamesWhoBlocksWhom() throws Exception {
        try (Connection holder = postgres.database().connect();
                Connection waiter = postgres.database().connect()) {
            holder.createStatement().execute("CREATE TABLE held (v int); INSERT INTO held VALUES (1)");
            holder.setAutoCommit(false);
            holder.createStatement().execute("UPDATE held SET v = 2");
            int holderPid = pid(holder);
            Thread blocked = new Thread(() -> {
                try (Statement s = waiter.createStatement()) {
                    s.execute("UPDATE held SET v = 3");
                } catch (java.sql.SQLException e) {
                    // The holder's rollback lets it through; the connection's close ends it otherwise.
                }
            });
            blocked.start();
            int waiterPid = pid(waiter);
            String activity = "";
            for (int i = 0; i < 100 && !activity.contains("blocked by {" + holderPid + "}"); i++) {
                Thread.sleep(50);
                activity = TestPostgres.shared().describeActivity();
            }
            assertThat(activity)
                    .contains("pid " + holderPid + " db " + postgres.database().name())
                    .contains("idle in transaction")
                    .contains("pid " + waiterPid + " ")
                    .contains("waits Lock/transactionid, blocked by {" + holderPid + "}")
                    .contains("UPDATE held SET v = 3");
            holder.rollback();
            blocked.join();
        }
    }

    private static int pid(Connection c) throws java.sql.SQLException {
        return c.unwrap(org.postgresql.PGConnection.class).getBackendPID();
    }

    @Test
    void databaseUrlKeepsParametersWhenTheNameChanges() {
        assertThat(TestPostgres.withDatabase("jdbc:postgresql://h:5432/postgres?user=a&x=1", "t1"))
                .isEqualTo("jdbc:postgresql://h:5432/t1?user=a&x=1");
        assertThat(TestPostgres.withDatabase("jdbc:postgresql://h:5432/", "t1"))
                .isEqualTo("jdbc:postgresql://h:5432/t1");
        assertThat(TestPostgres.withDatabase("jdbc:postgresql://h:5432?ssl=true", "t1"))
                .isEqualTo("jdbc:postgresql://h:5432/t1?ssl=true");
    }

    @Test
    void restartablePostgresKeepsItsDataAcrossARestart() throws Exception {
        try (RestartablePostgres pg = new RestartablePostgres()) {
            try (Connection c = java.sql.DriverManager.getConnection(pg.url(), pg.user(), pg.password());
                    Statement s = c.createStatement()) {
                s.execute("CREATE TABLE kept (v int)");
                s.execute("INSERT INTO kept VALUES (42)");
            }
            pg.stop();
            pg.start();
            try (Connection c = java.sql.DriverManager.getConnection(pg.url(), pg.user(), pg.password());
                    Statement s = c.createStatement();
                    ResultSet rs = s.executeQuery("SELECT v FROM kept")) {
                assertThat(rs.next()).isTrue();
                assertThat(rs.getInt(1)).isEqualTo(42);
            }
        }
    }

    @Test
    void sharedKafkaBrokerRoundTripsARecord() throws Exception {
        String bootstrap = TestKafka.shared().bootstrapServers();
        String topic = "smoke-" + System.nanoTime();
        TestKafka.createTopic(bootstrap, topic, 1);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            producer.send(new ProducerRecord<>(topic, "k", "v")).get();
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", topic);
        c.put("auto.offset.reset", "earliest");
        try (KafkaConsumer<String, String> consumer =
                new KafkaConsumer<>(c, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            ConsumerRecord<String, String> received = null;
            long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (received == null && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    received = r;
                }
            }
            assertThat(received).isNotNull();
            assertThat(received.value()).isEqualTo("v");
        }
    }
}
