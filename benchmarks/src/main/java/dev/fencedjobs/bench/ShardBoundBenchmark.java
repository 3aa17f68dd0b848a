package dev.fencedjobs.bench;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.dispatcher.Dispatcher;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
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
import java.util.concurrent.TimeUnit;

/**
 * What splitting the dispatch stage into shards can give on this machine, before any service: PostgreSQL
 * alone completing a backlog of due jobs and writing their outbox rows, in the dispatcher's batches
 * and with its statement, from {@code k} connections at once, each on a shard of its own (the
 * schema's shard map set to {@code k}, V13: each job's shard assigned from its resource, read through
 * {@code jobs_pending_due (shard, due_at, id)}) and each taking its own shard's lease row lock per
 * batch, as the dispatcher of that shard does; then two dispatcher replicas sharing the {@code k} shards on the
 * same backlog. Beside each: the rate against one connection's, the machine's CPU per job and how it splits
 * between PostgreSQL and this JVM (the drains' client, or the dispatchers), and how busy the connections that
 * ran the batches were (the share of the wall time spent in a batch's statements and commit; a dispatcher
 * replica's over every shard it holds, from its batch timer): with one connection busy throughout and the
 * machine's cores not, a second one can only help; with the cores full, it cannot.
 *
 * <p>Each count runs on a fresh database, with the backlog loaded, vacuumed, analysed and a
 * checkpoint taken first; the counts run in turn, reversed in every other round.
 */
final class ShardBoundBenchmark {

