package dev.fencedjobs.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.testing.KafkaProcess;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/**
 * {@code java -jar fenced-jobs-benchmarks.jar soak}: the whole system (the same processes and
 * servers as {@code e2e}) under a steady offered load for a long time, with every retention
 * shortened so that the purges run all along, reporting per window whether tables stay bounded and
 * latency stays flat.
 *
 * <ol>
 *   <li>Saturation, measured as {@code e2e} measures throughput (a standing backlog of due jobs,
 *       effects counted over 30 s), on a database and topic of its own that the soak does not see.
 *   <li>The soak, on a fresh database and topic: jobs due at once, inserted with SQL 1/100 of the
 *       rate every 10 ms, at half the saturation rounded up to 100 (or {@code --rate}), for {@code
 *       --minutes} after a minute rising to that rate that is not measured (started at full rate
 *       on services just started, the pipeline fell behind for over a minute), and until what it
 *       left is applied.
 *   <li>Per window ({@code --window-seconds}): effects applied per second; due-to-effect p50, p99
 *       and max of the jobs applied in it, from the ledger alone (applied at, less the job's
 *       creation time it carries: the job's due time is the same INSERT's {@code clock_timestamp()},
 *       so this overstates by at most the INSERT's own time), read with one range scan of the
 *       ledger's primary key and ranked here, not in the database; the same for the first stage
 *       alone (to the job's completion, from the outbox) and for the producer's INSERT round trip
 *       (statement and commit, timed in the loader); the size of every table and index; live and dead rows;
 *       autovacuum and autoanalyze runs that ended, and the tables autovacuum was seen working on
 *       (sampled each second); checkpoints and whether one was being written; WAL written.
 * </ol>
 *
 * It prints a line per window and writes {@code soak.md}, {@code soak.json} and {@code soak.svg}.
 */
final class SoakBenchmark {

    private final Path repo;
    private final Path out;
    private final int minutes;
    private final int warmUpSeconds;
    private final int windowSeconds;
    private final Duration retention;
    private final int fixedRate;
    private final long history;
    private final boolean defaultAutovacuum;
    private final String serviceLogLevel;
    private final Map<String, Object> report = new LinkedHashMap<>();
    private final List<Map<String, Object>> windows = new ArrayList<>();
    /** Each producer INSERT's round trip (statement and commit) since the last window, ms. */
    private final ConcurrentLinkedQueue<Double> insertMillis = new ConcurrentLinkedQueue<>();

    private BenchStack stack;

    SoakBenchmark(
            Path repo,
            Path out,
            int minutes,
            int warmUpSeconds,
            int windowSeconds,
            Duration retention,
            int fixedRate,
            long history,
            boolean defaultAutovacuum,
            String serviceLogLevel) {
        this.repo = repo;
        this.out = out;
        this.minutes = minutes;
        this.warmUpSeconds = warmUpSeconds;
        this.windowSeconds = windowSeconds;
        this.retention = retention;
        this.fixedRate = fixedRate;
        this.history = history;
        this.defaultAutovacuum = defaultAutovacuum;
        this.serviceLogLevel = serviceLogLevel;
    }

    /** Draws {@code soak.svg} again beside a {@code soak.json} this benchmark wrote. */
    @SuppressWarnings("unchecked")
    static void redraw(Path json) throws Exception {
        Map<String, Object> saved = new ObjectMapper().readValue(json.toFile(), Map.class);
        Map<String, String> retentions = (Map<String, String>) saved.get("retentions");
        SoakBenchmark b = new SoakBenchmark(
                Path.of("."),
                json.toAbsolutePath().getParent(),
                0,
                0,
                20,
                Settings.parseDuration("JOBS_RETENTION", retentions.get("JOBS_RETENTION")),
                0,
                0,
                false,
                "INFO");
        b.report.putAll(saved);
        for (Map<String, Object> w : (List<Map<String, Object>>) saved.get("windows")) {
            Map<String, Object> copy = new LinkedHashMap<>(w);
            for (String k : List.of("p50Ms", "p99Ms", "maxMs")) {
                copy.put(k, ((Number) w.get(k)).doubleValue());
            }
            Map<String, Double> sizes = new TreeMap<>();
            ((Map<String, Number>) w.get("tableMb")).forEach((k, v) -> sizes.put(k, v.doubleValue()));
            copy.put("tableMb", sizes);
            b.windows.add(copy);
        }
        b.writeChart();
        System.out.println("Written: " + json.toAbsolutePath().getParent().resolve("soak.svg"));
    }

    void run() throws Exception {
        stack = new BenchStack(repo, serviceLogLevel, Path.of("target", "soak-logs"));
        try {
            machine();
            String r = retention.toSeconds() + "s";
            // Every retention shortened, so that every purge runs the whole time.
            Map<String, String> env = Map.of(
                    "JOBS_RETENTION", r, "OUTBOX_RETENTION", r, "PROCESSED_RETENTION", r, "RECORDS_RETENTION", r);
            report.put("retentions", env);
            int saturation = 0;
            if (fixedRate <= 0) {
                stack.setUp(env, KafkaProcess.freePort());
                saturation = saturation();
                stack.stopServices();
            }
            int rate = fixedRate > 0 ? fixedRate : (int) Math.ceil(saturation / 2.0 / 100) * 100;
            report.put("saturationJobsPerSecond", saturation);
            report.put("offeredJobsPerSecond", rate);
            // The soak on a fresh database and topic, so that nothing of the saturation run is left to purge.
            stack.setUp(env, KafkaProcess.freePort());
            prepareTables();
            soak(rate);
        } finally {
            stack.close();
        }
        write();
    }

