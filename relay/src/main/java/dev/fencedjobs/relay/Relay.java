package dev.fencedjobs.relay;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.HolderId;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.lease.LeaseOps;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.ServiceBuilder;
import dev.fencedjobs.runtime.internal.Embedding;
import dev.fencedjobs.runtime.internal.KafkaHealth;
import dev.fencedjobs.runtime.internal.LeaderService;
import dev.fencedjobs.runtime.internal.LeasedService;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.function.UnaryOperator;

/**
 * One relay replica: leadership of the {@code relay} role and the {@link RelayLoop} that
 * publishes the outbox while this replica leads, woken by {@code outbox_inserted} notifications.
 */
public final class Relay extends LeasedService {

    static final String OUTBOX_INSERTED = "outbox_inserted";

    private Relay(LeaderService service) {
        super(service);
    }

    public static Builder builder(KafkaSettings kafka) {
        return new Builder(kafka);
    }

    /**
     * A relay with every setting of {@code config} ({@link RelayConfig#from} reads them from the
     * environment): its own pool, registry and ops endpoint, as {@code RelayMain} runs it.
     */
    public static Builder builder(RelayConfig config) {
        return Builder.of(config);
    }

    /** A replica whose lease operations, outbox store and publisher pass through the given decorators. */
    static Relay start(
            RelayConfig config,
            Embedding embedding,
            String holderId,
            Ticker ticker,
            UnaryOperator<LeaseOps> leaseOps,
            UnaryOperator<OutboxStore> store,
            UnaryOperator<Publisher> publisher) {
        LeaderService.Spec spec = new LeaderService.Spec(
                "relay",
                RelayConfig.ROLE,
                holderId,
                config.service(),
                embedding,
                config.lease(),
                config.service().database().statementTimeout(),
                List.of(OUTBOX_INSERTED),
                ticker,
                leaseOps,
                false);
        KafkaHealth kafka = RelayLoop.kafkaHealth();
        return new Relay(LeaderService.start(
                spec,
                parts -> new RelayLoop(
                        config,
                        parts.leadership(),
                        store.apply(new JooqOutboxStore(parts.dsl(), parts.lease(), parts.shard())),
                        publisher.apply(new KafkaPublisher(config, parts.tracing())),
                        parts.ticker(),
                        parts.registry(),
                        parts.tracing(),
                        parts.shard(),
                        kafka)));
    }

    /** Builds a {@link Relay}; each setting as its environment variable in docs/relay.md. */
    public static final class Builder extends ServiceBuilder<Builder> {

        private final KafkaSettings kafka;
        private LeaseConfig lease = new LeaseConfig(LeaseConfig.DEFAULT_DURATION, LeaseConfig.DEFAULT_RENEW_INTERVAL);
        private int partitions = RelayConfig.DEFAULT_PARTITIONS;
        private short replication = RelayConfig.DEFAULT_REPLICATION;
        private int batchSize = RelayConfig.DEFAULT_BATCH_SIZE;
        private Duration pollInterval = RelayConfig.DEFAULT_POLL_INTERVAL;
        private int maxRecordBytes = RelayConfig.DEFAULT_MAX_RECORD_BYTES;
        private Duration retention = RelayConfig.DEFAULT_RETENTION;

        private static Builder of(RelayConfig config) {
            Builder b = new Builder(config.kafka());
            b.service(config.service());
            b.lease = config.lease();
            b.partitions = config.partitions();
            b.replication = config.replication();
            b.batchSize = config.batchSize();
            b.pollInterval = config.pollInterval();
            b.maxRecordBytes = config.maxRecordBytes();
            b.retention = config.retention();
            return b;
        }

        private Builder(KafkaSettings kafka) {
            this.kafka = Objects.requireNonNull(kafka, "kafka");
        }

        /** {@code LEASE_DURATION} and {@code RENEW_INTERVAL}. */
        public Builder lease(LeaseConfig lease) {
            this.lease = lease;
            return this;
        }

        /** {@code KAFKA_TOPIC_PARTITIONS} and {@code KAFKA_TOPIC_REPLICATION}, when the relay creates the topic. */
        public Builder topicLayout(int partitions, short replication) {
            this.partitions = partitions;
            this.replication = replication;
            return this;
        }

        /** {@code BATCH_SIZE}. */
        public Builder batchSize(int batchSize) {
            this.batchSize = batchSize;
            return this;
        }

        /** {@code POLL_INTERVAL}. */
        public Builder pollInterval(Duration pollInterval) {
            this.pollInterval = pollInterval;
            return this;
        }

        /** {@code MAX_RECORD_BYTES}. */
        public Builder maxRecordBytes(int maxRecordBytes) {
            this.maxRecordBytes = maxRecordBytes;
            return this;
        }

        /** {@code OUTBOX_RETENTION}. */
        public Builder retention(Duration retention) {
            this.retention = retention;
            return this;
        }

        /** Validates (a {@link dev.fencedjobs.db.ConfigException} names the bad setting), migrates, and starts following. */
        public Relay start() {
            RelayConfig config = new RelayConfig(
                    serviceConfig(true),
                    lease,
                    kafka,
                    partitions,
                    replication,
                    batchSize,
                    pollInterval,
                    maxRecordBytes,
                    retention);
            return Relay.start(
                    config,
                    embedding(),
                    HolderId.generate(),
                    Ticker.system(),
                    UnaryOperator.identity(),
                    UnaryOperator.identity(),
                    UnaryOperator.identity());
        }
    }
}
