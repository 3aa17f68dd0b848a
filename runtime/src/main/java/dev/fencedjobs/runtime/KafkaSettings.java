package dev.fencedjobs.runtime;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.io.IOException;
import java.io.Reader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Pattern;

/**
 * Where the relay publishes and the consumer reads, and how their Kafka clients connect.
 *
 * <p>Client settings follow the Kafka tools' convention: a client properties file
 * ({@code KAFKA_CLIENT_PROPERTIES}, what {@code kafka-console-producer --command-config} takes),
 * and the security settings also one by one as environment variables ({@code KAFKA_SECURITY_PROTOCOL},
 * {@code KAFKA_SASL_MECHANISM}, {@code KAFKA_SSL_TRUSTSTORE_LOCATION} …), which override the file.
 * {@code KAFKA_SASL_USERNAME} and {@code KAFKA_SASL_PASSWORD} build the JAAS line for PLAIN and
 * SCRAM. Settings the services' guarantees rest on (acks, idempotence, requests in flight,
 * isolation, offsets) cannot be set this way: start-up refuses them, naming the property.
 *
 * @param bootstrapServers {@code KAFKA_BOOTSTRAP_SERVERS}, comma-separated host:port
 * @param topic {@code KAFKA_TOPIC}
 * @param client further client properties (security, timeouts), applied to every Kafka client
 * @param trust the keys the relay signs records with and the consumer checks them with
 *     ({@code RECORD_SIGNATURES}, {@code RECORD_SIGNING_KEY}, {@code RECORD_VERIFY_KEYS}): the
 *     topic's other boundary, beside who may write to it
 */
public record KafkaSettings(String bootstrapServers, String topic, Map<String, String> client, RecordTrust trust) {

    public static final String BOOTSTRAP_SERVERS = "KAFKA_BOOTSTRAP_SERVERS";
    public static final String TOPIC = "KAFKA_TOPIC";
    public static final String CLIENT_PROPERTIES = "KAFKA_CLIENT_PROPERTIES";
    public static final String SASL_USERNAME = "KAFKA_SASL_USERNAME";
    public static final String SASL_PASSWORD = "KAFKA_SASL_PASSWORD";
    public static final String DEFAULT_BOOTSTRAP_SERVERS = "localhost:9092";
    public static final String DEFAULT_TOPIC = "fenced-jobs";

    /** Security settings as environment variables: the property name in capitals, dots as underscores, after {@code KAFKA_}. */
    public static final Set<String> SECURITY_PROPERTIES = Set.of(
            "security.protocol",
            "sasl.mechanism",
            "sasl.jaas.config",
            "sasl.login.callback.handler.class",
            "sasl.oauthbearer.token.endpoint.url",
            "ssl.truststore.location",
            "ssl.truststore.password",
            "ssl.truststore.type",
            "ssl.keystore.location",
            "ssl.keystore.password",
            "ssl.keystore.type",
            "ssl.key.password",
            "ssl.endpoint.identification.algorithm");

    /**
     * What the services set themselves because a guarantee rests on it, or because another setting
     * of ours says it ({@code BATCH_SIZE}, {@code CONSUMER_GROUP}).
     */
    public static final Set<String> RESERVED = Set.of(
            "bootstrap.servers",
            "acks",
            "enable.idempotence",
            "max.in.flight.requests.per.connection",
            "retries",
            "transactional.id",
            "partitioner.class",
            "key.serializer",
            "value.serializer",
            "key.deserializer",
            "value.deserializer",
            "group.id",
            "enable.auto.commit",
            "isolation.level",
            "auto.offset.reset",
            "max.poll.records");

    private static final Set<String> PROTOCOLS = Set.of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL");
    private static final Pattern SECRET = Pattern.compile("password|jaas|secret|ssl\\.keystore\\.key$|credentials");

    public KafkaSettings {
        if (bootstrapServers == null || !bootstrapServers.matches("[^,\\s]+:\\d+(,[^,\\s]+:\\d+)*")) {
            throw new ConfigException(
                    BOOTSTRAP_SERVERS, "must be host:port[,host:port...], got '" + bootstrapServers + "'");
        }
        if (topic == null || !topic.matches("[a-zA-Z0-9._-]{1,249}")) {
            throw new ConfigException(TOPIC, "must be 1 to 249 of [a-zA-Z0-9._-], got '" + topic + "'");
        }
        client = Map.copyOf(client);
        Objects.requireNonNull(trust, "trust");
        for (String key : client.keySet()) {
            if (RESERVED.contains(key)) {
                throw new ConfigException(
                        sourceOf(key),
                        "sets " + key + ", which the services set themselves"
                                + (key.equals("bootstrap.servers") ? " (use " + BOOTSTRAP_SERVERS + ")" : "")
                                + "; remove it");
            }
        }
        String protocol = client.getOrDefault("security.protocol", "PLAINTEXT").toUpperCase(Locale.ROOT);
        if (!PROTOCOLS.contains(protocol)) {
            throw new ConfigException(
                    sourceOf("security.protocol"),
                    "must be one of " + new TreeSet<>(PROTOCOLS) + ", got '" + client.get("security.protocol") + "'");
        }
        boolean sasl = protocol.startsWith("SASL_");
        if (!sasl && client.containsKey("sasl.mechanism")) {
            throw new ConfigException(
                    sourceOf("sasl.mechanism"),
                    "is set, but security.protocol is " + protocol + " (use SASL_SSL or SASL_PLAINTEXT)");
        }
        if (sasl
                && !client.containsKey("sasl.jaas.config")
                && System.getProperty("java.security.auth.login.config") == null) {
            throw new ConfigException(
                    SASL_USERNAME + " and " + SASL_PASSWORD,
                    "are required with security.protocol " + protocol + " (or KAFKA_SASL_JAAS_CONFIG)");
        }
        for (String store : new String[] {"ssl.truststore.location", "ssl.keystore.location"}) {
            String location = client.get(store);
            if (location != null && !Files.isReadable(Path.of(location))) {
                throw new ConfigException(sourceOf(store), "cannot read " + location);
            }
        }
    }

