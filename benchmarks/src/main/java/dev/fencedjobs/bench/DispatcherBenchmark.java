package dev.fencedjobs.bench;

import static dev.fencedjobs.bench.BenchSql.connect;
import static dev.fencedjobs.bench.BenchSql.execute;
import static dev.fencedjobs.bench.BenchSql.exists;
import static dev.fencedjobs.bench.BenchSql.migrate;
import static dev.fencedjobs.bench.BenchSql.queryDouble;
import static dev.fencedjobs.bench.BenchSql.waitFor;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.dispatcher.DispatcherConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.ServiceConfig;
import io.micrometer.core.instrument.MeterRegistry;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;

/**
 * Prints the dispatcher's figures against a real local PostgreSQL:
 *
 * <ol>
 *   <li>jobs completed per second by one leader from a backlog of due jobs, at batch sizes 100,
 *       500 and 1000;
 *   <li>due-to-completed latency at a steady offered load (jobs due at insert, and jobs due one
 *       second after insert);
 *   <li>statements per second issued by an idle leader and an idle follower.
 * </ol>
 *
 * <p>Run: {@code ./mvnw -q -pl benchmarks -am package -DskipTests && java -jar
 * benchmarks/target/fenced-jobs-benchmarks.jar dispatcher}. Options are system properties:
 * {@code -Dbacklog=200000 -Drate=500 -Dseconds=30 -DidleSeconds=60}.
 */
public final class DispatcherBenchmark {

    private final BenchPostgres pg;

    private DispatcherBenchmark(BenchPostgres pg) {
        this.pg = pg;
    }

    public static void main(String[] args) throws Exception {
        int backlog = Integer.getInteger("backlog", 200_000);
        int rate = Integer.getInteger("rate", 500);
        int seconds = Integer.getInteger("seconds", 30);
        int idleSeconds = Integer.getInteger("idleSeconds", 60);
        try (BenchPostgres pg = BenchPostgres.start()) {
            DispatcherBenchmark bench = new DispatcherBenchmark(pg);
            System.out.printf(
                    "Dispatcher benchmark, %s%n",
                    OffsetDateTime.now(ZoneOffset.UTC).withNano(0));
            System.out.printf(
                    "Machine: %d cores, Java %s, %s%n%n",
                    Runtime.getRuntime().availableProcessors(), System.getProperty("java.version"), pg.describe());

            System.out.printf("1. Throughput: one leader drains a backlog of %,d due jobs%n", backlog);
            System.out.printf("%-10s %12s %12s %14s%n", "batch", "jobs", "seconds", "jobs/s");
            for (int batch : new int[] {100, 500, 1000}) {
                double[] r = bench.throughput(batch, backlog);
                System.out.printf("%-10d %,12d %12.2f %,14.0f%n", batch, backlog, r[0], backlog / r[0]);
            }

            System.out.printf(
                    "%n2. Due-to-completed latency at %d jobs/s offered for %d s (batch 500)%n", rate, seconds);
            System.out.printf(
                    "%-28s %8s %8s %8s %8s %8s%n", "jobs", "count", "p50 ms", "p99 ms", "max ms", "offered/s");
            bench.latency(rate, seconds, 0);
            bench.latency(rate, seconds, 1000);

            System.out.printf("%n3. Idle cost over %d s (lease 10 s, renew every 3 s: the defaults)%n", idleSeconds);
            bench.idle(idleSeconds);
        }
    }

    private DatabaseConfig database(String url, String user, String password) {
        return DatabaseConfig.of(url, user, password);
    }

    static Dispatcher dispatcher(DatabaseConfig db, int batch) {
        return builder(db, batch).start();
    }

    /** As {@link #dispatcher(DatabaseConfig, int)}, its meters in {@code registry}. */
    static Dispatcher dispatcher(DatabaseConfig db, int batch, MeterRegistry registry) {
        return builder(db, batch).meterRegistry(registry).start();
    }

    private static Dispatcher.Builder builder(DatabaseConfig db, int batch) {
        return Dispatcher.builder(new DispatcherConfig(
                new ServiceConfig(db, 0, Duration.ofSeconds(10), true),
                new LeaseConfig(Duration.ofSeconds(10), Duration.ofSeconds(3)),
                batch));
    }

    /** Returns seconds from the first to the last completion. */
    private double[] throughput(int batch, int backlog) throws Exception {
        String url = pg.freshDatabase("throughput");
        DatabaseConfig db = database(url, pg.user(), pg.password());
        migrate(db);
        execute(
                db,
                "INSERT INTO jobs (resource, due_at, payload) SELECT 'r-' || (g % 100), clock_timestamp(), "
                        + "jsonb_build_object('n', g) FROM generate_series(1, " + backlog + ") g");
        execute(db, "VACUUM ANALYZE jobs");
        try (Dispatcher d = dispatcher(db, batch)) {
            waitFor(() -> !exists(db, "SELECT 1 FROM jobs WHERE state = 'pending' LIMIT 1"), Duration.ofMinutes(10));
        }
        double seconds = queryDouble(db, "SELECT extract(epoch FROM max(completed_at) - min(completed_at)) FROM jobs");
        return new double[] {seconds};
    }

