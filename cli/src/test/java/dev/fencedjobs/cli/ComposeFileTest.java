package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.consumer.ConsumerConfig;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.dispatcher.DispatcherConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.ServiceConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/**
 * Every variable docker-compose.yml sets for our services is one the service reads, and the
 * values pass the service's own validation. (CI also checks the file against the Compose schema.)
 */
class ComposeFileTest {

    private static final Set<String> EVERY_SERVICE = Set.of(
            DatabaseConfig.URL,
            DatabaseConfig.USER,
            DatabaseConfig.PASSWORD,
            DatabaseConfig.POOL_SIZE,
            DatabaseConfig.CONNECT_TIMEOUT,
            DatabaseConfig.STATEMENT_TIMEOUT,
            DatabaseConfig.LOCK_TIMEOUT,
            DatabaseConfig.IDLE_IN_TRANSACTION_TIMEOUT,
            ServiceConfig.HTTP_PORT,
            ServiceConfig.SHUTDOWN_TIMEOUT,
            ServiceConfig.MIGRATE,
            "LOG_LEVEL",
            "JAVA_TOOL_OPTIONS");
    private static final Set<String> LEASE = Set.of(LeaseConfig.DURATION, LeaseConfig.RENEW_INTERVAL);
    private static final Set<String> KAFKA =
            Set.of(KafkaSettings.BOOTSTRAP_SERVERS, KafkaSettings.TOPIC, RecordTrust.SIGNATURES);

    private static final Map<String, Set<String>> READS = Map.of(
            "dispatcher", union(EVERY_SERVICE, LEASE, Set.of(DispatcherConfig.BATCH_SIZE)),
            "relay",
                    union(
                            EVERY_SERVICE,
                            LEASE,
                            KAFKA,
                            Set.of(
                                    RelayConfig.PARTITIONS,
                                    RelayConfig.REPLICATION,
                                    RelayConfig.BATCH_SIZE,
                                    RelayConfig.POLL_INTERVAL,
                                    RelayConfig.MAX_RECORD_BYTES,
                                    RelayConfig.RETENTION,
                                    RecordTrust.SIGNING_KEY_FILE)),
            "consumer",
                    union(
                            EVERY_SERVICE,
                            KAFKA,
                            Set.of(
                                    ConsumerConfig.GROUP,
                                    ConsumerConfig.BATCH_SIZE,
                                    ConsumerConfig.EFFECT_MAX_ATTEMPTS,
                                    ConsumerConfig.EFFECT_RETRY_BACKOFF,
                                    ConsumerConfig.PROCESSED_RETENTION,
                                    RecordTrust.VERIFY_KEYS_FILE)),
            "migrate",
                    union(Set.of(
                            DatabaseConfig.URL,
                            DatabaseConfig.USER,
                            DatabaseConfig.PASSWORD,
                            DatabaseConfig.CONNECT_TIMEOUT,
                            "FJ_DISPATCHER_PASSWORD",
                            "FJ_RELAY_PASSWORD",
                            "FJ_CONSUMER_PASSWORD",
                            "FJ_PRODUCER_PASSWORD",
                            "LOG_LEVEL")));

    @SafeVarargs
    private static Set<String> union(Set<String>... sets) {
        Set<String> all = new TreeSet<>();
        for (Set<String> s : sets) {
            all.addAll(s);
        }
        return all;
    }

    /** service name -> its environment, from the compose file's "environment:" mappings. */
    static Map<String, Map<String, String>> environments(List<String> lines) {
        Map<String, Map<String, String>> result = new LinkedHashMap<>();
        boolean inServices = false;
        String service = null;
        boolean inEnvironment = false;
        for (String line : lines) {
            if (line.isBlank() || line.trim().startsWith("#")) {
                continue;
            }
            int indent = line.length() - line.stripLeading().length();
            String text = line.trim();
            if (indent == 0) {
                inServices = text.equals("services:");
                service = null;
                inEnvironment = false;
            } else if (inServices && indent == 2 && text.endsWith(":")) {
                service = text.substring(0, text.length() - 1);
                inEnvironment = false;
            } else if (service != null && indent == 4) {
                inEnvironment = text.equals("environment:");
            } else if (service != null && inEnvironment && indent == 6) {
                int colon = text.indexOf(':');
                String value = text.substring(colon + 1).trim().replaceAll("^\"|\"$", "");
                result.computeIfAbsent(service, s -> new LinkedHashMap<>())
                        .put(text.substring(0, colon).trim(), value);
            }
        }
        return result;
    }

    @Test
    void everyVariableTheComposeFileSetsIsOneTheServiceReadsAndItsValueIsValid() throws Exception {
        Map<String, Map<String, String>> env = environments(Files.readAllLines(Path.of("..", "docker-compose.yml")));
        assertThat(env).containsKeys("dispatcher", "relay", "consumer", "migrate", "postgres", "kafka");
        for (Map.Entry<String, Set<String>> service : READS.entrySet()) {
            assertThat(env.get(service.getKey()).keySet())
                    .as("variables of %s", service.getKey())
                    .isSubsetOf(service.getValue());
        }
        DispatcherConfig.from(Settings.of(env.get("dispatcher")));
        // The key files as the keygen service writes them, here instead of in the keys volume.
        Path keys = Files.createTempDirectory("fj-compose-keys");
        assertThat(new Cli(
                                Settings.of(Map.of()),
                                new java.io.PrintStream(new java.io.ByteArrayOutputStream()),
                                System.err)
                        .run(new String[] {"keygen", "--dir", keys.toString(), "--if-missing"}))
                .isZero();
        RecordTrust relayTrust = RelayConfig.from(Settings.of(inDirectory(env.get("relay"), keys)))
                .kafka()
                .trust();
        RecordTrust consumerTrust = ConsumerConfig.from(Settings.of(inDirectory(env.get("consumer"), keys)))
                .kafka()
                .trust();
        assertThat(consumerTrust.trusted())
                .containsOnlyKeys(relayTrust.signingKeyId().orElseThrow());
        assertThat(consumerTrust.signing())
                .as("the consumer is given no private key")
                .isNull();
        DatabaseConfig.from(Settings.of(env.get("migrate")));
        assertThat(env.get("dispatcher"))
                .containsEntry(DatabaseConfig.USER, "fj_dispatcher")
                .containsEntry(ServiceConfig.MIGRATE, "false");
        assertThat(env.get("relay")).containsEntry(DatabaseConfig.USER, "fj_relay");
        assertThat(env.get("consumer")).containsEntry(DatabaseConfig.USER, "fj_consumer");
    }

    /** The environment with the keys volume's paths (/keys/...) moved to {@code dir}. */
    private static Map<String, String> inDirectory(Map<String, String> env, Path dir) {
        Map<String, String> moved = new LinkedHashMap<>(env);
        moved.replaceAll((k, v) -> v.startsWith("/keys/")
                ? dir.resolve(v.substring("/keys/".length())).toString()
                : v);
        return moved;
    }

    @Test
    void theParserReadsNestedEnvironmentBlocks() {
        Map<String, Map<String, String>> env = environments(List.of(
                "services:",
                "  a:",
                "    image: x",
                "    environment:",
                "      ONE: \"1\"",
                "      TWO: two",
                "    depends_on:",
                "      b:",
                "  b:",
                "    environment:",
                "      THREE: 3",
                "volumes:",
                "  data:"));
        assertThat(env).isEqualTo(Map.of("a", Map.of("ONE", "1", "TWO", "two"), "b", Map.of("THREE", "3")));
    }
}
