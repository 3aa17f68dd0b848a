package dev.fencedjobs.bench;

import static dev.fencedjobs.bench.BenchSql.connect;
import static dev.fencedjobs.bench.BenchSql.execute;
import static dev.fencedjobs.bench.BenchSql.exists;
import static dev.fencedjobs.bench.BenchSql.migrate;
import static dev.fencedjobs.bench.BenchSql.queryDouble;
import static dev.fencedjobs.bench.BenchSql.waitFor;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.runtime.RunningService;
import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * What the dispatch policy (docs/dispatch.md) costs and buys, one dispatcher leader against a real
 * local PostgreSQL, each case beside the plain path (no priority, no key, no limit: the batch of
 * before the policy, unchanged) in the same run:
 *
 * <ol>
 *   <li>throughput draining a backlog: the plain path; the same jobs spread over 1,000 keys with
 *       no limit, then each with a limit it never reaches, then with limits that hold the whole to
 *       a rate below the plain path's; in rounds A B C D A B C D..., medians;
 *   <li>due-to-completed latency of a small tenant's jobs, offered at a steady rate while a large
 *       tenant's backlog of due jobs drains: without fairness (the plain path: due order) and
 *       with it (each tenant its own key).
 * </ol>
 *
 * <p>Run: {@code java -jar benchmarks/target/fenced-jobs-benchmarks.jar policy}. Options are
 * system properties: {@code -Dbacklog=200000 -Drounds=2 -DbigBacklog=1000000 -DsmallRate=20
 * -DsmallSeconds=20}.
 */
public final class PolicyBenchmark {

    static final int KEYS = 1000;
    static final int BATCH = 500;

    private final BenchPostgres pg;

    private PolicyBenchmark(BenchPostgres pg) {
        this.pg = pg;
    }

    public static void main(String[] args) throws Exception {
        int backlog = Integer.getInteger("backlog", 200_000);
        int rounds = Integer.getInteger("rounds", 2);
        int bigBacklog = Integer.getInteger("bigBacklog", 1_000_000);
        int smallRate = Integer.getInteger("smallRate", 20);
        int smallSeconds = Integer.getInteger("smallSeconds", 20);
        try (BenchPostgres pg = BenchPostgres.start()) {
            PolicyBenchmark bench = new PolicyBenchmark(pg);
            System.out.printf(
                    "Dispatch policy benchmark, %s%n",
                    OffsetDateTime.now(ZoneOffset.UTC).withNano(0));
            System.out.printf(
                    "Machine: %d cores, Java %s, %s%n%n",
                    Runtime.getRuntime().availableProcessors(), System.getProperty("java.version"), pg.describe());

            // Held to 10 a second per key: 10,000 a second in all, below what the plain path does here.
            int heldPerSecond = 10;
            System.out.printf(
                    "1. Throughput: one leader (batch %d) drains %,d due jobs, %d round(s), medians%n",
                    BATCH, backlog, rounds);
            System.out.printf("%-58s %12s %12s%n", "jobs", "seconds", "jobs/s");
            Map<String, List<Double>> rates = new TreeMap<>();
            String plain = "A  plain path: no key, no priority, no limit";
            String keys = "B  1,000 keys, no limit";
            String limited = "C  1,000 keys, each limited to 1,000,000/s (never reached)";
            String held =
                    "D  1,000 keys, each limited to " + heldPerSecond + "/s (" + heldPerSecond * KEYS + "/s in all)";
            for (int round = 1; round <= rounds; round++) {
                rates.computeIfAbsent(plain, k -> new ArrayList<>()).add(bench.throughput(plain, backlog, false, 0));
                rates.computeIfAbsent(keys, k -> new ArrayList<>()).add(bench.throughput(keys, backlog, true, 0));
                rates.computeIfAbsent(limited, k -> new ArrayList<>())
                        .add(bench.throughput(limited, backlog, true, 1_000_000));
                rates.computeIfAbsent(held, k -> new ArrayList<>())
                        .add(bench.throughput(held, backlog, true, heldPerSecond));
            }
            System.out.printf("%nMedians: ");
            double base = BenchSql.median(rates.get(plain));
            for (Map.Entry<String, List<Double>> e : rates.entrySet()) {
                System.out.printf(
                        "%s %,.0f jobs/s (%.2f of A, rounds %s); ",
                        e.getKey().substring(0, 1),
                        BenchSql.median(e.getValue()),
                        BenchSql.median(e.getValue()) / base,
                        rounds(e.getValue()));
            }
            System.out.println();

            System.out.printf(
                    "%n2. A small tenant's jobs, %d a second for %d s, due at insert, while a large tenant's %,d due jobs drain%n",
                    smallRate, smallSeconds, bigBacklog);
            System.out.printf(
                    "%-44s %8s %10s %10s %10s %14s%n",
                    "small tenant's jobs", "count", "p50 ms", "p99 ms", "max ms", "large: jobs/s");
            bench.smallBehindLarge(false, bigBacklog, smallRate, smallSeconds);
            bench.smallBehindLarge(true, bigBacklog, smallRate, smallSeconds);
        }
    }