    /** No keys: give them with {@link #withTrust} before a relay or consumer uses these settings. */
    public KafkaSettings(String bootstrapServers, String topic) {
        this(bootstrapServers, topic, Map.of());
    }

    /** No keys: give them with {@link #withTrust} before a relay or consumer uses these settings. */
    public KafkaSettings(String bootstrapServers, String topic, Map<String, String> client) {
        this(bootstrapServers, topic, client, RecordTrust.NONE);
    }

    /** The same, with these signing and trusted keys. */
    public KafkaSettings withTrust(RecordTrust other) {
        return new KafkaSettings(bootstrapServers, topic, client, other);
    }

    public static KafkaSettings from(Settings settings) {
        Map<String, String> client = new LinkedHashMap<>();
        settings.get(CLIENT_PROPERTIES).ifPresent(file -> client.putAll(readPropertiesFile(file)));
        for (String property : SECURITY_PROPERTIES) {
            settings.get(environmentName(property)).ifPresent(v -> client.put(property, v));
        }
        Optional<String> user = settings.get(SASL_USERNAME);
        Optional<String> password = settings.get(SASL_PASSWORD);
        if (user.isPresent() != password.isPresent()) {
            throw new ConfigException(
                    user.isPresent() ? SASL_PASSWORD : SASL_USERNAME,
                    "is required when " + (user.isPresent() ? SASL_USERNAME : SASL_PASSWORD) + " is set");
        }
        if (user.isPresent()) {
            if (settings.get(environmentName("sasl.jaas.config")).isPresent()) {
                throw new ConfigException(SASL_USERNAME, "cannot be used with KAFKA_SASL_JAAS_CONFIG; set one of them");
            }
            client.put(
                    "sasl.jaas.config",
                    jaas(client.getOrDefault("sasl.mechanism", "GSSAPI"), user.get(), password.get()));
        }
        return new KafkaSettings(
                settings.string(BOOTSTRAP_SERVERS, DEFAULT_BOOTSTRAP_SERVERS),
                settings.string(TOPIC, DEFAULT_TOPIC),
                client,
                RecordTrust.from(settings));
    }

    /** {@code ssl.truststore.location} is {@code KAFKA_SSL_TRUSTSTORE_LOCATION}. */
    public static String environmentName(String property) {
        return "KAFKA_" + property.toUpperCase(Locale.ROOT).replace('.', '_');
    }

    /** The bootstrap servers and the client settings, for a producer, consumer or admin client to add its own to. */
    public Properties clientProperties() {
        Properties p = new Properties();
        p.putAll(client);
        p.put("bootstrap.servers", bootstrapServers);
        return p;
    }

    /** The client settings with every secret replaced, for logs and status. */
    public Map<String, String> redactedClient() {
        Map<String, String> shown = new TreeMap<>();
        client.forEach((k, v) -> shown.put(k, SECRET.matcher(k).find() ? "[hidden]" : v));
        return shown;
    }

    @Override
    public String toString() {
        return "KafkaSettings[bootstrapServers=" + bootstrapServers + ", topic=" + topic + ", client="
                + redactedClient() + ", trust=" + trust.describe() + "]";
    }

    private static String sourceOf(String property) {
        return SECURITY_PROPERTIES.contains(property)
                ? environmentName(property) + " (or " + CLIENT_PROPERTIES + ")"
                : CLIENT_PROPERTIES;
    }

    private static Map<String, String> readPropertiesFile(String file) {
        Properties p = new Properties();
        try (Reader r = Files.newBufferedReader(Path.of(file))) {
            p.load(r);
        } catch (IOException | RuntimeException e) {
            throw new ConfigException(CLIENT_PROPERTIES, "cannot read " + file + ": " + e.getMessage());
        }
        Map<String, String> values = new LinkedHashMap<>();
        p.stringPropertyNames()
                .forEach(k -> values.put(k.trim(), p.getProperty(k).trim()));
        return values;
    }

    /** The JAAS line for a username and password; only PLAIN and SCRAM take one. */
    private static String jaas(String mechanism, String user, String password) {
        String module = switch (mechanism.toUpperCase(Locale.ROOT)) {
            case "PLAIN" -> "org.apache.kafka.common.security.plain.PlainLoginModule";
            case "SCRAM-SHA-256", "SCRAM-SHA-512" -> "org.apache.kafka.common.security.scram.ScramLoginModule";
            default ->
                throw new ConfigException(
                        SASL_USERNAME,
                        "works with KAFKA_SASL_MECHANISM PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not '" + mechanism
                                + "'; for OAUTHBEARER or GSSAPI set KAFKA_SASL_JAAS_CONFIG");
        };
        return module + " required username=\"" + quote(user) + "\" password=\"" + quote(password) + "\";";
    }

    private static String quote(String s) {
        return s.replace("\\", "\\\\").replace("\"", "\\\"");
    }
}
