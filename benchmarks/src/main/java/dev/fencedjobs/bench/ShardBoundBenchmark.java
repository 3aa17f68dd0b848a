package dev.fencedjobs.bench;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.testing.CompletedJobs;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * What splitting the dispatch stage into shards can give on this machine, before any service: PostgreSQL
 * alone completing a backlog of due jobs and writing their outbox rows, in the dispatcher's batches
 * and with its statement, from {@code k} connections at once, each on a shard of its own (a column
 * of the job, read through an index of its own) and each taking its own lease row's lock per batch,
 * as one lease per shard would. Beside each {@code k}: the rate against one connection's, the
 * machine's CPU per job, and how busy each connection was (the share of the wall time it spent in a
 * statement or a commit): with one connection busy throughout and the machine's cores not, a second
 * one can only help; with the cores full, it cannot.
 *
 * <p>Each count runs on a fresh database, with the backlog loaded, vacuumed, analysed and a
 * checkpoint taken first; the counts run in turn, reversed in every other round.
 */
final class ShardBoundBenchmark {

    private ShardBoundBenchmark() {}

    /** A job's shard here: its resource's hash, as a shard map would place it. */
    private static final String SHARD_OF = "mod(hashtext(%s) & 2147483647, %d)";

    static void run() throws Exception {
        int backlog = Integer.getInteger("backlog", 200_000);
        int rounds = Integer.getInteger("rounds", 2);
        List<Integer> counts = new ArrayList<>();
        for (String k : System.getProperty("shards", "1,2,4,8").split(",")) {
            counts.add(Integer.parseInt(k.trim()));
        }
        try (BenchPostgres pg = BenchPostgres.start(EndToEndBenchmark.SERVER_SETTINGS)) {
            System.out.printf(
                    Locale.ROOT,
                    "Shard bound, %s%nMachine: %d cores, Java %s, %s%n%n",
                    Instant.now(),
                    Runtime.getRuntime().availableProcessors(),
                    System.getProperty("java.version"),
                    pg.describe());
            System.out.printf(
                    Locale.ROOT,
                    "PostgreSQL alone completing %,d due jobs (batch %d) and writing their outbox rows from k connections, one shard each%n",
                    backlog,
                    PipelinedBound.DISPATCH_BATCH);
            System.out.printf(
                    Locale.ROOT,
                    "%-7s %-7s %12s %10s %16s %22s %8s%n",
                    "round",
                    "shards",
                    "jobs/s",
                    "seconds",
                    "CPU/job, us",
                    "connections busy, %",
                    "idle %");
            Map<Integer, List<Double>> rates = new LinkedHashMap<>();
            for (int round = 1; round <= rounds; round++) {
                for (int k : BenchSql.Rounds.inTurn(round, counts)) {
                    Result r = once(pg, k, backlog);
                    rates.computeIfAbsent(k, x -> new ArrayList<>()).add(r.rate());
                    System.out.printf(
                            Locale.ROOT,
                            "%-7d %-7d %,12.0f %10.2f %16.1f %22s %8.1f%n",
                            round,
                            k,
                            r.rate(),
                            r.seconds(),
                            r.cpuMicrosPerJob(),
                            r.busy(),
                            r.idlePercent());
                }
            }
            double one = rates.containsKey(1) ? BenchSql.median(rates.get(1)) : Double.NaN;
            System.out.printf(Locale.ROOT, "%nMedians of %d rounds:%n", rounds);
            rates.forEach((k, v) -> System.out.printf(
                    Locale.ROOT,
                    "  %d shard(s): %,.0f jobs/s, %.2f x one shard%n",
                    k,
                    BenchSql.median(v),
                    BenchSql.median(v) / one));
        }
    }

    record Result(double rate, double seconds, double cpuMicrosPerJob, String busy, double idlePercent) {}

