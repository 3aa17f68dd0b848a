package dev.fencedjobs.relay;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.ServiceConfig;
import java.time.Duration;

/**
 * Everything the relay reads at start-up.
 *
 * @param service database, ops port, shutdown timeout, migration switch
 * @param lease lease timing of the {@code relay} role
 * @param kafka bootstrap servers and topic
 * @param partitions partitions of the topic when the relay creates it ({@code KAFKA_TOPIC_PARTITIONS})
 * @param replication replication factor when the relay creates it ({@code KAFKA_TOPIC_REPLICATION})
 * @param batchSize outbox rows per batch: one read, one flush, one mark ({@code BATCH_SIZE})
 * @param pollInterval fallback read when no notification came ({@code POLL_INTERVAL})
 * @param maxRecordBytes largest record sent; a larger row is marked with a publish error instead
 *     ({@code MAX_RECORD_BYTES})
 * @param retention published rows are purged once completed longer ago than this ({@code OUTBOX_RETENTION})
 */
public record RelayConfig(
        ServiceConfig service,
        LeaseConfig lease,
        KafkaSettings kafka,
        int partitions,
        short replication,
        int batchSize,
        Duration pollInterval,
        int maxRecordBytes,
        Duration retention) {

    public static final String ROLE = "relay";
    public static final String PARTITIONS = "KAFKA_TOPIC_PARTITIONS";
    public static final String REPLICATION = "KAFKA_TOPIC_REPLICATION";
    public static final String BATCH_SIZE = "BATCH_SIZE";
    public static final String POLL_INTERVAL = "POLL_INTERVAL";
    public static final String MAX_RECORD_BYTES = "MAX_RECORD_BYTES";
    public static final String RETENTION = "OUTBOX_RETENTION";

    /** Each batch costs a database read, a flush and a guarded mark whatever its size, so batches are large. */
    public static final int DEFAULT_BATCH_SIZE = 2000;
    /** Kafka's default limit on a produce request, less room for the batch framing. */
    public static final int DEFAULT_MAX_RECORD_BYTES = 1_000_000;

    static final int PRODUCER_MAX_REQUEST_BYTES = 1_048_576;
    public static final int DEFAULT_PARTITIONS = 6;
    public static final short DEFAULT_REPLICATION = 1;
    public static final Duration DEFAULT_POLL_INTERVAL = Duration.ofSeconds(10);
    public static final Duration DEFAULT_RETENTION = Duration.ofHours(1);
    /**
     * The producer's {@code compression.type} unless {@code KAFKA_CLIENT_PROPERTIES} sets another: a
     * signed record's header repeats across a batch (the signature, and the upper nodes of the proofs),
     * and compressed it costs the relay and the broker about half its bytes (docs/performance.md).
     */
    public static final String DEFAULT_COMPRESSION = "lz4";

    public RelayConfig {
        lease.requireTimeoutsWithin(service.database());
        lease.requireWorkBetweenRenewals(service.database());
        kafka.trust().requireSigningKey();
        Settings.requirePositive(PARTITIONS, partitions);
        if (replication < 1) {
            throw new ConfigException(REPLICATION, "must be at least 1, got " + replication);
        }
        ServiceConfig.requireBatchSize(BATCH_SIZE, batchSize);
        Settings.requirePositive(POLL_INTERVAL, pollInterval);
        if (maxRecordBytes < 1024 || maxRecordBytes > PRODUCER_MAX_REQUEST_BYTES - 1024) {
            throw new ConfigException(
                    MAX_RECORD_BYTES,
                    "must be between 1024 and " + (PRODUCER_MAX_REQUEST_BYTES - 1024)
                            + " (the producer's request limit less framing), got " + maxRecordBytes);
        }
        Settings.requirePositive(RETENTION, retention);
    }

    public static RelayConfig from(Settings settings) {
        int replication = settings.integer(REPLICATION, DEFAULT_REPLICATION);
        if (replication > Short.MAX_VALUE) {
            throw new ConfigException(REPLICATION, "is too large: " + replication);
        }
        return new RelayConfig(
                ServiceConfig.from(settings),
                LeaseConfig.from(settings),
                KafkaSettings.from(settings),
                settings.integer(PARTITIONS, DEFAULT_PARTITIONS),
                (short) replication,
                settings.integer(BATCH_SIZE, DEFAULT_BATCH_SIZE),
                settings.duration(POLL_INTERVAL, DEFAULT_POLL_INTERVAL),
                settings.integer(MAX_RECORD_BYTES, DEFAULT_MAX_RECORD_BYTES),
                settings.duration(RETENTION, DEFAULT_RETENTION));
    }
}