    private void latency(int rate, int seconds, int dueAfterMillis) throws Exception {
        String url = pg.freshDatabase("latency");
        DatabaseConfig db = database(url, pg.user(), pg.password());
        migrate(db);
        int perTick = Math.max(1, rate / 100);
        long tickNanos = TimeUnit.SECONDS.toNanos(1) * perTick / rate;
        int inserted = 0;
        try (Dispatcher d = dispatcher(db, 500);
                Connection c = connect(db);
                Statement s = c.createStatement()) {
            waitFor(() -> d.state() == RunningService.State.LEADING, Duration.ofSeconds(30));
            String insert = "INSERT INTO jobs (due_at) SELECT clock_timestamp() + interval '" + dueAfterMillis
                    + " milliseconds' FROM generate_series(1, " + perTick + ")";
            long start = System.nanoTime();
            long end = start + TimeUnit.SECONDS.toNanos(seconds);
            long next = start;
            while (next < end) {
                long wait = next - System.nanoTime();
                if (wait > 0) {
                    TimeUnit.NANOSECONDS.sleep(wait);
                }
                inserted += s.executeUpdate(insert);
                next += tickNanos;
            }
            double offered = inserted / ((System.nanoTime() - start) / 1e9);
            waitFor(() -> !exists(db, "SELECT 1 FROM jobs WHERE state = 'pending' LIMIT 1"), Duration.ofMinutes(2));
            // The first two seconds warm the JIT and the connection pool; they are left out.
            try (ResultSet rs = s.executeQuery("SELECT count(*), "
                    + "percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms) "
                    + "FROM (SELECT extract(epoch FROM completed_at - due_at) * 1000 AS ms FROM jobs "
                    + "WHERE created_at > (SELECT min(created_at) FROM jobs) + interval '2 seconds') l")) {
                rs.next();
                System.out.printf(
                        "%-28s %8d %8.1f %8.1f %8.1f %8.0f%n",
                        dueAfterMillis == 0 ? "due at insert" : "due " + dueAfterMillis + " ms after insert",
                        rs.getLong(1),
                        rs.getDouble(2),
                        rs.getDouble(3),
                        rs.getDouble(4),
                        offered);
            }
        }
    }

    private void idle(int seconds) throws Exception {
        String url = pg.freshDatabase("idle");
        try (Connection c = DriverManager.getConnection(url, pg.user(), pg.password());
                Statement s = c.createStatement()) {
            s.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
            for (String role : List.of("bench_leader", "bench_follower")) {
                s.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + role + "') THEN "
                        + "CREATE ROLE " + role + " LOGIN SUPERUSER PASSWORD 'bench'; END IF; END $$");
            }
        }
        DatabaseConfig leaderDb = database(url, "bench_leader", "bench");
        DatabaseConfig followerDb = database(url, "bench_follower", "bench");
        migrate(leaderDb);
        List<Dispatcher> replicas = new ArrayList<>();
        try {
            replicas.add(dispatcher(leaderDb, 500));
            waitFor(() -> replicas.get(0).state() == RunningService.State.LEADING, Duration.ofSeconds(30));
            replicas.add(dispatcher(followerDb, 500));
            Thread.sleep(5_000);
            try (Connection c = DriverManager.getConnection(url, pg.user(), pg.password());
                    Statement s = c.createStatement()) {
                s.execute("SELECT pg_stat_statements_reset()");
                long start = System.nanoTime();
                Thread.sleep(TimeUnit.SECONDS.toMillis(seconds));
                double elapsed = (System.nanoTime() - start) / 1e9;
                System.out.printf("%-16s %12s %14s   %s%n", "replica", "statements", "statements/s", "what");
                for (String role : List.of("bench_leader", "bench_follower")) {
                    try (ResultSet rs = s.executeQuery(
                            "SELECT coalesce(sum(calls), 0), coalesce(string_agg(left(regexp_replace(query, '\\s+', ' ', 'g'), 60) "
                                    + "|| ' x' || calls, '; '), '') FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid "
                                    + "WHERE r.rolname = '" + role + "'")) {
                        rs.next();
                        long calls = rs.getLong(1);
                        System.out.printf(
                                "%-16s %12d %14.2f   %s%n",
                                role.replace("bench_", "idle "), calls, calls / elapsed, rs.getString(2));
                    }
                }
            }
        } finally {
            replicas.forEach(Dispatcher::close);
        }
    }

    static String format(double v) {
        return String.format(Locale.ROOT, "%.1f", v);
    }
}
