package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.classic.spi.ThrowableProxyUtil;
import ch.qos.logback.core.read.ListAppender;
import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.relay.Relay;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.SecureKafka;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.jooq.DSLContext;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.slf4j.LoggerFactory;

/**
 * The relay and the consumer against a broker that takes only SASL_SSL, configured the ways the
 * README gives: the relay by {@code KAFKA_*} variables (SCRAM-SHA-512), the consumer by a client
 * properties file (PLAIN). Wrong credentials give one clear error and a not-ready health check,
 * and no secret reaches a log line or {@code /status}.
 */
class SecuredKafkaTest {

    private static SecureKafka kafka;

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @BeforeAll
    static void startBroker() {
        kafka = new SecureKafka();
    }

    @AfterAll
    static void stopBroker() {
        kafka.close();
    }

    @Test
    void recordsFlowOverSaslSslWithScramForTheRelayAndPlainFromAPropertiesFileForTheConsumer() throws Exception {
        String topic = "secured-" + UUID.randomUUID();
        DatabaseConfig database = database();
        try (HikariDataSource pool = Database.pool(database, "secured-test");
                Relay relay = Relay.builder(relayConfig(database, relaySettings(SecureKafka.SCRAM_PASSWORD), topic))
                        .start();
                FencedConsumer consumer = FencedConsumer.builder(
                                consumerConfig(database, consumerSettings(SecureKafka.PLAIN_PASSWORD), topic),
                                new LedgerEffect())
                        .start()) {
            Database.migrate(pool);
            DSLContext dsl = Database.dsl(pool);
            dsl.connection(c -> dev.fencedjobs.testing.CompletedJobs.insert(
                    c, 300, "'r-' || (g % 7)", "jsonb_build_object('n', g)"));
            await().atMost(Duration.ofSeconds(60))
                    .until(() -> tableExists(dsl, "ledger") && dsl.fetchCount(LEDGER) == 300);
            assertThat(relay.status().get("kafka")).isEqualTo("ok");
            assertThat(consumer.status().get("kafka")).isEqualTo("ok");
            assertThat(relay.ready()).isTrue();
            assertThat(get(consumer.httpPort(), "/health/ready").statusCode()).isEqualTo(200);
        }
    }

    @Test
    void wrongCredentialsGiveOneClearErrorAndANotReadyHealthCheckAndNoSecretIsShown() throws Exception {
        String wrong = "not-the-" + UUID.randomUUID();
        String topic = "secured-" + UUID.randomUUID();
        DatabaseConfig database = database();
        ListAppender<ILoggingEvent> logs = new ListAppender<>();
        Logger root = (Logger) LoggerFactory.getLogger(org.slf4j.Logger.ROOT_LOGGER_NAME);
        logs.start();
        root.addAppender(logs);
        try (Relay relay = Relay.builder(relayConfig(database, relaySettings(wrong), topic))
                        .start();
                FencedConsumer consumer = FencedConsumer.builder(
                                consumerConfig(database, consumerSettings(wrong), topic), new LedgerEffect())
                        .start()) {
            await().atMost(Duration.ofSeconds(60))
                    .until(() -> metric(relay.httpPort(), "fencedjobs_relay_publish_failures_total") >= 3
                            && metric(consumer.httpPort(), "fencedjobs_consumer_batch_failures_total") >= 3);

            assertThat(relay.status().get("kafka").toString()).contains("SaslAuthenticationException");
            assertThat(consumer.status().get("kafka").toString()).contains("SaslAuthenticationException");
            assertThat(get(relay.httpPort(), "/health/ready").statusCode()).isEqualTo(503);
            assertThat(get(consumer.httpPort(), "/health/ready").statusCode()).isEqualTo(503);
            assertThat(get(relay.httpPort(), "/health/live").statusCode())
                    .as("the process keeps running")
                    .isEqualTo(200);
            // The Kafka client also logs each failed reconnection itself (NetworkClient, at ERROR).
            List<ILoggingEvent> errors = logs.list.stream()
                    .filter(e ->
                            e.getLevel() == Level.ERROR && e.getLoggerName().startsWith("dev.fencedjobs"))
                    .toList();
            assertThat(errors)
                    .extracting(ILoggingEvent::getLoggerName)
                    .as("one ERROR each, however often they retry")
                    .containsExactlyInAnyOrder(
                            "dev.fencedjobs.relay.RelayLoop", "dev.fencedjobs.consumer.ConsumerLoop");
            assertThat(errors)
                    .allSatisfy(e -> assertThat(e.getFormattedMessage())
                            .contains("Kafka refused")
                            .contains("KAFKA_SASL_"));

            List<String> shown = new java.util.ArrayList<>();
            logs.list.forEach(e -> {
                shown.add(e.getFormattedMessage());
                if (e.getThrowableProxy() != null) {
                    shown.add(ThrowableProxyUtil.asString(e.getThrowableProxy()));
                }
            });
            shown.add(get(relay.httpPort(), "/status").body());
            shown.add(get(consumer.httpPort(), "/status").body());
            shown.add(relay.status().toString());
            for (String secret : List.of(wrong, SecureKafka.TRUSTSTORE_PASSWORD)) {
                assertThat(shown).as("log lines and status").noneMatch(s -> s.contains(secret));
            }
        } finally {
            root.detachAppender(logs);
        }
    }

