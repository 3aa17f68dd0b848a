package dev.fencedjobs.bench;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.relay.Relay;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.testing.CompletedJobs;
import dev.fencedjobs.testing.TestKafka;
import dev.fencedjobs.testing.TopicReader;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.test.KafkaClusterTestKit;

/**
 * Prints the relay's figures: outbox rows published per second (database to broker
 * acknowledgement and mark) at two batch sizes, and commit-to-publish latency at a steady load.
 * Kafka: {@code FJ_BENCH_KAFKA_BOOTSTRAP}, else a KRaft broker inside this JVM.
 */
public final class RelayBenchmark {

    private RelayBenchmark() {}

    public static void main(String[] args) throws Exception {
        int backlog = Integer.getInteger("backlog", 200_000);
        int rate = Integer.getInteger("rate", 500);
        int seconds = Integer.getInteger("seconds", 30);
        int rounds = Integer.getInteger("rounds", 3);
        String external = System.getenv("FJ_BENCH_KAFKA_BOOTSTRAP");
        KafkaClusterTestKit embedded = external == null || external.isBlank() ? TestKafka.startEmbedded() : null;
        String bootstrap = embedded != null ? embedded.bootstrapServers() : external;
        try (BenchPostgres pg = BenchPostgres.start()) {
            System.out.printf(
                    "Relay benchmark, %s%n", OffsetDateTime.now(ZoneOffset.UTC).withNano(0));
            System.out.printf(
                    "Machine: %d cores, Java %s, %s, Kafka %s%n%n",
                    Runtime.getRuntime().availableProcessors(),
                    System.getProperty("java.version"),
                    pg.describe(),
                    embedded != null ? "4.3 KRaft broker in this JVM" : bootstrap);
            System.out.printf(
                    "1. Throughput: one relay publishes a backlog of %,d outbox rows (3 partitions, idempotent producer, acks=all, one flush per batch)%n",
                    backlog);
            BenchSql.Rounds table = new BenchSql.Rounds("rows");
            int run = 0;
            // Each batch size on each side (unsigned as before record signatures, and the relay as it is
            // now), one after the other, in rounds after a warm-up: the machine's drift shows as spread
            // between rounds, not as a cost.
            List<Side> sides = Side.from(System.getProperty("sides", "unsigned,signed"));
            for (int round = BenchSql.Rounds.firstRound(); round <= rounds; round++) {
                for (int batch : new int[] {500, 2000}) {
                    for (Side side : BenchSql.Rounds.inTurn(round, sides)) {
                        DatabaseConfig db = BenchSql.database(pg.freshDatabase("relay"), pg.user(), pg.password());
                        BenchSql.migrate(db);
                        BenchSql.execute(db, CompletedJobs.LEASE);
                        BenchSql.execute(
                                db,
                                CompletedJobs.statement(backlog, "'r-' || (g % 100)", "jsonb_build_object('n', g)"));
                        BenchSql.execute(db, "VACUUM ANALYZE outbox");
                        // The backlog's WAL written out now, not by a checkpoint that lands in one side's run.
                        BenchSql.execute(db, "CHECKPOINT");
                        // CPU a row (clock ticks are 10 ms): this JVM is the relay and the broker; its JIT apart.
                        Map<String, Long> cpu0 = BenchStack.cpuTicksByComponent();
                        long jit0 = BenchStack.ownCompilerTicks();
                        try (Relay relay = Relay.builder(config(db, bootstrap, "bench-relay-" + (++run), batch, side))
                                .start()) {
                            BenchSql.waitFor(
                                    () -> !BenchSql.exists(db, "SELECT 1 FROM outbox_unpublished LIMIT 1"),
                                    Duration.ofMinutes(10));
                        }
                        long jit = BenchStack.ownCompilerTicks() - jit0;
                        Map<String, Long> cpu1 = BenchStack.cpuTicksByComponent();
                        cpu1.computeIfPresent("benchmark and loader", (c, ticks) -> ticks - jit);
                        Map<String, Long> perRow = new TreeMap<>();
                        BenchStack.cpuMicrosecondsEach(cpu0, cpu1, backlog)
                                .forEach((c, us) ->
                                        perRow.put(c.equals("benchmark and loader") ? "relay and broker" : c, us));
                        perRow.put("JIT compiler", Math.round(jit * 10_000.0 / backlog));
                        System.out.printf(
                                "   batch %d, %s: CPU per row, microseconds: %s%n", batch, side.label, perRow);
                        // From the relay's takeover to its last mark, which moved the position past the backlog.
                        double elapsed = BenchSql.queryDouble(
                                db,
                                "SELECT extract(epoch FROM p.updated_at - min(t.acquired_at)) "
                                        + "FROM outbox_position p, lease_takeover t WHERE t.role = 'relay' AND p.role = 'relay' GROUP BY p.updated_at");
                        table.add(round, batch, side.label, backlog, elapsed);
                    }
                }
            }
            table.printMedians(rounds);

            System.out.printf(
                    "%n2. Commit-to-publish latency at %d rows/s offered for %d s (batch 500)%n", rate, seconds);
            DatabaseConfig db = BenchSql.database(pg.freshDatabase("relaylatency"), pg.user(), pg.password());
            BenchSql.migrate(db);
            try (Relay relay = Relay.builder(config(db, bootstrap, "bench-relay-latency", 500, Side.SIGNED))
                            .start();
                    Connection c = BenchSql.connect(db);
                    Statement s = c.createStatement()) {
                BenchSql.waitFor(() -> relay.state() == RunningService.State.LEADING, Duration.ofSeconds(30));
                int perTick = Math.max(1, rate / 100);
                s.execute(CompletedJobs.LEASE);
                double offered = BenchSql.offer(
                        s,
                        CompletedJobs.statement(perTick, "'r-' || (g % 100)", "'{}'::jsonb"),
                        rate,
                        perTick,
                        seconds);
                BenchSql.waitFor(
                        () -> !BenchSql.exists(db, "SELECT 1 FROM outbox_unpublished LIMIT 1"), Duration.ofMinutes(2));
                double[] p = sendLatencies(
                        bootstrap, "bench-relay-latency", BenchSql.queryDouble(db, "SELECT count(*) FROM outbox"));
                System.out.printf("%8s %8s %8s %8s %10s%n", "rows", "p50 ms", "p99 ms", "max ms", "offered/s");
                System.out.printf("%8.0f %8.1f %8.1f %8.1f %10.0f%n", p[0], p[1], p[2], p[3], offered);
            }
        } finally {
            if (embedded != null) {
                embedded.close();
            }
        }
    }

