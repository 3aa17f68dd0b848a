package dev.fencedjobs.runtime;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class KafkaSettingsTest {

    @TempDir
    Path dir;

    @Test
    void securitySettingsComeFromAPropertiesFileAndEnvironmentVariablesOverrideIt() throws Exception {
        Path truststore = Files.writeString(dir.resolve("trust.p12"), "not read here");
        Path file = Files.writeString(dir.resolve("client.properties"), """
                security.protocol=SASL_PLAINTEXT
                sasl.mechanism=PLAIN
                request.timeout.ms=30000
                """);
        KafkaSettings k = KafkaSettings.from(Settings.of(Map.of(
                "KAFKA_CLIENT_PROPERTIES",
                file.toString(),
                "KAFKA_SECURITY_PROTOCOL",
                "SASL_SSL",
                "KAFKA_SASL_MECHANISM",
                "SCRAM-SHA-512",
                "KAFKA_SASL_USERNAME",
                "u",
                "KAFKA_SASL_PASSWORD",
                "p\"w",
                "KAFKA_SSL_TRUSTSTORE_LOCATION",
                truststore.toString())));
        assertThat(k.client())
                .containsEntry("security.protocol", "SASL_SSL")
                .containsEntry("sasl.mechanism", "SCRAM-SHA-512")
                .containsEntry("request.timeout.ms", "30000")
                .containsEntry(
                        "sasl.jaas.config",
                        "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                + "username=\"u\" password=\"p\\\"w\";");
        assertThat(k.clientProperties()).containsEntry("bootstrap.servers", "localhost:9092");
        assertThat(k.toString()).contains("sasl.jaas.config=[hidden]").doesNotContain("p\\\"w");
    }

    @Test
    void eachInvalidSettingGetsAnErrorThatNamesIt() throws Exception {
        assertError(
                Map.of("KAFKA_SECURITY_PROTOCOL", "TLS"),
                "KAFKA_SECURITY_PROTOCOL (or KAFKA_CLIENT_PROPERTIES): must be one of");
        assertError(
                Map.of("KAFKA_SASL_MECHANISM", "PLAIN"),
                "KAFKA_SASL_MECHANISM (or KAFKA_CLIENT_PROPERTIES): is set, but security.protocol is PLAINTEXT");
        assertError(
                Map.of("KAFKA_SECURITY_PROTOCOL", "SASL_SSL"),
                "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD: are required");
        assertError(
                Map.of("KAFKA_SASL_USERNAME", "u"), "KAFKA_SASL_PASSWORD: is required when KAFKA_SASL_USERNAME is set");
        assertError(
                Map.of(
                        "KAFKA_SECURITY_PROTOCOL",
                        "SASL_SSL",
                        "KAFKA_SASL_MECHANISM",
                        "OAUTHBEARER",
                        "KAFKA_SASL_USERNAME",
                        "u",
                        "KAFKA_SASL_PASSWORD",
                        "p"),
                "KAFKA_SASL_USERNAME: works with KAFKA_SASL_MECHANISM PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512");
        assertError(
                Map.of(
                        "KAFKA_SSL_TRUSTSTORE_LOCATION",
                        dir.resolve("missing.p12").toString()),
                "KAFKA_SSL_TRUSTSTORE_LOCATION (or KAFKA_CLIENT_PROPERTIES): cannot read");
        assertError(
                Map.of(
                        "KAFKA_CLIENT_PROPERTIES",
                        dir.resolve("missing.properties").toString()),
                "KAFKA_CLIENT_PROPERTIES: cannot read");
        for (String reserved : new String[] {
            "acks=1",
            "enable.idempotence=false",
            "max.in.flight.requests.per.connection=5",
            "isolation.level=read_uncommitted",
            "enable.auto.commit=true",
            "bootstrap.servers=elsewhere:9092"
        }) {
            Path file = Files.writeString(dir.resolve("c.properties"), reserved + "\n");
            assertError(
                    Map.of("KAFKA_CLIENT_PROPERTIES", file.toString()),
                    "KAFKA_CLIENT_PROPERTIES: sets " + reserved.substring(0, reserved.indexOf('='))
                            + ", which the services set themselves");
        }
    }

    private static void assertError(Map<String, String> env, String message) {
        assertThatThrownBy(() -> KafkaSettings.from(Settings.of(env)))
                .isInstanceOf(ConfigException.class)
                .hasMessageStartingWith(message);
    }
}
