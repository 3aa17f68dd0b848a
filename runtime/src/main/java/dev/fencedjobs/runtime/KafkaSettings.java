package dev.fencedjobs.runtime;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;

/**
 * Where the relay publishes and the consumer reads.
 *
 * @param bootstrapServers {@code KAFKA_BOOTSTRAP_SERVERS}, comma-separated host:port
 * @param topic {@code KAFKA_TOPIC}
 */
public record KafkaSettings(String bootstrapServers, String topic) {

    public static final String BOOTSTRAP_SERVERS = "KAFKA_BOOTSTRAP_SERVERS";
    public static final String TOPIC = "KAFKA_TOPIC";
    public static final String DEFAULT_BOOTSTRAP_SERVERS = "localhost:9092";
    public static final String DEFAULT_TOPIC = "fenced-jobs";

    public KafkaSettings {
        if (bootstrapServers == null || !bootstrapServers.matches("[^,\\s]+:\\d+(,[^,\\s]+:\\d+)*")) {
            throw new ConfigException(BOOTSTRAP_SERVERS, "must be host:port[,host:port...], got '" + bootstrapServers + "'");
        }
        if (topic == null || !topic.matches("[a-zA-Z0-9._-]{1,249}")) {
            throw new ConfigException(TOPIC, "must be 1 to 249 of [a-zA-Z0-9._-], got '" + topic + "'");
        }
    }

    public static KafkaSettings from(Settings settings) {
        return new KafkaSettings(settings.string(BOOTSTRAP_SERVERS, DEFAULT_BOOTSTRAP_SERVERS), settings.string(TOPIC, DEFAULT_TOPIC));
    }
}