    /**
     * Commit to publish per row: the record's timestamp (the producer's send, epoch ms) less the row's
     * completed_at (database time, same machine), leaving out the first 2 s. Returns count, p50, p99, max in ms.
     */
    private static double[] sendLatencies(String bootstrap, String topic, double rows) {
        List<Double> ms = new ArrayList<>();
        try (TopicReader reader = new TopicReader(bootstrap, topic)) {
            List<ConsumerRecord<String, byte[]>> records = reader.readAtLeast((int) rows, Duration.ofMinutes(2));
            long first = Long.MAX_VALUE;
            List<double[]> all = new ArrayList<>();
            for (ConsumerRecord<String, byte[]> r : records) {
                Envelope e = Envelope.parse(r.value());
                long completed = e.completedAt().toInstant().toEpochMilli() * 1000
                        + e.completedAt().getNano() / 1000 % 1000;
                first = Math.min(first, completed);
                all.add(new double[] {completed, r.timestamp() * 1000.0 - completed});
            }
            for (double[] a : all) {
                if (a[0] > first + 2_000_000) {
                    ms.add(a[1] / 1000.0);
                }
            }
        }
        Collections.sort(ms);
        return new double[] {
            ms.size(),
            ms.get(ms.size() / 2),
            ms.get((int) Math.min(ms.size() - 1, Math.ceil(ms.size() * 0.99) - 1)),
            ms.get(ms.size() - 1)
        };
    }

    /** What a relay of one side of the throughput runs publishes. */
    enum Side {
        /** As before record signatures: no key (a relay during a rollout), uncompressed. */
        UNSIGNED("unsigned", false, "none"),
        /** The relay as it is now: signed with a fresh key, its default compression. */
        SIGNED("signed", true, null),
        /** Signed, uncompressed: what signing costs without compression's help. */
        SIGNED_UNCOMPRESSED("signed, none", true, "none"),
        /** No key, the default compression: what compression alone gives. */
        UNSIGNED_COMPRESSED("unsigned, lz4", false, null);

        final String label;
        final boolean signed;
        final String compression;

        Side(String label, boolean signed, String compression) {
            this.label = label;
            this.signed = signed;
            this.compression = compression;
        }

        /** {@code -Dsides}: a comma-separated list of unsigned, signed, signed-uncompressed, unsigned-compressed. */
        static List<Side> from(String names) {
            List<Side> sides = new ArrayList<>();
            for (String name : names.split(",")) {
                sides.add(valueOf(name.trim().toUpperCase(Locale.ROOT).replace('-', '_')));
            }
            return sides;
        }
    }

    private static RelayConfig config(DatabaseConfig db, String bootstrap, String topic, int batch, Side side) {
        RecordTrust trust =
                side.signed ? RecordTrust.generate() : RecordTrust.NONE.withMode(RecordTrust.Mode.ACCEPT_UNSIGNED);
        Map<String, String> client = side.compression == null ? Map.of() : Map.of("compression.type", side.compression);
        return new RelayConfig(
                new ServiceConfig(db, 0, Duration.ofSeconds(10), false),
                new LeaseConfig(Duration.ofSeconds(10), Duration.ofSeconds(3)),
                new KafkaSettings(bootstrap, topic, client).withTrust(trust),
                3,
                (short) 1,
                batch,
                Duration.ofSeconds(10),
                RelayConfig.DEFAULT_MAX_RECORD_BYTES,
                Duration.ofHours(1));
    }
}
