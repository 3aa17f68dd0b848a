package dev.fencedjobs.relay;

import static dev.fencedjobs.db.jooq.Tables.OUTBOX;
import static dev.fencedjobs.db.jooq.Tables.OUTBOX_POSITION;
import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.lease.LeaseOps;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.runtime.internal.Embedding;
import dev.fencedjobs.testing.CompletedJobs;
import dev.fencedjobs.testing.Gate;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TopicReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.function.UnaryOperator;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jooq.DSLContext;

/** Relay replicas over one test database and one fresh topic, and what the tests check. */
final class RelayFixture implements AutoCloseable {

    private final DatabaseConfig database;
    private final HikariDataSource pool;
    private final DSLContext dsl;
    private final String bootstrap;
    final String topic = "relay-test-" + UUID.randomUUID();
    /** The relays sign with it; {@link #assertAllSignedByTheRelay} checks what they published against it. */
    final dev.fencedjobs.runtime.RecordTrust trust = dev.fencedjobs.runtime.RecordTrust.generate();

    private final List<Relay> relays = new ArrayList<>();
    private int started;

    RelayFixture(TestDatabase db, String bootstrap) {
        this.database = DatabaseConfig.of(db.url(), db.user(), db.password())
                .withConnectTimeout(Duration.ofSeconds(1))
                .withServerTimeouts(Duration.ofMillis(500), Duration.ofMillis(500), Duration.ofSeconds(1));
        // The fixture's own reads and writes with server timeouts of 30 s, as the db module's MigratedDatabase, not the
        // services' half second: those are what the relays under test fail fast with, and a test's insert of 2,000
        // outbox rows on a loaded machine is no fault of theirs. It takes 150 ms on an idle 2-core machine, 780 ms on
        // a cold server, and two failed in CI's Testcontainers step, which runs beside the published commands'
        // benchmarks, under the default 2 s (a count of what is left to publish failed under half a second before).
        this.pool = Database.pool(
                DatabaseConfig.of(db.url(), db.user(), db.password())
                        .withConnectTimeout(Duration.ofSeconds(1))
                        .withServerTimeouts(Duration.ofSeconds(30), Duration.ofSeconds(30), Duration.ofSeconds(30)),
                "relay-fixture");
        Database.migrate(pool);
        this.dsl = Database.dsl(pool);
        this.bootstrap = bootstrap;
    }

    RelayConfig config(int batchSize) {
        return new RelayConfig(
                new ServiceConfig(database, 0, Duration.ofSeconds(10), false),
                new LeaseConfig(Duration.ofSeconds(2), Duration.ofMillis(500)),
                new KafkaSettings(bootstrap, topic).withTrust(trust),
                3,
                (short) 1,
                batchSize,
                Duration.ofSeconds(1),
                100_000,
                Duration.ofHours(1));
    }

    Relay start() {
        return start(config(500), UnaryOperator.identity(), UnaryOperator.identity(), UnaryOperator.identity());
    }

    Relay start(
            RelayConfig config,
            UnaryOperator<LeaseOps> lease,
            UnaryOperator<OutboxStore> store,
            UnaryOperator<Publisher> publisher) {
        Relay relay = Relay.start(
                config, Embedding.STANDALONE, "relay-" + (++started), Ticker.system(), lease, store, publisher);
        relays.add(relay);
        return relay;
    }

    DSLContext dsl() {
        return dsl;
    }

    /** Completed jobs and their outbox rows as the dispatcher writes them, over {@code resources} resources. */
    void insertOutbox(int rows, int resources) {
        insertOutbox(rows, "'r-' || (g % " + resources + ")", "jsonb_build_object('n', g)");
    }

    /** Outbox rows of one resource whose payload is a string of {@code chars} characters. */
    void insertLargeOutbox(int rows, String resource, int chars) {
        insertOutbox(
                rows,
                "'" + resource.replace("'", "''") + "'",
                "jsonb_build_object('blob', repeat('x', " + chars + "))");
    }

    /** Outbox rows with a resource and a payload given as SQL expressions over the row number g. */
    void insertOutbox(int rows, String resource, String payload) {
        dsl.connection(c -> CompletedJobs.insert(c, rows, resource, payload));
    }

    int unpublished() {
        return dsl.fetchCount(dsl.selectFrom("outbox_unpublished"));
    }

