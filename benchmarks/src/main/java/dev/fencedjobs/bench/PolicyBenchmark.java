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
 *   <li>throughput draining a large backlog: the plain path, and the same jobs under one key;
 *   <li>what idle keys cost: the jobs of 10 keys, alone and beside 100,000 keys whose one job each
 *       is due tomorrow;
 *   <li>due-to-completed latency of a small tenant's jobs, offered at a steady rate while a large
 *       tenant's backlog of due jobs drains: without fairness (the plain path: due order) and
 *       with it (each tenant its own key).
 * </ol>
 *
 * <p>Run: {@code java -jar benchmarks/target/fenced-jobs-benchmarks.jar policy}. Options are
 * system properties: {@code -Dbacklog=200000 -Drounds=2 -DbigBacklog=1000000 -DidleKeys=100000
 * -DsmallRate=20 -DsmallSeconds=20}, and {@code -Dcases=keys,big,idle,small} to run only some of the
 * groups: the 1,000 keys (A to D), the large backlog (E, F), the idle keys (G, H), the small tenant.
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
        int idleKeys = Integer.getInteger("idleKeys", 100_000);
        List<String> cases =
                List.of(System.getProperty("cases", "keys,big,idle,small").split(","));
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
                    "1. Throughput: one leader (batch %d) drains the jobs, %d round(s), medians; each group of cases in turn%n",
                    BATCH, rounds);
            System.out.printf("%-66s %12s %12s%n", "jobs", "seconds", "jobs/s");
            String plain = "A  " + count(backlog) + " jobs, plain path: no key, no priority, no limit";
            String keys = "B  the same over 1,000 keys, no limit";
            String limited = "C  1,000 keys, each limited to 1,000,000/s (never reached)";
            String held = "D  1,000 keys, each limited to " + heldPerSecond + "/s (" + count(heldPerSecond * KEYS)
                    + "/s in all)";
            String bigPlain = "E  " + count(bigBacklog) + " jobs, plain path";
            String bigKey = "F  the same under one key";
            String few = "G  " + count(backlog) + " jobs over 10 keys";
            String fewIdle = "H  the same beside " + count(idleKeys) + " keys with a job due tomorrow";
            Map<String, List<Double>> rates = new TreeMap<>();
            for (int round = 1; cases.contains("keys") && round <= rounds; round++) {
                add(rates, plain, bench.throughput(plain, backlog, 0, 0, 0));
                add(rates, keys, bench.throughput(keys, backlog, KEYS, 0, 0));
                add(rates, limited, bench.throughput(limited, backlog, KEYS, 1_000_000, 0));
                add(rates, held, bench.throughput(held, backlog, KEYS, heldPerSecond, 0));
            }
            for (int round = 1; cases.contains("big") && round <= rounds; round++) {
                add(rates, bigPlain, bench.throughput(bigPlain, bigBacklog, 0, 0, 0));
                add(rates, bigKey, bench.throughput(bigKey, bigBacklog, 1, 0, 0));
            }
            for (int round = 1; cases.contains("idle") && round <= rounds; round++) {
                add(rates, few, bench.throughput(few, backlog, 10, 0, 0));
                add(rates, fewIdle, bench.throughput(fewIdle, backlog, 10, 0, idleKeys));
            }
            if (!rates.isEmpty()) {
                System.out.printf("%nMedians, each beside its group's first:%n");
            }
            if (cases.contains("keys")) {
                medians(rates, plain, List.of(plain, keys, limited, held));
                System.out.printf(
                        "   D's limits allow %,d jobs/s: D is %.2f of that%n",
                        heldPerSecond * KEYS, BenchSql.median(rates.get(held)) / (heldPerSecond * KEYS));
            }
            if (cases.contains("big")) {
                medians(rates, bigPlain, List.of(bigPlain, bigKey));
            }
            if (cases.contains("idle")) {
                medians(rates, few, List.of(few, fewIdle));
            }

            if (cases.contains("small")) {
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
    }

    /** A fresh database, migrated; {@link BenchPostgres#dropDatabase} drops it once measured. */
    private DatabaseConfig fresh(String name) throws SQLException {
        DatabaseConfig db = DatabaseConfig.of(pg.freshDatabase(name), pg.user(), pg.password());
        migrate(db);
        return db;
    }

    private static void add(Map<String, List<Double>> rates, String label, double rate) {
        rates.computeIfAbsent(label, k -> new ArrayList<>()).add(rate);
    }

    /** Each case's median and its ratio to {@code base}'s, in the order given. */
    private static void medians(Map<String, List<Double>> rates, String base, List<String> cases) {
        double of = BenchSql.median(rates.get(base));
        for (String label : cases) {
            double median = BenchSql.median(rates.get(label));
            System.out.printf(
                    "%s %,.0f jobs/s, %.2f of %s (rounds %s)%n",
                    label.substring(0, 1), median, median / of, base.substring(0, 1), rounds(rates.get(label)));
        }
    }

    private static String count(int n) {
        return String.format("%,d", n);
    }

    /**
     * Jobs a second from the first to the last completion of {@code backlog} due jobs over {@code
     * keys} dispatch keys (0: none, the plain path), each key limited to {@code perSecond} (0: no
     * limit), beside {@code idleKeys} keys that each have one job due tomorrow, which stay pending.
     */
    private double throughput(String label, int backlog, int keys, double perSecond, int idleKeys) throws Exception {
        DatabaseConfig db = fresh("policy_throughput");
        execute(
                db,
                "INSERT INTO jobs (resource, dispatch_key, due_at, payload) SELECT 'r-' || (g % 100), "
                        + (keys > 0 ? "'tenant-' || (g % " + keys + ")" : "NULL")
                        + ", clock_timestamp(), jsonb_build_object('n', g) "
                        + "FROM generate_series(1, " + backlog + ") g");
        if (idleKeys > 0) {
            execute(
                    db,
                    "INSERT INTO jobs (resource, dispatch_key, due_at, payload) SELECT 'idle-' || g, 'idle-' || g, "
                            + "clock_timestamp() + interval '1 day', '{}' FROM generate_series(1, " + idleKeys + ") g");
        }
        if (perSecond > 0) {
            // Full buckets at the start: each key's burst is one batch's share, so the burst is over within the first
            // batches.
            execute(
                    db,
                    "INSERT INTO dispatch_limits (dispatch_key, per_second, burst) SELECT 'tenant-' || g, " + perSecond
                            + ", " + Math.max(1, Math.min(1_000_000, (int) perSecond)) + " FROM generate_series(0, "
                            + (keys - 1) + ") g");
        }
        execute(db, "VACUUM ANALYZE jobs");
        // Every case starts from the same server: the setup's pages written out, and the case before
        // dropped (below), so no autovacuum of its database and no checkpoint of its writes runs in
        // this one's window.
        execute(db, "CHECKPOINT");
        String due = "SELECT 1 FROM jobs WHERE state = 'pending' AND due_at <= clock_timestamp() LIMIT 1";
        try (Dispatcher d = DispatcherBenchmark.dispatcher(db, BATCH)) {
            waitFor(() -> !exists(db, due), Duration.ofMinutes(30));
        }
        double seconds = queryDouble(
                db,
                "SELECT extract(epoch FROM max(completed_at) - min(completed_at)) FROM jobs WHERE state = 'completed'");
        System.out.printf("%-66s %12.2f %,12.0f%n", label, seconds, backlog / seconds);
        pg.dropDatabase(db.url());
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
        pg.dropDatabase(db.url());
    }

    static String rounds(List<Double> values) {
        return Arrays.toString(values.stream().mapToLong(Math::round).toArray());
    }
}