    private ShardBoundBenchmark() {}

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
                    "%-7s %-7s %-17s %12s %10s %28s %8s %s%n",
                    "round",
                    "shards",
                    "who",
                    "jobs/s",
                    "seconds",
                    "CPU/job, us: all (PG, JVM)",
                    "idle %",
                    "batch connections busy, %");
            Map<Integer, List<Double>> rates = new LinkedHashMap<>();
            Map<Integer, List<Double>> served = new LinkedHashMap<>();
            for (int round = 1; round <= rounds; round++) {
                for (int k : BenchSql.Rounds.inTurn(round, counts)) {
                    Result r = once(pg, k, backlog);
                    rates.computeIfAbsent(k, x -> new ArrayList<>()).add(r.rate());
                    print(round, k, "PostgreSQL alone", r);
                    Result d = dispatchers(pg, k, backlog);
                    served.computeIfAbsent(k, x -> new ArrayList<>()).add(d.rate());
                    print(round, k, REPLICAS + " dispatchers", d);
                }
            }
            double one = rates.containsKey(1) ? BenchSql.median(rates.get(1)) : Double.NaN;
            double oneServed = served.containsKey(1) ? BenchSql.median(served.get(1)) : Double.NaN;
            System.out.printf(Locale.ROOT, "%nMedians of %d rounds:%n", rounds);
            rates.forEach((k, v) -> System.out.printf(
                    Locale.ROOT,
                    "  %d shard(s): PostgreSQL alone %,.0f jobs/s (%.2f x one shard); %d dispatchers %,.0f jobs/s"
                            + " (%.2f x one shard, %.2f of PostgreSQL alone)%n",
                    k,
                    BenchSql.median(v),
                    BenchSql.median(v) / one,
                    REPLICAS,
                    BenchSql.median(served.get(k)),
                    BenchSql.median(served.get(k)) / oneServed,
                    BenchSql.median(served.get(k)) / BenchSql.median(v)));
        }
    }

    /**
     * {@code cpu}: the machine's CPU per job in microseconds, and of it this run's PostgreSQL processes' and this JVM's
     * (the dispatchers' or the drains'); {@code busy}: how busy the connections that ran the batches were.
     */
    record Result(double rate, double seconds, Cpu cpu, String busy, double idlePercent, List<String> statements) {

        Result(double rate, double seconds, Cpu cpu, String busy, double idlePercent) {
            this(rate, seconds, cpu, busy, idlePercent, List.of());
        }
    }

    /** CPU per job, microseconds: the machine's, this run's PostgreSQL's, this JVM's. */
    record Cpu(double all, double postgres, double jvm) {

        static Cpu between(
                MachineCounters before,
                Map<String, Long> componentsBefore,
                MachineCounters after,
                Map<String, Long> componentsAfter,
                long jobs) {
            Map<String, Long> each = BenchStack.cpuMicrosecondsEach(componentsBefore, componentsAfter, jobs);
            return new Cpu(
                    after.busyMicros(before) / jobs,
                    each.getOrDefault("postgresql", 0L),
                    each.getOrDefault("benchmark and loader", 0L));
        }

        static final Cpu UNKNOWN = new Cpu(Double.NaN, Double.NaN, Double.NaN);

        @Override
        public String toString() {
            return String.format(Locale.ROOT, "%.1f (%.0f, %.0f)", all, postgres, jvm);
        }
    }

    /** Dispatcher replicas sharing the shards in the dispatchers' run. */
    static final int REPLICAS = 2;

    private static void print(int round, int k, String who, Result r) {
        System.out.printf(
                Locale.ROOT,
                "%-7d %-7d %-17s %,12.0f %10.2f %28s %8.1f %s%n",
                round,
                k,
                who,
                r.rate(),
                r.seconds(),
                r.cpu(),
                r.idlePercent(),
                r.busy());
        r.statements().forEach(line -> System.out.println("          " + line));
    }

    /**
     * The same backlog drained by {@link #REPLICAS} dispatcher replicas (in this JVM, each with its
     * own pool, lease sessions and threads, as the service runs them) sharing {@code shards}
     * shards: the jobs are loaded due a few seconds ahead, the replicas started and left to share
     * the shards out, and the rate is the backlog over the time from its due time to the last
     * completion ({@code completed_at}, database time).
     */
    private static Result dispatchers(BenchPostgres pg, int shards, int backlog) throws Exception {
        String url = pg.freshDatabase("dispatchers_" + shards);
        DatabaseConfig db = BenchSql.database(url, pg.user(), pg.password());
        BenchSql.migrate(db);
        try (Connection c = BenchSql.connect(db);
                Statement s = c.createStatement()) {
            s.execute("SELECT shards_set(" + shards + ")");
            s.execute("SELECT shards_switch()");
            for (int loaded = 0; loaded < backlog; loaded += 50_000) {
                s.executeUpdate(String.format(
                        Locale.ROOT,
                        "INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || mod(g, 1000), '{\"cents\": 100}',"
                                + " date_trunc('second', clock_timestamp()) + interval '%d seconds' FROM generate_series(1, %d) g",
                        DUE_AHEAD_SECONDS,
                        Math.min(50_000, backlog - loaded)));
            }
            s.execute("VACUUM ANALYZE jobs");
            s.execute("CHECKPOINT");
            s.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
        }
        List<Dispatcher> replicas = new ArrayList<>();
        List<Timer> batches = new ArrayList<>();
        try (Connection c = BenchSql.connect(db);
                Statement s = c.createStatement()) {
            MachineCounters before = null;
            Map<String, Long> componentsBefore = Map.of();
            double[] batchSecondsBefore = new double[REPLICAS];
            double dueAt;
            try (ResultSet r = s.executeQuery("SELECT extract(epoch FROM min(due_at)) FROM jobs")) {
                r.next();
                dueAt = r.getDouble(1);
            }
            for (int i = 0; i < REPLICAS; i++) {
                MeterRegistry registry = new SimpleMeterRegistry();
                replicas.add(DispatcherBenchmark.dispatcher(db, PipelinedBound.DISPATCH_BATCH, registry));
                // Its batch transactions' time (batches that held their lease), over every shard it holds.
                batches.add(registry.get("fencedjobs_batch").timer());
            }
            while (true) {
                double now;
                boolean pending;
                // Whether any job is pending, not how many: a count of the pending jobs every 20 ms took a
                // fifth of the database's statement time from the replicas it measured (pg_stat_statements,
                // 20,000 jobs, one shard).
                try (ResultSet r = s.executeQuery("SELECT extract(epoch FROM clock_timestamp()),"
                        + " EXISTS (SELECT 1 FROM jobs WHERE state = 'pending')")) {
                    r.next();
                    now = r.getDouble(1);
                    pending = r.getBoolean(2);
                }
                if (before == null && now >= dueAt - 0.05) {
                    before = MachineCounters.read();
                    componentsBefore = BenchStack.cpuTicksByComponent();
                    for (int i = 0; i < REPLICAS; i++) {
                        batchSecondsBefore[i] = batches.get(i).totalTime(TimeUnit.SECONDS);
                    }
                    s.execute("SELECT pg_stat_statements_reset()");
                }
                if (!pending) {
                    break;
                }
                Thread.sleep(before == null ? 20 : 50);
            }
            MachineCounters after = MachineCounters.read();
            Map<String, Long> componentsAfter = BenchStack.cpuTicksByComponent();
            // Before this benchmark's own queries below.
            List<String> statements = topStatements(s, backlog);
            double seconds;
            String holders;
            try (ResultSet r = s.executeQuery("SELECT extract(epoch FROM max(completed_at)) - " + dueAt
                    + ", (SELECT string_agg(n::text, ' ' ORDER BY n) FROM (SELECT count(DISTINCT j.shard) AS n FROM jobs j"
                    + " JOIN lease_takeover t ON t.role = shard_role('scheduler', j.shard) AND t.fencing_token = j.completed_by_token"
                    + " GROUP BY t.holder_id) h) FROM jobs")) {
                r.next();
                seconds = r.getDouble(1);
                holders = r.getString(2);
            }
            List<String> busy = new ArrayList<>();
            for (int i = 0; i < REPLICAS; i++) {
                busy.add(String.format(
                        Locale.ROOT,
                        "%.0f",
                        100 * (batches.get(i).totalTime(TimeUnit.SECONDS) - batchSecondsBefore[i]) / seconds));
            }
            return new Result(
                    backlog / seconds,
                    seconds,
                    before == null
                            ? Cpu.UNKNOWN
                            : Cpu.between(before, componentsBefore, after, componentsAfter, backlog),
                    "replicas " + String.join(" ", busy) + " (shards held: " + holders + ")",
                    before == null ? Double.NaN : after.idlePercent(before),
                    statements);
        } finally {
            for (Dispatcher d : replicas) {
                d.close();
            }
            pg.dropDatabase(url);
        }
    }

    /**
     * Where the dispatchers' database time went over the drain: the statements of this database that took the most
     * execution time (pg_stat_statements, reset when the backlog fell due), each with its calls and its time per job
     * completed; the first line sums them all. With {@code pg_stat_statements.track = all} a trigger's statements count
     * in the statement that fired them and again on lines of their own, and a statement's time includes its waits (a
     * follower's {@code pg_advisory_lock} on a holder's sign of life is all wait).
     */
    private static List<String> topStatements(Statement s, int jobs) throws SQLException {
        List<String> lines = new ArrayList<>();
        try (ResultSet r = s.executeQuery("SELECT sum(total_exec_time), sum(calls) FROM pg_stat_statements"
                + " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())")) {
            r.next();
            lines.add(String.format(
                    Locale.ROOT,
                    "statements' execution time: %.1f us a job in all, %,d calls; the most:",
                    r.getDouble(1) * 1000 / jobs,
                    r.getLong(2)));
        }
        try (ResultSet r =
                s.executeQuery("SELECT calls, total_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 100)"
                        + " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                        + " ORDER BY total_exec_time DESC LIMIT 5")) {
            while (r.next()) {
                lines.add(String.format(
                        Locale.ROOT,
                        "  %6.1f us a job, %,8d calls  %s",
                        r.getDouble(2) * 1000 / jobs,
                        r.getLong(1),
                        r.getString(3)));
            }
        }
        return lines;
    }

    /** How far ahead the dispatchers' backlog is due: time for the replicas to start and share the shards. */
    private static final int DUE_AHEAD_SECONDS = 6;

    private static Result once(BenchPostgres pg, int shards, int backlog) throws Exception {
        String url = pg.freshDatabase("shards_" + shards);
        DatabaseConfig db = BenchSql.database(url, pg.user(), pg.password());
        BenchSql.migrate(db);
        long[] tokens = new long[shards];
        try (Connection c = BenchSql.connect(db);
                Statement s = c.createStatement()) {
            // The shard map of the schema (V13): k shards, each job's shard assigned from its resource.
            s.execute("SELECT shards_set(" + shards + ")");
            s.execute("SELECT shards_switch()");
            for (int i = 0; i < shards; i++) {
                try (ResultSet r =
                        s.executeQuery("INSERT INTO leader_lease (role, holder_id, fencing_token, expires_at) VALUES"
                                + " (shard_role('scheduler', " + i
                                + "), 'bench', 1, clock_timestamp() + interval '1 hour')"
                                + " RETURNING fencing_token")) {
                    r.next();
                    tokens[i] = r.getLong(1);
                }
            }
            for (int loaded = 0; loaded < backlog; loaded += 50_000) {
                s.executeUpdate(String.format(
                        Locale.ROOT,
                        "INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || mod(g, 1000), '{\"cents\": 100}',"
                                + " clock_timestamp() FROM generate_series(1, %d) g",
                        Math.min(50_000, backlog - loaded)));
            }
            s.execute("VACUUM ANALYZE jobs");
            s.execute("CHECKPOINT");
        }
        ExecutorService pool = Executors.newFixedThreadPool(shards);
        try {
            MachineCounters before = MachineCounters.read();
            Map<String, Long> componentsBefore = BenchStack.cpuTicksByComponent();
            long t0 = System.nanoTime();
            List<Future<long[]>> drains = new ArrayList<>();
            for (int i = 0; i < shards; i++) {
                int shard = i;
                drains.add(pool.submit(() -> drain(db, shard, tokens[shard])));
            }
            long jobs = 0;
            List<String> busy = new ArrayList<>();
            List<long[]> results = new ArrayList<>();
            for (Future<long[]> f : drains) {
                results.add(f.get());
            }
            long t1 = System.nanoTime();
            MachineCounters after = MachineCounters.read();
            Map<String, Long> componentsAfter = BenchStack.cpuTicksByComponent();
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
                    Cpu.between(before, componentsBefore, after, componentsAfter, jobs),
                    "connections " + String.join(" ", busy),
                    after.idlePercent(before));
        } finally {
            pool.shutdownNow();
            pg.dropDatabase(url);
        }
    }

    /** Completes the shard's due jobs batch by batch until none is left; returns the jobs and the nanoseconds spent in the database. */
    private static long[] drain(DatabaseConfig db, int shard, long token) throws SQLException {
        try (Connection c = BenchSql.connect(db);
                Statement s = c.createStatement();
                PreparedStatement guard = c.prepareStatement(
                        "SELECT fencing_token FROM leader_lease WHERE role = shard_role('scheduler', " + shard
                                + ") FOR UPDATE");
                PreparedStatement complete = c.prepareStatement(PipelinedBound.completeDue("true", shard, token))) {
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
