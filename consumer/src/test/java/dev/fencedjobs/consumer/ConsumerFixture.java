package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Queue;
import java.util.UUID;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.jooq.DSLContext;

/** Consumers over one test database and a fresh topic, and a producer to feed them records. */
final class ConsumerFixture implements AutoCloseable {

    final String topic = "consumer-test-" + UUID.randomUUID();
    final String group = "group-" + UUID.randomUUID();
    /** The relay's key as the fixture's records are signed with it, and the consumers trust it. */
    final RecordTrust trust = RecordTrust.generate();

    private final DatabaseConfig database;
    private final HikariDataSource pool;
    private final DSLContext dsl;
    private final String bootstrap;
    private final KafkaProducer<String, byte[]> producer;
    /** Sends not yet checked: {@link #flush()} fails on any that did not reach the broker. */
    private final Queue<Future<RecordMetadata>> sent = new ConcurrentLinkedQueue<>();

    private final List<FencedConsumer> consumers = new ArrayList<>();

    ConsumerFixture(TestDatabase db, String bootstrap, int partitions) throws Exception {
        this.database = DatabaseConfig.of(db.url(), db.user(), db.password());
        this.pool = Database.pool(database, "consumer-fixture");
        Database.migrate(pool, FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE, 0);
        this.dsl = Database.dsl(pool);
        this.bootstrap = bootstrap;
        TestKafka.createTopic(bootstrap, topic, partitions);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("linger.ms", 5);
        // As in the relay: with more than one request in flight, a fresh topic's first NOT_LEADER_OR_FOLLOWER
        // can leave the idempotent producer retrying OUT_OF_ORDER_SEQUENCE_NUMBER for good (seen here once).
        p.put("max.in.flight.requests.per.connection", 1);
        this.producer = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer());
    }

    ConsumerConfig config(int batchSize) {
        return new ConsumerConfig(
                new ServiceConfig(database, 0, Duration.ofSeconds(10), false),
                new KafkaSettings(bootstrap, topic).withTrust(trust),
                group,
                batchSize,
                3,
                Duration.ofMillis(10),
                Duration.ofDays(7));
    }

    /** Records of the topic the group has not committed past (TestKafka.groupLag). */
    long lag() {
        return TestKafka.groupLag(bootstrap, group, topic);
    }

    FencedConsumer start() {
        return start(config(500), new LedgerEffect(), FencedConsumer.COMMIT_SYNC);
    }

    FencedConsumer start(ConsumerConfig config, Effect effect, ConsumerLoop.OffsetCommitter committer) {
        FencedConsumer c = FencedConsumer.start(
                config,
                dev.fencedjobs.runtime.internal.Embedding.STANDALONE,
                effect,
                committer,
                dev.fencedjobs.db.internal.Ticker.system());
        consumers.add(c);
        return c;
    }

    DSLContext dsl() {
        return dsl;
    }

    static byte[] envelope(long jobId, String resource, long token) {
        return new Envelope(
                        Envelope.VERSION,
                        jobId,
                        jobId,
                        resource,
                        FencingToken.of(token),
                        "{\"job\":" + jobId + "}",
                        OffsetDateTime.now(ZoneOffset.UTC),
                        OffsetDateTime.now(ZoneOffset.UTC))
                .toJson();
    }

    void send(long jobId, String resource, long token) {
        sendRaw(resource, envelope(jobId, resource, token));
    }

    /** Signed, as the relay signs: a batch of one. */
    void sendRaw(String key, byte[] value) {
        ProducerRecord<String, byte[]> record = new ProducerRecord<>(topic, key, value);
        RecordSignatures.sign(trust, System.currentTimeMillis(), List.of(record));
        sent.add(producer.send(record));
    }

    /** Signed as one batch, as the relay signs its batches. */
    void sendBatch(List<ProducerRecord<String, byte[]>> records) {
        RecordSignatures.sign(trust, System.currentTimeMillis(), records);
        records.forEach(r -> sent.add(producer.send(r)));
    }

    /** As it is: unsigned, or signed by whoever made it. */
    void sendAsIs(ProducerRecord<String, byte[]> record) {
        sent.add(producer.send(record));
    }

    void sendRaw(String key, String value) {
        sendRaw(key, value.getBytes(StandardCharsets.UTF_8));
    }

    void flush() {
        producer.flush();
        for (Future<RecordMetadata> f; (f = sent.poll()) != null; ) {
            try {
                f.get();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while checking a send", e);
            } catch (ExecutionException e) {
                throw new IllegalStateException("a test record did not reach the broker", e.getCause());
            }
        }
    }

    int ledgerRows() {
        return dsl.fetchCount(LEDGER);
    }

    int distinctLedgerJobs() {
        return dsl.fetchCount(dsl.selectDistinct(LEDGER.JOB_ID).from(LEDGER));
    }

    @Override
    public void close() {
        consumers.forEach(FencedConsumer::close);
        producer.close();
        pool.close();
    }
}