    private DatabaseConfig database() {
        var db = postgres.database();
        return DatabaseConfig.of(db.url(), db.user(), db.password());
    }

    /** The relay's Kafka settings as environment variables: SASL_SSL with SCRAM-SHA-512. */
    private static Map<String, String> relaySettings(String password) {
        Map<String, String> env = new HashMap<>();
        env.put("KAFKA_BOOTSTRAP_SERVERS", kafka.secureBootstrapServers());
        env.put("KAFKA_SECURITY_PROTOCOL", "SASL_SSL");
        env.put("KAFKA_SASL_MECHANISM", "SCRAM-SHA-512");
        env.put("KAFKA_SASL_USERNAME", SecureKafka.SCRAM_USER);
        env.put("KAFKA_SASL_PASSWORD", password);
        env.put("KAFKA_SSL_TRUSTSTORE_LOCATION", kafka.truststore().toString());
        env.put("KAFKA_SSL_TRUSTSTORE_PASSWORD", SecureKafka.TRUSTSTORE_PASSWORD);
        env.put("KAFKA_SSL_TRUSTSTORE_TYPE", "PKCS12");
        return env;
    }

    /** The consumer's: a client properties file with PLAIN, as the Kafka tools take it. */
    private static Map<String, String> consumerSettings(String password) throws Exception {
        Path file = Files.createTempFile(kafka.directory(), "client", ".properties");
        Files.writeString(
                file,
                String.join(
                        "\n",
                        "security.protocol=SASL_SSL",
                        "sasl.mechanism=PLAIN",
                        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username=\""
                                + SecureKafka.PLAIN_USER + "\" password=\"" + password + "\";",
                        "ssl.truststore.location=" + kafka.truststore(),
                        "ssl.truststore.password=" + SecureKafka.TRUSTSTORE_PASSWORD,
                        "ssl.truststore.type=PKCS12",
                        ""));
        return Map.of(
                "KAFKA_BOOTSTRAP_SERVERS", kafka.secureBootstrapServers(), "KAFKA_CLIENT_PROPERTIES", file.toString());
    }

    private static final dev.fencedjobs.runtime.RecordTrust TRUST = dev.fencedjobs.runtime.RecordTrust.generate();

    private static RelayConfig relayConfig(DatabaseConfig database, Map<String, String> env, String topic) {
        Map<String, String> withTopic = new HashMap<>(env);
        withTopic.put("KAFKA_TOPIC", topic);
        return new RelayConfig(
                new ServiceConfig(database, 0, Duration.ofSeconds(10), true),
                new LeaseConfig(Duration.ofSeconds(10), Duration.ofSeconds(3)),
                KafkaSettings.from(Settings.of(withTopic)).withTrust(TRUST),
                3,
                (short) 1,
                500,
                Duration.ofSeconds(1),
                100_000,
                Duration.ofHours(1));
    }

    private static ConsumerConfig consumerConfig(DatabaseConfig database, Map<String, String> env, String topic) {
        Map<String, String> withTopic = new HashMap<>(env);
        withTopic.put("KAFKA_TOPIC", topic);
        return new ConsumerConfig(
                new ServiceConfig(database, 0, Duration.ofSeconds(10), true),
                KafkaSettings.from(Settings.of(withTopic)).withTrust(TRUST),
                "secured-" + UUID.randomUUID(),
                500,
                3,
                Duration.ofMillis(10),
                Duration.ofDays(7));
    }

    private static boolean tableExists(DSLContext dsl, String table) {
        return dsl.fetchValue("SELECT to_regclass(?) IS NOT NULL", table).equals(true);
    }

    private static HttpResponse<String> get(int port, String path) throws Exception {
        return HttpClient.newHttpClient()
                .send(
                        HttpRequest.newBuilder(URI.create("http://localhost:" + port + path))
                                .build(),
                        HttpResponse.BodyHandlers.ofString());
    }

    private static double metric(int port, String name) throws Exception {
        return get(port, "/metrics")
                .body()
                .lines()
                .filter(l -> l.startsWith(name + "{") || l.startsWith(name + " "))
                .mapToDouble(l -> Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1)))
                .sum();
    }
}
