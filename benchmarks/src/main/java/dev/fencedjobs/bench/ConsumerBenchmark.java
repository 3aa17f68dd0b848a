package dev.fencedjobs.bench;

import dev.fencedjobs.consumer.ConsumerConfig;
import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.consumer.LedgerEffect;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.testing.TestKafka;
import java.sql.SQLException;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.test.KafkaClusterTestKit;

/**
 * Prints records applied per second by one consumer instance (ledger effect) from a pre-filled
 * topic, at two poll batch sizes. Kafka: {@code FJ_BENCH_KAFKA_BOOTSTRAP}, else a KRaft broker
 * inside this JVM.
 */
public final class ConsumerBenchmark {

    private ConsumerBenchmark() {}

    public static void main(String[] args) throws Exception {
        int records = Integer.getInteger("records", 200_000);
        String external = System.getenv("FJ_BENCH_KAFKA_BOOTSTRAP");
        KafkaClusterTestKit embedded = external == null || external.isBlank() ? TestKafka.startEmbedded() : null;
        String bootstrap = embedded != null ? embedded.bootstrapServers() : external;
        try (BenchPostgres pg = BenchPostgres.start()) {
            System.out.printf(
                    "Consumer benchmark, %s%n",
                    OffsetDateTime.now(ZoneOffset.UTC).withNano(0));
            System.out.printf(
                    "Machine: %d cores, Java %s, %s, Kafka %s%n%n",
                    Runtime.getRuntime().availableProcessors(),
                    System.getProperty("java.version"),
                    pg.describe(),
                    embedded != null ? "4.3 KRaft broker in this JVM" : bootstrap);
            // Two topics of the same records: unsigned (as before record signatures, uncompressed, read in
            // accept-unsigned mode), and as the relay sends them now: one signature for each partition's
            // share of 2,000 records, compressed.
            RecordTrust trust = RecordTrust.generate();
            String unsignedTopic = "bench-consumer-unsigned-" + System.currentTimeMillis();
            String signedTopic = "bench-consumer-signed-" + System.currentTimeMillis();
            fill(bootstrap, unsignedTopic, records, null);
            fill(bootstrap, signedTopic, records, trust);
            System.out.printf(
                    "Applied per second from a pre-filled topic of %,d records (3 partitions, 100 resources), one instance%n",
                    records);
            int rounds = Integer.getInteger("rounds", 3);
            BenchSql.Rounds table = new BenchSql.Rounds("records");
            int run = 0;
            for (int round = BenchSql.Rounds.firstRound(); round <= rounds; round++) {
                for (int batch : new int[] {500, 2000}) {
                    for (boolean signed : BenchSql.Rounds.inTurn(round, List.of(false, true))) {
                        DatabaseConfig db = BenchSql.database(pg.freshDatabase("consumer"), pg.user(), pg.password());
                        KafkaSettings kafka = signed
                                ? new KafkaSettings(bootstrap, signedTopic).withTrust(trust)
                                : new KafkaSettings(bootstrap, unsignedTopic)
                                        .withTrust(trust.withMode(RecordTrust.Mode.ACCEPT_UNSIGNED));
                        ConsumerConfig config = new ConsumerConfig(
                                new ServiceConfig(db, 0, Duration.ofSeconds(10), true),
                                kafka,
                                "bench-" + (++run),
                                batch,
                                3,
                                Duration.ofMillis(200),
                                Duration.ofDays(7));
                        // CPU a record (clock ticks are 10 ms), less moved by the machine's load than the rate.
                        Map<String, Long> cpu0 = BenchStack.cpuTicksByComponent();
                        try (FencedConsumer consumer = FencedConsumer.builder(config, new LedgerEffect())
                                .start()) {
                            BenchSql.waitFor(() -> count(db) >= records, Duration.ofMinutes(10));
                        }
                        Map<String, Long> perRecord = new TreeMap<>();
                        BenchStack.cpuMicrosecondsEach(cpu0, BenchStack.cpuTicksByComponent(), records)
                                .forEach((c, us) -> perRecord.put(
                                        c.equals("benchmark and loader") ? "consumer and broker" : c, us));
                        System.out.printf(
                                "   round %d, batch %d, %s: CPU per record, microseconds: %s%n",
                                round, batch, signed ? "signed" : "unsigned", perRecord);
                        double seconds = BenchSql.queryDouble(
                                db, "SELECT extract(epoch FROM max(applied_at) - min(applied_at)) FROM ledger");
                        table.add(round, batch, signed ? "signed" : "unsigned", records, seconds);
                    }
                }
            }
            table.printMedians(rounds);
        } finally {
            if (embedded != null) {
                embedded.close();
            }
        }
    }

    private static long count(DatabaseConfig db) {
        try {
            return (long) BenchSql.queryDouble(db, "SELECT count(*) FROM ledger");
        } catch (SQLException e) {
            return 0;
        }
    }

    /** The records, signed with {@code trust} in batches of 2,000 as the relay signs them (a tree a partition), or unsigned where it is null. */
    private static void fill(String bootstrap, String topic, int records, RecordTrust trust) throws Exception {
        TestKafka.createTopic(bootstrap, topic, 3);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("linger.ms", 10);
        p.put("batch.size", 256 * 1024);
        // Signed as the relay sends now (compressed), unsigned as it sent before signatures (not).
        p.put("compression.type", trust == null ? "none" : RelayConfig.DEFAULT_COMPRESSION);
        try (KafkaProducer<String, byte[]> producer =
                new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
            OffsetDateTime now = OffsetDateTime.now(ZoneOffset.UTC).withNano(0);
            OffsetDateTime acquired = now.minusMinutes(1);
            // As the relay writes them: with the job's creation time and the token's tenure (-Didentity=false:
            // without, as relays before migration V5 did).
            boolean identity = Boolean.parseBoolean(System.getProperty("identity", "true"));
            List<ProducerRecord<String, byte[]>> batch = new ArrayList<>();
            for (long job = 1; job <= records; job++) {
                String resource = "r-" + (job % 100);
                Envelope e = identity
                        ? new Envelope(
                                Envelope.VERSION,
                                job,
                                job,
                                resource,
                                FencingToken.of(1),
                                "{\"n\":" + job + "}",
                                now,
                                now,
                                now.minusNanos(job * 1000),
                                "bench-dispatcher",
                                acquired)
                        : new Envelope(
                                Envelope.VERSION,
                                job,
                                job,
                                resource,
                                FencingToken.of(1),
                                "{\"n\":" + job + "}",
                                now,
                                now);
                batch.add(new ProducerRecord<>(topic, resource, e.toJson()));
                if (batch.size() == 2000 || job == records) {
                    if (trust != null) {
                        RecordSignatures.sign(trust, System.currentTimeMillis(), batch, 3);
                    }
                    List<Future<RecordMetadata>> sent = new ArrayList<>(batch.size());
                    batch.forEach(r -> sent.add(producer.send(r)));
                    for (Future<RecordMetadata> f : sent) {
                        f.get(); // a record that could not be written fails the benchmark, not its figures
                    }
                    batch.clear();
                }
            }
        }
    }
}