    /** The relay's position row: how far it has published, and when it last moved. */
    org.jooq.Record position() {
        return dsl.select(OUTBOX_POSITION.PUBLISHED_THROUGH, OUTBOX_POSITION.UPDATED_AT)
                .from(OUTBOX_POSITION)
                .fetchSingle();
    }

    TopicReader reader() {
        return new TopicReader(bootstrap, topic);
    }

    /** Outbox ids received, with how often each came. */
    static Map<Long, Integer> countsByOutboxId(List<ConsumerRecord<String, byte[]>> records) {
        Map<Long, Integer> counts = new TreeMap<>();
        for (ConsumerRecord<String, byte[]> r : records) {
            counts.merge(
                    TopicReader.headerLong(r, dev.fencedjobs.runtime.internal.Envelope.OUTBOX_ID_HEADER),
                    1,
                    Integer::sum);
        }
        return counts;
    }

    /**
     * Every record carries a signature that the relays' public key verifies, and no other key does;
     * each signature covers records of one partition (a tree for each partition's share of a batch).
     */
    void assertAllSignedByTheRelay(List<ConsumerRecord<String, byte[]>> records) {
        var verifier = new dev.fencedjobs.runtime.internal.RecordVerifier(trust, Duration.ofDays(7));
        var stranger = new dev.fencedjobs.runtime.internal.RecordVerifier(
                dev.fencedjobs.runtime.RecordTrust.generate(), Duration.ofDays(7));
        long now = System.currentTimeMillis();
        Map<String, java.util.Set<Integer>> partitionsBySignature = new TreeMap<>();
        for (ConsumerRecord<String, byte[]> r : records) {
            assertThat(verifier.check(r, now))
                    .as("signature of %s-%d@%d", r.topic(), r.partition(), r.offset())
                    .isEmpty();
            assertThat(stranger.check(r, now)).as("checked with another key").isPresent();
            // The header: version, key id length, key id, signing time, then the 64-byte signature.
            byte[] h = r.headers()
                    .lastHeader(dev.fencedjobs.runtime.internal.RecordSignatures.HEADER)
                    .value();
            int at = 2 + (h[1] & 0xff) + 8;
            partitionsBySignature
                    .computeIfAbsent(java.util.HexFormat.of().formatHex(h, at, at + 64), k -> new java.util.TreeSet<>())
                    .add(r.partition());
        }
        assertThat(partitionsBySignature.values())
                .as("partitions of each signature's records")
                .allSatisfy(p -> assertThat(p).hasSize(1));
        assertThat(records.stream().map(ConsumerRecord::partition).distinct().count())
                .as("partitions the records span")
                .isGreaterThan(1);
    }

    /**
     * Every outbox row (but those set aside with a publish error) arrived, each resource kept one
     * partition, and each resource's rows first arrived in outbox-id order, which is commit order.
     * A redelivered row may come again later; its first arrival is what must be in order.
     */
    void assertAllArrivedInCommitOrderPerResource(List<ConsumerRecord<String, byte[]>> records) {
        List<Long> ids = dsl.select(OUTBOX.ID)
                .from(OUTBOX)
                .where(OUTBOX.PUBLISH_ERROR.isNull())
                .fetch(r -> r.value1());
        assertThat(countsByOutboxId(records).keySet())
                .as("outbox ids received")
                .containsExactlyInAnyOrderElementsOf(ids);
        Map<String, Long> lastByResource = new TreeMap<>();
        Map<String, Integer> partitionByResource = new TreeMap<>();
        java.util.Set<Long> seen = new java.util.HashSet<>();
        for (ConsumerRecord<String, byte[]> r : records) {
            long id = TopicReader.headerLong(r, dev.fencedjobs.runtime.internal.Envelope.OUTBOX_ID_HEADER);
            partitionByResource.putIfAbsent(r.key(), r.partition());
            assertThat(r.partition())
                    .as("partition of resource %s", r.key())
                    .isEqualTo(partitionByResource.get(r.key()));
            if (seen.add(id)) {
                Long last = lastByResource.put(r.key(), id);
                assertThat(last == null ? 0 : last)
                        .as("first arrivals of resource %s in commit order", r.key())
                        .isLessThan(id);
            }
        }
    }

    static LeaseOps pausing(Gate gate, LeaseOps delegate) {
        return dev.fencedjobs.lease.GatedLease.gated(gate, delegate);
    }

    @Override
    public void close() {
        relays.forEach(Relay::close);
        pool.close();
    }
}