    private static Result once(BenchPostgres pg, int shards, int backlog) throws Exception {
        String url = pg.freshDatabase("shards_" + shards);
        DatabaseConfig db = BenchSql.database(url, pg.user(), pg.password());
        BenchSql.migrate(db);
        try (Connection c = BenchSql.connect(db);
                Statement s = c.createStatement()) {
            s.execute("ALTER TABLE jobs ADD COLUMN shard int NOT NULL DEFAULT 0");
            s.execute("CREATE INDEX jobs_pending_shard_due ON jobs (shard, due_at, id) WHERE state = 'pending'");
            s.execute(CompletedJobs.LEASE);
            for (int i = 0; i < shards; i++) {
                s.execute("INSERT INTO leader_lease (role, holder_id, fencing_token, expires_at) VALUES ('bound-shard-"
                        + i + "', 'bench', 1, clock_timestamp() + interval '1 hour')");
            }
            for (int loaded = 0; loaded < backlog; loaded += 50_000) {
                s.executeUpdate(String.format(
                        Locale.ROOT,
                        "INSERT INTO jobs (resource, payload, due_at, shard) SELECT r, '{\"cents\": 100}', clock_timestamp(), "
                                + SHARD_OF
                                + " FROM (SELECT 'account-' || mod(g, 1000) AS r FROM generate_series(1, %d) g) x",
                        "r",
                        shards,
                        Math.min(50_000, backlog - loaded)));
            }
            s.execute("VACUUM ANALYZE jobs");
            s.execute("CHECKPOINT");
        }
        ExecutorService pool = Executors.newFixedThreadPool(shards);
        try {
            MachineCounters before = MachineCounters.read();
            long t0 = System.nanoTime();
            List<Future<long[]>> drains = new ArrayList<>();
            for (int i = 0; i < shards; i++) {
                int shard = i;
                drains.add(pool.submit(() -> drain(db, shard)));
            }
            long jobs = 0;
            List<String> busy = new ArrayList<>();
            List<long[]> results = new ArrayList<>();
            for (Future<long[]> f : drains) {
                results.add(f.get());
            }
            long t1 = System.nanoTime();
            MachineCounters after = MachineCounters.read();
            for (long[] r : results) {
                jobs += r[0];
                busy.add(String.format(Locale.ROOT, "%.0f", 100.0 * r[1] / (t1 - t0)));
            }
            if (jobs != backlog) {
                throw new IllegalStateException(jobs + " jobs completed of " + backlog);
            }
            double seconds = (t1 - t0) / 1e9;
            return new Result(
                    jobs / seconds,
                    seconds,
                    after.busyMicros(before) / jobs,
                    String.join(" ", busy),
                    after.idlePercent(before));
        } finally {
            pool.shutdownNow();
            pg.dropDatabase(url);
        }
    }

    /** Completes the shard's due jobs batch by batch until none is left; returns the jobs and the nanoseconds spent in the database. */
    private static long[] drain(DatabaseConfig db, int shard) throws SQLException {
        try (Connection c = BenchSql.connect(db);
                Statement s = c.createStatement();
                PreparedStatement guard = c.prepareStatement(
                        "SELECT fencing_token FROM leader_lease WHERE role = 'bound-shard-" + shard + "' FOR UPDATE");
                PreparedStatement complete = c.prepareStatement(PipelinedBound.completeDue("shard = " + shard))) {
            // The dispatcher's plan: the index read in order (FencedJobBatches.preferIndexOrder).
            s.execute("SET enable_sort = off");
            c.setAutoCommit(false);
            long jobs = 0;
            long busy = 0;
            while (true) {
                long t0 = System.nanoTime();
                try (ResultSet r = guard.executeQuery()) {
                    r.next();
                }
                int n = complete.executeUpdate();
                c.commit();
                busy += System.nanoTime() - t0;
                if (n == 0) {
                    return new long[] {jobs, busy};
                }
                jobs += n;
            }
        }
    }
}
