package dev.fencedjobs.relay;

import dev.fencedjobs.runtime.internal.ReadCache;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;

/** The relay loop's meters (docs/operations.md lists them). */
final class RelayMeters {

    final Counter published;
    final Counter rejected;
    final Counter publishFailures;
    final Counter guardRejections;
    final Counter storeFailures;
    final Timer batchLatency;
    /**
     * The lag, read from the database at most once a second, and only when asked for. Held here: a
     * gauge keeps only a weak reference to what it reads.
     */
    final ReadCache<OutboxStore.Lag> lag;

    RelayMeters(MeterRegistry registry, ReadCache<OutboxStore.Lag> lag) {
        this(registry, lag, 0);
    }

    /** With {@code shard}'s gauges (tag {@code shard}); the counters are the replica's, over every shard it holds. */
    RelayMeters(MeterRegistry registry, ReadCache<OutboxStore.Lag> lag, int shard) {
        this.lag = lag;
        published = Counter.builder("fencedjobs_relay_published")
                .description("outbox rows acknowledged by the broker and marked")
                .register(registry);
        rejected = Counter.builder("fencedjobs_relay_rejected_rows")
                .description("outbox rows not sent (too large); marked with publish_error")
                .register(registry);
        publishFailures = Counter.builder("fencedjobs_relay_publish_failures")
                .description("Kafka calls that failed: a topic check, or a batch not fully acknowledged")
                .register(registry);
        guardRejections = Counter.builder("fencedjobs_guard_rejections")
                .description("marks whose lease guard failed: nothing marked, stepped down")
                .register(registry);
        storeFailures = Counter.builder("fencedjobs_relay_database_failures")
                .description("outbox reads or marks that failed")
                .register(registry);
        batchLatency = Timer.builder("fencedjobs_relay_batch")
                .description("read, publish and mark of one batch")
                .register(registry);
        Tags tags = Tags.of("shard", Integer.toString(shard));
        Gauge.builder("fencedjobs_outbox_unpublished", this.lag, c -> c.gauge(OutboxStore.Lag::rows))
                .description("outbox rows of the shard not yet published")
                .tags(tags)
                .register(registry);
        Gauge.builder(
                        "fencedjobs_outbox_oldest_unpublished_seconds",
                        this.lag,
                        c -> c.gauge(OutboxStore.Lag::oldestSeconds))
                .description("age of the shard's oldest unpublished outbox row")
                .tags(tags)
                .register(registry);
    }
}