    private void machine() throws SQLException {
        Map<String, Object> m = stack.machine();
        try (Connection c = stack.pg().admin();
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(
                        "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name) FROM pg_settings"
                                + " WHERE name IN ('autovacuum_naptime', 'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_cost_limit',"
                                + " 'autovacuum_vacuum_cost_delay', 'max_wal_size', 'checkpoint_timeout')")) {
            rs.next();
            m.put("postgresSettings", rs.getString(1));
        }
        m.put("services", "2 dispatchers, 1 relay, 1 consumer");
        report.put("machine", m);
        System.out.println("Soak on " + m);
    }

    /**
     * {@code --autovacuum default} takes back the per-table autovacuum settings of the migrations
     * (dispatcher V7, consumer V4), to measure what they do; {@code --history N} adds N completed
     * jobs that stay for the whole run (completed "tomorrow", so no purge reaches them), standing for
     * the days of history a {@code JOBS_RETENTION} of a week keeps: they make the table and its
     * indexes large, which is what PostgreSQL's default autovacuum threshold scales with.
     */
    private void prepareTables() throws Exception {
        try (Connection c = stack.owner();
                Statement s = c.createStatement()) {
            if (defaultAutovacuum) {
                for (String table : List.of("jobs", "outbox", "consumer_processed")) {
                    s.execute(
                            "ALTER TABLE " + table
                                    + " RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, vacuum_index_cleanup)");
                }
            }
            if (history > 0) {
                long t = System.nanoTime();
                s.execute("SET session_replication_role = replica"); // the completion triggers want a lease token; this
                // is ballast
                s.execute(
                        "INSERT INTO jobs (due_at, state, completed_by_token, resource, payload, unique_key, created_at, completed_at)"
                                + " SELECT now() - interval '1 day', 'completed', 1, 'account-' || mod(g, "
                                + BenchStack.RESOURCES + "), '{\"cents\": 100}',"
                                + " 'history-' || g, now() - interval '1 day', now() + interval '1 day' FROM generate_series(1, "
                                + history + ") g");
                s.execute("RESET session_replication_role");
                s.execute("VACUUM ANALYZE jobs");
                System.out.printf(
                        Locale.ROOT,
                        "   %,d completed jobs of history added in %.0f s%n",
                        history,
                        (System.nanoTime() - t) / 1e9);
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT string_agg(relname || coalesce(' ' || array_to_string(reloptions, ' '), ''), '; ' ORDER BY relname)"
                            + " FROM pg_class WHERE relname IN ('jobs', 'outbox', 'consumer_processed')")) {
                r.next();
                report.put("tableSettings", r.getString(1));
                report.put("history", history);
                System.out.println("   table settings: " + r.getString(1));
            }
        }
    }

    // ------------------------------------------------------------------ saturation

    /**
     * The saturation, as {@code e2e} measures its throughput: due jobs inserted 5,000 at a time
     * whenever fewer than 50,000 are between INSERT and effect, effects counted over 30 s after 15 s
     * of warm-up. On a database and topic of its own, dropped before the soak.
     */
    private int saturation() throws Exception {
        System.out.println(
                "1. saturation: a standing backlog of up to 50,000 due jobs, effects counted over 30 s after 15 s");
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Exception> failure = new AtomicReference<>();
        Thread loader = stack.saturatingLoader("saturation-loader", stop, failure);
        loader.start();
        double rate;
        try {
            Thread.sleep(15_000);
            long a0 = stack.scalar("SELECT coalesce(max(id), 0) FROM ledger");
            long t0 = System.nanoTime();
            Thread.sleep(30_000);
            long a1 = stack.scalar("SELECT coalesce(max(id), 0) FROM ledger");
            rate = (a1 - a0) / ((System.nanoTime() - t0) / 1e9);
        } finally {
            stop.set(true);
            loader.join();
        }
        if (failure.get() != null) {
            throw failure.get();
        }
        System.out.printf(Locale.ROOT, "   saturation: %,.0f jobs/s%n", rate);
        return (int) Math.round(rate);
    }

    // ------------------------------------------------------------------ the soak

    private void soak(int rate) throws Exception {
        System.out.printf(
                Locale.ROOT,
                "2. soak: %,d jobs/s offered for %d minutes after %d s of warm-up rising to it, retentions %s, %d s windows%n",
                rate,
                minutes,
                warmUpSeconds,
                retention,
                windowSeconds);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Exception> failure = new AtomicReference<>();
        AtomicLong inserted = new AtomicLong();
        AtomicLong currentRate = new AtomicLong(Math.max(100, rate / 4));
        Thread loader = new Thread(
                () -> {
                    try (Connection c = stack.owner();
                            Statement s = c.createStatement()) {
                        long next = System.nanoTime();
                        while (!stop.get()) {
                            long wait = next - System.nanoTime();
                            if (wait > 0) {
                                Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                            }
                            long r = currentRate.get();
                            int perTick = (int) Math.max(1, r / 100);
                            long t = System.nanoTime();
                            inserted.addAndGet(s.executeUpdate(String.format(BenchStack.INSERT_DUE, perTick)));
                            insertMillis.add((System.nanoTime() - t) / 1e6);
                            next += 1_000_000_000L * perTick / r;
                        }
                    } catch (Exception e) {
                        failure.set(e);
                    }
                },
                "soak-loader");
        Activity activity = new Activity();
        Thread watcher = new Thread(() -> activity.watch(stop), "soak-activity");
        try (Connection c = stack.owner();
                Statement s = c.createStatement()) {
            // A minute (--warm-up-seconds) rising to the soak rate first, not measured (started at full rate on
            // services
            // just started, the pipeline fell behind for over a minute); then until what that left is applied.
            loader.start();
            for (int quarter = 1; quarter <= 4; quarter++) {
                currentRate.set(Math.max(100, rate * quarter / 4));
                Thread.sleep(warmUpSeconds * 250L);
            }
            // Jobs inserted less effects applied (both numbered from 1): under half a second's worth.
            BenchStack.waitFor(
                    "the warm-up's backlog to be applied",
                    () -> stack.scalar("SELECT coalesce(max(id), 0) FROM jobs")
                                    - stack.scalar("SELECT coalesce(max(id), 0) FROM ledger")
                            < rate / 2,
                    Duration.ofMinutes(5));
            if (failure.get() != null) {
                throw failure.get();
            }
            s.execute("SELECT pg_stat_statements_reset()");
            long ledgerMark = BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM ledger");
            long outboxMark = BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM outbox");
            Snapshot previous = Snapshot.take(s);
            long insertedMark = inserted.get();
            long started = System.nanoTime();
            Map<String, Long> cpu0 = BenchStack.cpuTicksByComponent();
            insertMillis.clear();
            watcher.start();
            int count = minutes * 60 / windowSeconds;
            for (int w = 1; w <= count; w++) {
                long end = started + TimeUnit.SECONDS.toNanos((long) w * windowSeconds);
                for (long left; (left = end - System.nanoTime()) > 0; ) {
                    TimeUnit.NANOSECONDS.sleep(left);
                }
                if (failure.get() != null) {
                    throw failure.get();
                }
                Set<String> seen = activity.drain();
                double[] insert = drainedPercentiles(insertMillis);
                long ledgerNow = BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM ledger");
                long insertedNow = inserted.get();
                long outboxNow = BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM outbox");
                double[] p = latencies(s, ledgerMark, ledgerNow);
                double[] completion = completionLatencies(s, outboxMark, outboxNow);
                Snapshot now = Snapshot.take(s);
                windows.add(window(
                        w,
                        (ledgerNow - ledgerMark) / (double) windowSeconds,
                        (insertedNow - insertedMark) / (double) windowSeconds,
                        (long) p[0],
                        p,
                        completion,
                        insert,
                        previous,
                        now,
                        seen));
                ledgerMark = ledgerNow;
                outboxMark = outboxNow;
                insertedMark = insertedNow;
                previous = now;
            }
            stop.set(true);
            loader.join();
            watcher.join();
            double elapsed = (System.nanoTime() - started) / 1e9;
            Map<String, Double> cpuShare = BenchStack.cpuShare(cpu0, BenchStack.cpuTicksByComponent(), elapsed);
            report.put("cpuSharePercent", cpuShare);
            long jobs = windows.stream().mapToLong(m -> (Long) m.get("jobs")).sum();
            report.put("jobsApplied", jobs);
            List<String> top = new ArrayList<>();
            try (ResultSet r = s.executeQuery(
                    "SELECT r.rolname, st.calls, st.total_exec_time / 1000,"
                            + " left(regexp_replace(st.query, '\\s+', ' ', 'g'), 100)"
                            + " FROM pg_stat_statements st JOIN pg_roles r ON r.oid = st.userid ORDER BY st.total_exec_time DESC LIMIT 10")) {
                while (r.next()) {
                    top.add(String.format(
                            Locale.ROOT,
                            "%-20s %9d calls %8.1f s %6.1f µs/job  %s",
                            r.getString(1),
                            r.getLong(2),
                            r.getDouble(3),
                            r.getDouble(3) * 1e6 / Math.max(1, jobs),
                            r.getString(4)));
                }
            }
            report.put("topStatementsByExecutionTime", top);
            System.out.println("   statements that took the most database time over the soak:");
            top.forEach(t -> System.out.println("     " + t));
            System.out.println("   share of the machine's CPU over the soak, %: " + cpuShare);
        }
    }

    /**
     * Count, p50, p99 and max in ms of applied-at less job-created-at over the ledger rows in
     * {@code (from, to]}. Measured: the percentile query this replaces (a join with {@code jobs}
     * and a sort in the database) took 0.9 to 1 s of database time and wrote ~460 MB of temp files
     * per window, on the same two cores and disk as the system under test.
     */
    private static double[] latencies(Statement s, long from, long to) throws SQLException {
        return latencies(s, "applied_at - job_created_at", "ledger", from, to);
    }

    /**
     * The same for the first stage alone, over the outbox rows in {@code (from, to]}: the job's
     * completion (its {@code completed_at}, read in the dispatcher's batch before its commit) less
     * its creation. What the relay, Kafka and the consumer add is the rest.
     */
    private static double[] completionLatencies(Statement s, long from, long to) throws SQLException {
        return latencies(s, "completed_at - job_created_at", "outbox", from, to);
    }

    private static double[] latencies(Statement s, String interval, String table, long from, long to)
            throws SQLException {
        double[] ms = new double[(int) Math.max(0, to - from)];
        int n = 0;
        try (ResultSet r = s.executeQuery("SELECT extract(epoch FROM " + interval + ")::float8 * 1000 FROM " + table
                + " WHERE id > " + from + " AND id <= " + to)) {
            while (r.next()) {
                if (n == ms.length) {
                    ms = Arrays.copyOf(ms, Math.max(16, n * 2));
                }
                ms[n++] = r.getDouble(1);
            }
        }
        return summary(Arrays.copyOf(ms, n));
    }

    /** Count, p50, p99 and max of {@code values}, which it sorts; all 0 when empty. */
    private static double[] summary(double[] values) {
        if (values.length == 0) {
            return new double[] {0, 0, 0, 0};
        }
        Arrays.sort(values);
        return new double[] {values.length, rank(values, 0.5), rank(values, 0.99), values[values.length - 1]};
    }

    /** Count, p50, p99 and max of what {@code queue} holds now, which it gives up. */
    private static double[] drainedPercentiles(ConcurrentLinkedQueue<Double> queue) {
        List<Double> taken = new ArrayList<>();
        for (Double d; (d = queue.poll()) != null; ) {
            taken.add(d);
        }
        return summary(taken.stream().mapToDouble(Double::doubleValue).toArray());
    }

    /** Linear interpolation between the closest ranks, as percentile_cont does. */
    private static double rank(double[] sorted, double q) {
        double pos = q * (sorted.length - 1);
        int lo = (int) Math.floor(pos);
        int hi = Math.min(sorted.length - 1, lo + 1);
        return sorted[lo] + (pos - lo) * (sorted[hi] - sorted[lo]);
    }

    private Map<String, Object> window(
            int n,
            double appliedPerSecond,
            double insertedPerSecond,
            long jobs,
            double[] p,
            double[] completion,
            double[] insert,
            Snapshot before,
            Snapshot now,
            Set<String> seen) {
        Map<String, Object> w = new LinkedHashMap<>();
        w.put("window", n);
        w.put("endSeconds", n * windowSeconds);
        w.put("jobs", jobs);
        w.put("appliedPerSecond", Math.round(appliedPerSecond));
        w.put("insertedPerSecond", Math.round(insertedPerSecond));
        w.put("p50Ms", round(p[1]));
        w.put("p99Ms", round(p[2]));
        w.put("maxMs", round(p[3]));
        w.put("toCompletedP99Ms", round(completion[2]));
        w.put("toCompletedMaxMs", round(completion[3]));
        w.put("producerInsertP99Ms", round(insert[2]));
        w.put("producerInsertMaxMs", round(insert[3]));
        Map<String, Long> vacuumed = new TreeMap<>();
        now.vacuums.forEach((table, runs) -> {
            long d = runs - before.vacuums.getOrDefault(table, 0L);
            if (d > 0) {
                vacuumed.put(table, d);
            }
        });
        w.put("autovacuumRunsEnded", vacuumed);
        w.put(
                "autovacuumSeenOn",
                new TreeSet<>(seen.stream()
                        .filter(x -> !x.equals("checkpoint") && !x.startsWith("wait "))
                        .toList()));
        w.put(
                "waitsSeen",
                new TreeSet<>(seen.stream()
                        .filter(x -> x.startsWith("wait "))
                        .map(x -> x.substring(5))
                        .toList()));
        w.put("checkpoints", now.checkpoints - before.checkpoints);
        w.put("checkpointWriting", seen.contains("checkpoint"));
        w.put("walMB", round((now.walBytes - before.walBytes) / 1e6));
        w.put("walRecords", now.walRecords - before.walRecords);
        // Each full-page image is a block of up to 8 kB in the WAL (less its unused middle).
        w.put("walFullPageImages", now.walFullPageImages - before.walFullPageImages);
        w.put("tableMb", now.tableMb);
        w.put("relationMb", now.relationMb);
        w.put("liveRows", now.liveRows);
        w.put("deadRows", now.deadRows);
        System.out.printf(
                Locale.ROOT,
                "   %5d s  %,7.0f jobs/s  p50 %6.1f  p99 %6.1f  max %7.1f ms (to completed: p99 %6.1f  max %7.1f ms; producer's INSERT: p99 %6.1f  max %6.1f ms)"
                        + "  jobs %6.1f MB  outbox %6.1f MB  processed %6.1f MB  ledger %7.1f MB  autovacuum %s%s%s%n",
                n * windowSeconds,
                appliedPerSecond,
                p[1],
                p[2],
                p[3],
                completion[2],
                completion[3],
                insert[2],
                insert[3],
                now.tableMb.getOrDefault("jobs", 0.0),
                now.tableMb.getOrDefault("outbox", 0.0),
                now.tableMb.getOrDefault("consumer_processed", 0.0),
                now.tableMb.getOrDefault("ledger", 0.0),
                w.get("autovacuumSeenOn"),
                (long) w.get("checkpoints") > 0 ? "  checkpoints " + w.get("checkpoints") : "",
                seen.contains("checkpoint") ? " (checkpoint writing)" : "");
        if (!((Set<?>) w.get("waitsSeen")).isEmpty()) {
            System.out.println("          waits seen: " + w.get("waitsSeen"));
        }
        if ((long) w.get("walRecords") > 0) {
            System.out.printf(
                    Locale.ROOT,
                    "          WAL: %.1f MB, %,d records, %,d full-page images%n",
                    (double) w.get("walMB"),
                    (long) w.get("walRecords"),
                    (long) w.get("walFullPageImages"));
        }
        return w;
    }

    /** What the database's statistics say at one moment. */
    private record Snapshot(
            Map<String, Double> tableMb,
            Map<String, Double> relationMb,
            Map<String, Long> liveRows,
            Map<String, Long> deadRows,
            Map<String, Long> vacuums,
            long checkpoints,
            long walBytes,
            long walRecords,
            long walFullPageImages) {

        static Snapshot take(Statement s) throws SQLException {
            Map<String, Double> tables = new TreeMap<>();
            Map<String, Double> relations = new TreeMap<>();
            Map<String, Long> live = new TreeMap<>();
            Map<String, Long> dead = new TreeMap<>();
            Map<String, Long> vacuums = new TreeMap<>();
            try (ResultSet r = s.executeQuery(
                    "SELECT c.relname, c.relkind, pg_relation_size(c.oid), pg_total_relation_size(c.oid)"
                            + " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i')")) {
                while (r.next()) {
                    relations.put(r.getString(1), round(r.getLong(3) / 1e6));
                    if (r.getString(2).equals("r")) {
                        tables.put(r.getString(1), round(r.getLong(4) / 1e6));
                    }
                }
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT relname, n_live_tup, n_dead_tup, autovacuum_count + autoanalyze_count FROM pg_stat_user_tables")) {
                while (r.next()) {
                    live.put(r.getString(1), r.getLong(2));
                    dead.put(r.getString(1), r.getLong(3));
                    vacuums.put(r.getString(1), r.getLong(4));
                }
            }
            long[] background = BenchStack.backgroundWork(s);
            long wal = BenchStack.scalar(s, "SELECT wal_bytes::bigint FROM pg_stat_wal");
            long records = BenchStack.scalar(s, "SELECT wal_records FROM pg_stat_wal");
            long fpi = BenchStack.scalar(s, "SELECT wal_fpi FROM pg_stat_wal");
            return new Snapshot(tables, relations, live, dead, vacuums, background[1], wal, records, fpi);
        }
    }

    /** Samples once a second which tables autovacuum works on and whether the checkpointer is writing. */
    private final class Activity {
        private final Set<String> seen = new TreeSet<>();

        void watch(AtomicBoolean stop) {
            try (Connection c = stack.owner();
                    Statement s = c.createStatement()) {
                while (!stop.get()) {
                    Set<String> now = new TreeSet<>();
                    try (ResultSet r = s.executeQuery("SELECT backend_type, query, wait_event FROM pg_stat_activity"
                            + " WHERE backend_type IN ('autovacuum worker', 'checkpointer')")) {
                        while (r.next()) {
                            if (r.getString(1).equals("checkpointer")) {
                                // Idle, the checkpointer waits in CheckpointerMain; writing a checkpoint, elsewhere.
                                if (r.getString(3) == null || !r.getString(3).equals("CheckpointerMain")) {
                                    now.add("checkpoint");
                                }
                            } else if (r.getString(2) != null) {
                                now.add(r.getString(2)
                                        .replaceFirst("^autovacuum: ", "")
                                        .replace("public.", "")
                                        .replaceAll("\\s+\\(to prevent wraparound\\)", ""));
                            }
                        }
                    }
                    // Client backends waiting on a lock or I/O, and for what: what holds the pipeline up.
                    try (ResultSet r = s.executeQuery("SELECT wait_event_type || ':' || wait_event, usename,"
                            + " left(regexp_replace(query, '\\s+', ' ', 'g'), 48) FROM pg_stat_activity"
                            + " WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()"
                            + " AND wait_event_type IN ('Lock', 'LWLock', 'IO', 'BufferPin')")) {
                        while (r.next()) {
                            now.add("wait " + r.getString(1) + " " + r.getString(2) + ": " + r.getString(3));
                        }
                    }
                    synchronized (this) {
                        seen.addAll(now);
                    }
                    Thread.sleep(1000);
                }
            } catch (Exception e) {
                System.err.println("activity sampling stopped: " + e);
            }
        }

        synchronized Set<String> drain() {
            Set<String> copy = new TreeSet<>(seen);
            seen.clear();
            return copy;
        }
    }

    // ------------------------------------------------------------------ output

    private void write() throws Exception {
        Files.createDirectories(out);
        report.put("windows", windows);
        StringBuilder md = new StringBuilder();
        md.append("# Soak benchmark\n\n");
        md.append("`java -jar benchmarks/target/fenced-jobs-benchmarks.jar soak --minutes ")
                .append(minutes)
                .append(" --window-seconds ")
                .append(windowSeconds)
                .append(" --retention ")
                .append(retention.toSeconds())
                .append("s");
        if (warmUpSeconds != 60) {
            md.append(" --warm-up-seconds ").append(warmUpSeconds);
        }
        if (fixedRate > 0) {
            md.append(" --rate ").append(fixedRate);
        }
        if (history > 0) {
            md.append(" --history ").append(history);
        }
        if (defaultAutovacuum) {
            md.append(" --autovacuum default");
        }
        md.append("` on ").append(report.get("machine")).append("\n\n");
        int saturation = (int) report.get("saturationJobsPerSecond");
        md.append(
                        saturation > 0
                                ? String.format(Locale.ROOT, "Saturation %,d jobs/s", saturation)
                                : "Saturation not measured (--rate)")
                .append("; offered ")
                .append(String.format(Locale.ROOT, "%,d", (int) report.get("offeredJobsPerSecond")))
                .append(" jobs/s; retentions ")
                .append(report.get("retentions"))
                .append("; table settings: ")
                .append(report.get("tableSettings"))
                .append(".\n\n");
        md.append(summary()).append("\n\n");
        md.append("![table sizes and due-to-effect latency against time](soak.svg)\n\n");
        md.append(
                "| end of window | applied jobs/s | p50 ms | p99 ms | max ms | of which to completed: p99 / max ms | producer's INSERT: p99 / max ms"
                        + " | jobs MB | outbox MB | consumer_processed MB | other tables MB | ledger MB | autovacuum seen on | checkpoints |\n"
                        + "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (Map<String, Object> w : windows) {
            @SuppressWarnings("unchecked")
            Map<String, Double> t = (Map<String, Double>) w.get("tableMb");
            double other = t.entrySet().stream()
                    .filter(e -> !Set.of("jobs", "outbox", "consumer_processed", "ledger")
                            .contains(e.getKey()))
                    .mapToDouble(Map.Entry::getValue)
                    .sum();
            md.append(String.format(
                    Locale.ROOT,
                    "| %s | %,d | %.1f | %.1f | %.1f | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s |%n",
                    clock((int) w.get("endSeconds")),
                    (long) w.get("appliedPerSecond"),
                    (double) w.get("p50Ms"),
                    (double) w.get("p99Ms"),
                    (double) w.get("maxMs"),
                    w.containsKey("toCompletedP99Ms")
                            ? String.format(
                                    Locale.ROOT,
                                    "%.1f / %.1f",
                                    ((Number) w.get("toCompletedP99Ms")).doubleValue(),
                                    ((Number) w.get("toCompletedMaxMs")).doubleValue())
                            : "",
                    w.containsKey("producerInsertP99Ms")
                            ? String.format(
                                    Locale.ROOT,
                                    "%.1f / %.1f",
                                    ((Number) w.get("producerInsertP99Ms")).doubleValue(),
                                    ((Number) w.get("producerInsertMaxMs")).doubleValue())
                            : "",
                    t.getOrDefault("jobs", 0.0),
                    t.getOrDefault("outbox", 0.0),
                    t.getOrDefault("consumer_processed", 0.0),
                    other,
                    t.getOrDefault("ledger", 0.0),
                    String.join(", ", stringSet(w.get("autovacuumSeenOn"))),
                    (long) w.get("checkpoints") + ((boolean) w.get("checkpointWriting") ? " (writing)" : "")));
        }
        md.append(
                "\nSizes are `pg_total_relation_size` (table, its indexes and TOAST); every relation's own size per window is in `soak.json`.\n");
        md.append("\nStatements by database time over the soak (pg_stat_statements):\n\n```\n");
        ((List<?>) report.get("topStatementsByExecutionTime"))
                .forEach(l -> md.append(l).append('\n'));
        md.append("```\n\nShare of the two cores over the soak, %: ")
                .append(report.get("cpuSharePercent"))
                .append('\n');
        Files.writeString(out.resolve("soak.md"), md.toString(), StandardCharsets.UTF_8);
        new ObjectMapper()
                .enable(SerializationFeature.INDENT_OUTPUT)
                .writeValue(out.resolve("soak.json").toFile(), report);
        writeChart();
        System.out.println();
        System.out.println(md);
        System.out.println("Written: " + out.resolve("soak.md") + ", " + out.resolve("soak.json") + ", "
                + out.resolve("soak.svg"));
    }

    /** Sizes after the first two retention periods against the end, and the worst window. */
    @SuppressWarnings("unchecked")
    private String summary() {
        if (windows.isEmpty()) {
            return "No window completed.";
        }
        int settled = (int) Math.min(windows.size() - 1, 2 * retention.toSeconds() / windowSeconds);
        Map<String, Double> from = (Map<String, Double>) windows.get(settled).get("tableMb");
        Map<String, Double> to =
                (Map<String, Double>) windows.get(windows.size() - 1).get("tableMb");
        Map<String, Double> peak = new TreeMap<>();
        for (Map<String, Object> w : windows.subList(settled, windows.size())) {
            ((Map<String, Double>) w.get("tableMb")).forEach((k, v) -> peak.merge(k, v, Math::max));
        }
        StringBuilder sb = new StringBuilder("Sizes from the end of the first two retention periods ("
                + clock((int) windows.get(settled).get("endSeconds")) + ") to the end (largest in between): ");
        List<String> parts = new ArrayList<>();
        to.entrySet().stream()
                .filter(e -> e.getValue() >= 0.1 || from.getOrDefault(e.getKey(), 0.0) >= 0.1)
                .sorted((a, b) -> Double.compare(b.getValue(), a.getValue()))
                .forEach(e -> parts.add(String.format(
                        Locale.ROOT,
                        "%s %.1f → %.1f MB (%.1f)",
                        e.getKey(),
                        from.getOrDefault(e.getKey(), 0.0),
                        e.getValue(),
                        peak.getOrDefault(e.getKey(), 0.0))));
        sb.append(String.join("; ", parts)).append(".\n\n");
        Map<String, Object> worst = windows.stream()
                .max((a, b) -> Double.compare((double) a.get("p99Ms"), (double) b.get("p99Ms")))
                .orElseThrow();
        long over = windows.stream().filter(w -> (double) w.get("p99Ms") >= 100).count();
        sb.append(String.format(
                Locale.ROOT,
                "Due-to-effect p99 under 100 ms in %d of %d windows; the worst window ended at %s: p99 %.1f ms, max %.1f ms"
                        + " (to completed: p99 %s ms), autovacuum seen on %s, %d checkpoints%s, %.1f MB of WAL; waits seen: %s.",
                windows.size() - over,
                windows.size(),
                clock((int) worst.get("endSeconds")),
                (double) worst.get("p99Ms"),
                (double) worst.get("maxMs"),
                worst.getOrDefault("toCompletedP99Ms", "not measured"),
                worst.get("autovacuumSeenOn"),
                (long) worst.get("checkpoints"),
                (boolean) worst.get("checkpointWriting") ? " (one being written)" : "",
                (double) worst.get("walMB"),
                worst.get("waitsSeen")));
        return sb.toString();
    }

    /** Two panels against minutes: each table's total size, and p50/p99/max due-to-effect latency (log scale). */
    @SuppressWarnings("unchecked")
    private void writeChart() throws Exception {
        int w = 760;
        int panel = 260;
        int left = 70;
        int right = 170;
        int top = 40;
        int gap = 60;
        int h = top + 2 * panel + gap + 50;
        double maxT =
                windows.isEmpty() ? 1 : (int) windows.get(windows.size() - 1).get("endSeconds") / 60.0;
        StringBuilder svg = new StringBuilder();
        svg.append("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"")
                .append(w)
                .append("\" height=\"")
                .append(h)
                .append(
                        "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        svg.append(String.format(
                Locale.ROOT,
                "<text x=\"%d\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">Soak: %,d jobs/s offered, retentions %d s</text>%n",
                w / 2,
                (int) report.get("offeredJobsPerSecond"),
                retention.toSeconds()));
        // Panel 1: sizes.
        Map<String, Double> last = windows.isEmpty()
                ? Map.of()
                : (Map<String, Double>) windows.get(windows.size() - 1).get("tableMb");
        // The ledger is the example effect's own data and grows by design: left out, so that the scale shows ours.
        List<String> tables = last.entrySet().stream()
                .filter(e -> !e.getKey().equals("ledger") && e.getValue() >= 1)
                .sorted((a, b) -> Double.compare(b.getValue(), a.getValue()))
                .limit(6)
                .map(Map.Entry::getKey)
                .toList();
        double maxMb = windows.stream()
                .flatMap(x -> ((Map<String, Double>) x.get("tableMb")).entrySet().stream())
                .filter(e -> tables.contains(e.getKey()))
                .mapToDouble(Map.Entry::getValue)
                .max()
                .orElse(1);
        double mbTop = niceCeiling(maxMb);
        int y0 = top;
        axes(svg, left, y0, w - left - right, panel, maxT, "MB", mbTop, false);
        String[] colours = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#7f7f7f"};
        for (int i = 0; i < tables.size(); i++) {
            String t = tables.get(i);
            StringBuilder path = new StringBuilder();
            for (Map<String, Object> x : windows) {
                double mb = ((Map<String, Double>) x.get("tableMb")).getOrDefault(t, 0.0);
                double px = left + (w - left - right) * ((int) x.get("endSeconds") / 60.0) / maxT;
                double py = y0 + panel * (1 - mb / mbTop);
                path.append(path.length() == 0 ? "M" : " L").append(String.format(Locale.ROOT, "%.1f %.1f", px, py));
            }
            svg.append("<path d=\"")
                    .append(path)
                    .append("\" fill=\"none\" stroke=\"")
                    .append(colours[i])
                    .append("\" stroke-width=\"2\"/>\n");
            svg.append(String.format(
                    Locale.ROOT,
                    "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>%n",
                    w - right + 10,
                    y0 + 14 + 16 * i,
                    colours[i],
                    t));
        }
        svg.append(String.format(
                Locale.ROOT,
                "<text x=\"%d\" y=\"%d\">table + indexes, MB (ledger, the example effect's table, not drawn:"
                        + " %,.0f MB at the end)</text>%n",
                left,
                y0 - 6,
                last.getOrDefault("ledger", 0.0)));
        // Panel 2: latency, log scale from 1 ms.
        int y1 = top + panel + gap;
        double maxMs =
                windows.stream().mapToDouble(x -> (double) x.get("maxMs")).max().orElse(10);
        double logMax = Math.ceil(Math.log10(Math.max(100, maxMs)));
        axes(svg, left, y1, w - left - right, panel, maxT, "ms", logMax, true);
        double target = y1 + panel * (1 - 2 / logMax);
        svg.append(String.format(
                Locale.ROOT,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" stroke-dasharray=\"4 4\"/>%n",
                left,
                w - right,
                target,
                target));
        svg.append(String.format(
                Locale.ROOT,
                "<text x=\"%d\" y=\"%.1f\" fill=\"#d62728\">target p99 100 ms</text>%n",
                w - right + 10,
                target + 4));
        String[][] series = {{"p50Ms", "#1f77b4", "p50"}, {"p99Ms", "#d62728", "p99"}, {"maxMs", "#7f7f7f", "max"}};
        for (int i = 0; i < series.length; i++) {
            StringBuilder path = new StringBuilder();
            for (Map<String, Object> x : windows) {
                double ms = Math.max(1, (double) x.get(series[i][0]));
                double px = left + (w - left - right) * ((int) x.get("endSeconds") / 60.0) / maxT;
                double py = y1 + panel * (1 - Math.log10(ms) / logMax);
                path.append(path.length() == 0 ? "M" : " L").append(String.format(Locale.ROOT, "%.1f %.1f", px, py));
            }
            svg.append("<path d=\"")
                    .append(path)
                    .append("\" fill=\"none\" stroke=\"")
                    .append(series[i][1])
                    .append("\" stroke-width=\"")
                    .append(i == 2 ? "1" : "2")
                    .append("\"/>\n");
            svg.append(String.format(
                    Locale.ROOT,
                    "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>%n",
                    w - right + 10,
                    y1 + 14 + 16 * i,
                    series[i][1],
                    series[i][2]));
        }
        svg.append(String.format(
                Locale.ROOT,
                "<text x=\"%d\" y=\"%d\">due-to-effect latency per %d s window, ms (log scale)</text>%n",
                left,
                y1 - 6,
                windowSeconds));
        svg.append(String.format(
                Locale.ROOT,
                "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">minutes</text>%n",
                left + (w - left - right) / 2,
                h - 12));
        svg.append("</svg>\n");
        Files.writeString(out.resolve("soak.svg"), svg.toString(), StandardCharsets.UTF_8);
    }

    private static void axes(
            StringBuilder svg,
            int x,
            int y,
            int width,
            int height,
            double maxMinutes,
            String unit,
            double top,
            boolean log) {
        svg.append(String.format(
                Locale.ROOT,
                "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>%n",
                x,
                y,
                width,
                height));
        int ticks = log ? (int) top : 4;
        for (int i = 0; i <= ticks; i++) {
            double py = y + height * (1 - i / (double) ticks);
            String label = log
                    ? String.format(Locale.ROOT, "%,.0f", Math.pow(10, i))
                    : String.format(Locale.ROOT, "%,.0f", top * i / ticks);
            svg.append(String.format(
                    Locale.ROOT,
                    "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>",
                    x,
                    x + width,
                    py,
                    py));
            svg.append(String.format(
                    Locale.ROOT,
                    "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s %s</text>%n",
                    x - 6,
                    py + 4,
                    label,
                    unit));
        }
        int step = maxMinutes > 20 ? 5 : maxMinutes > 8 ? 2 : 1;
        for (int m = 0; m <= maxMinutes; m += step) {
            double px = x + width * m / maxMinutes;
            svg.append(String.format(
                    Locale.ROOT,
                    "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>%n",
                    px,
                    y + height + 16,
                    m));
        }
    }

    private static double niceCeiling(double v) {
        double magnitude = Math.pow(10, Math.floor(Math.log10(Math.max(v, 1))));
        for (double m : new double[] {1, 2, 2.5, 5, 10}) {
            if (v <= m * magnitude) {
                return m * magnitude;
            }
        }
        return 10 * magnitude;
    }

    /** A window's set of names, as the window map holds it. */
    private static List<String> stringSet(Object set) {
        return ((Set<?>) set).stream().map(String::valueOf).toList();
    }

    private static String clock(int seconds) {
        return String.format(Locale.ROOT, "%d:%02d", seconds / 60, seconds % 60);
    }

    private static double round(double v) {
        return BenchStack.round(v);
    }
}