    private DatabaseConfig fresh(String name) throws SQLException {
        DatabaseConfig db = DatabaseConfig.of(pg.freshDatabase(name), pg.user(), pg.password());
        migrate(db);
        return db;
    }

    /** Jobs a second from the first to the last completion. */
    private double throughput(String label, int backlog, boolean keyed, double perSecond) throws Exception {
        DatabaseConfig db = fresh("policy_throughput");
        execute(
                db,
                "INSERT INTO jobs (resource, dispatch_key, due_at, payload) SELECT 'r-' || (g % 100), "
                        + (keyed ? "'tenant-' || (g % " + KEYS + ")" : "NULL")
                        + ", clock_timestamp(), jsonb_build_object('n', g) "
                        + "FROM generate_series(1, " + backlog + ") g");
        if (perSecond > 0) {
            // Full buckets at the start: each key's burst is one batch's share, so the burst is over within the first
            // batches.
            execute(
                    db,
                    "INSERT INTO dispatch_limits (dispatch_key, per_second, burst) SELECT 'tenant-' || g, " + perSecond
                            + ", " + Math.max(1, Math.min(1_000_000, (int) perSecond)) + " FROM generate_series(0, "
                            + (KEYS - 1) + ") g");
        }
        execute(db, "VACUUM ANALYZE jobs");
        try (Dispatcher d = DispatcherBenchmark.dispatcher(db, BATCH)) {
            waitFor(() -> !exists(db, "SELECT 1 FROM jobs WHERE state = 'pending' LIMIT 1"), Duration.ofMinutes(30));
        }
        double seconds = queryDouble(db, "SELECT extract(epoch FROM max(completed_at) - min(completed_at)) FROM jobs");
        System.out.printf("%-58s %12.2f %,12.0f%n", label, seconds, backlog / seconds);
        return backlog / seconds;
    }

    /**
     * The large tenant's backlog is in place, due, before the dispatcher starts; the small
     * tenant's jobs are inserted at {@code rate} a second once it leads.
     */
    private void smallBehindLarge(boolean fair, int bigBacklog, int rate, int seconds) throws Exception {
        DatabaseConfig db = fresh("policy_small");
        String big = fair ? "'tenant-big'" : "NULL";
        String small = fair ? "'tenant-small'" : "NULL";
        try (Connection c = connect(db);
                Statement s = c.createStatement()) {
            s.execute("SET statement_timeout = 0");
            s.execute("INSERT INTO jobs (resource, dispatch_key, due_at, payload) SELECT 'big-' || (g % 100), " + big
                    + ", clock_timestamp(), '{}' FROM generate_series(1, " + bigBacklog + ") g");
            s.execute("VACUUM ANALYZE jobs");
        }
        try (Dispatcher d = DispatcherBenchmark.dispatcher(db, BATCH);
                Connection c = connect(db);
                Statement s = c.createStatement()) {
            waitFor(() -> d.state() == RunningService.State.LEADING, Duration.ofSeconds(60));
            BenchSql.offer(
                    s,
                    "INSERT INTO jobs (resource, dispatch_key, due_at, payload) VALUES ('small-' || floor(random() * 5)::int, "
                            + small + ", clock_timestamp(), '{}')",
                    rate,
                    1,
                    seconds);
            waitFor(() -> !exists(db, "SELECT 1 FROM jobs WHERE state = 'pending' LIMIT 1"), Duration.ofMinutes(30));
            double[] p = BenchSql.percentiles(
                    s, "extract(epoch FROM completed_at - due_at) * 1000", "FROM jobs WHERE resource LIKE 'small-%'");
            double bigRate = queryDouble(
                    db,
                    "SELECT count(*) / extract(epoch FROM max(completed_at) - min(completed_at)) FROM jobs "
                            + "WHERE resource LIKE 'big-%'");
            System.out.printf(
                    "%-44s %8d %10.1f %10.1f %10.1f %,14.0f%n",
                    fair ? "with fairness (a key per tenant)" : "without fairness (plain path: due order)",
                    (long) p[0],
                    p[1],
                    p[2],
                    p[3],
                    bigRate);
        }
    }

    static String rounds(List<Double> values) {
        return Arrays.toString(values.stream().mapToLong(Math::round).toArray());
    }
}
