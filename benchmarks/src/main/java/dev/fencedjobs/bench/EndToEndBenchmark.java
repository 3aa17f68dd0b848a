package dev.fencedjobs.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import dev.fencedjobs.testing.KafkaProcess;
import dev.fencedjobs.testing.ServiceProcess;
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
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * {@code java -jar fenced-jobs-benchmarks.jar e2e}: the whole system end to end, with two
 * dispatchers, a relay and a consumer running from their packaged jars as separate processes
 * against a durable PostgreSQL 17 and a Kafka broker in its own JVM, each figure beside the bound it
 * is up against in the same run:
 *
 * <ol>
 *   <li>throughput from a SQL INSERT of due jobs to the consumer's effect row, sustained;
 *   <li>the bound: the same SQL and Kafka work issued by a plain JDBC and kafka-clients loop, with no
 *       service, no lease and no waiting;
 *   <li>due-to-effect latency at several offered loads up to saturation (and a chart of it);
 *   <li>failover from SIGKILL and from SIGTERM of the dispatcher leader to its successor's first
 *       completed job, beside the lease duration; then of one of two consumers to the first effect
 *       from its partitions, beside the session timeout ({@link ConsumerFailover});
 *   <li>statements per second of each idle service (pg_stat_statements, one login role each);
 *   <li>peak RSS of each service during the throughput run, with the heap setting used.
 * </ol>
 *
 * It prints a table and writes {@code e2e.json}, {@code e2e.md} and {@code e2e-latency.svg}.
 */
final class EndToEndBenchmark {

    private static final String HEAP = BenchStack.HEAP;
    private static final String TOPIC = BenchStack.TOPIC;
    private static final int PARTITIONS = BenchStack.PARTITIONS;
    private static final int RESOURCES = BenchStack.RESOURCES;
    private static final String INSERT_DUE = BenchStack.INSERT_DUE;

    private final Path repo;
    private final Path out;
    private final int windowSeconds;
    private final int trials;
    private final int idleSeconds;
    private final int[] loads;
    private final Map<String, Object> report = new LinkedHashMap<>();
    private final List<String> table = new ArrayList<>();
    private BenchStack stack;
    private BenchPostgres pg;
    private KafkaProcess kafka;
    private Map<String, ServiceProcess> services;
    /** Fixed ops ports of the consumers, whose {@code /status} the consumer failover reads. */
    private final Map<String, Integer> consumerPorts = new LinkedHashMap<>();
    private final String phases;
    private final String serviceLogLevel;

    EndToEndBenchmark(Path repo, Path out, int windowSeconds, int trials, int idleSeconds, int[] loads, String phases,
            String serviceLogLevel) {
        this.repo = repo;
        this.out = out;
        this.windowSeconds = windowSeconds;
        this.trials = trials;
        this.idleSeconds = idleSeconds;
        this.loads = loads;
        this.phases = phases;
        this.serviceLogLevel = serviceLogLevel;
    }

    void run() throws Exception {
        stack = new BenchStack(repo, serviceLogLevel, Path.of("target", "e2e-logs"));
        pg = stack.pg();
        kafka = stack.kafka();
        services = stack.services();
        try {
            machine();
            if (phase("throughput")) {
                double bound = bound();
                setUp();
                double ours = throughput();
                row("1. end to end, SQL INSERT to effect row", String.format(Locale.ROOT, "%,.0f jobs/s", ours),
                        "target 12,000; " + String.format(Locale.ROOT, "%.2f", ours / bound) + " of the lower bound below");
                report.put("ratioToBound", ours / bound);
                memory();
            } else {
                setUp();
            }
            if (phase("latency")) {
                latency();
            }
            if (phase("failover") || phase("consumer-failover")) {
                failover();
            }
            if (phase("idle")) {
                idle();
            }
        } finally {
            stack.close();
        }
        write();
    }

    private boolean phase(String name) {
        return phases.equals("all") || Arrays.asList(phases.split(",")).contains(name);
    }

    // ------------------------------------------------------------------ set-up

    private void machine() throws SQLException {
        Map<String, Object> m = stack.machine();
        report.put("machine", m);
        System.out.println("End to end on " + m);
    }

    private void setUp() throws Exception {
        consumerPorts.put("consumer", KafkaProcess.freePort());
        consumerPorts.put("consumer-2", KafkaProcess.freePort());
        stack.setUp(Map.of(), consumerPorts.get("consumer"));
    }

    private Connection owner() throws SQLException {
        return stack.owner();
    }

    private long scalar(String sql) {
        return stack.scalar(sql);
    }

    private static long scalar(Statement s, String sql) throws SQLException {
        return BenchStack.scalar(s, sql);
    }

    // ------------------------------------------------------------------ 1. throughput

    /**
     * Inserts due jobs whenever fewer than 50,000 are between INSERT and effect, so the pipeline never
     * starves, and counts effect rows over the window after a warm-up.
     */
    private double throughput() throws Exception {
        System.out.println("1. end-to-end throughput: " + windowSeconds + " s window after 15 s of warm-up");
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Exception> failure = new AtomicReference<>();
        Thread loader = new Thread(() -> {
            try (Connection c = owner(); Statement s = c.createStatement()) {
                long inserted = scalar(s, "SELECT count(*) FROM jobs");
                while (!stop.get()) {
                    long applied = scalar(s, "SELECT coalesce(max(id), 0) FROM ledger");
                    if (inserted - applied < 50_000) {
                        inserted += s.executeUpdate(String.format(INSERT_DUE, 5_000));
                    } else {
                        Thread.sleep(20);
                    }
                }
            } catch (Exception e) {
                failure.set(e);
            }
        }, "e2e-loader");
        loader.start();
        Thread.sleep(15_000);
        long a0 = scalar("SELECT coalesce(max(id), 0) FROM ledger");
        Map<String, Long> cpu0 = BenchStack.cpuTicksByComponent();
        try (Connection c = owner(); Statement s = c.createStatement()) {
            s.execute("SELECT pg_stat_statements_reset()");
        }
        long t0 = System.nanoTime();
        Thread.sleep(windowSeconds * 1000L);
        long a1 = scalar("SELECT coalesce(max(id), 0) FROM ledger");
        long t1 = System.nanoTime();
        Map<String, Long> cpu1 = BenchStack.cpuTicksByComponent();
        Map<String, Double> cpuShare = new LinkedHashMap<>();
        double capacityTicks = 100.0 * Runtime.getRuntime().availableProcessors() * ((t1 - t0) / 1e9);
        cpu1.forEach((component, ticks) -> cpuShare.put(component,
                Math.round(1000.0 * (ticks - cpu0.getOrDefault(component, 0L)) / capacityTicks) / 10.0));
        report.put("cpuShareDuringThroughputPercent", cpuShare);
        List<String> top = new ArrayList<>();
        try (Connection c = owner(); Statement s = c.createStatement();
                ResultSet r = s.executeQuery("SELECT r.rolname, st.calls, round(st.total_exec_time::numeric / 1000, 1),"
                        + " left(regexp_replace(st.query, '\\s+', ' ', 'g'), 90)"
                        + " FROM pg_stat_statements st JOIN pg_roles r ON r.oid = st.userid ORDER BY st.total_exec_time DESC LIMIT 6")) {
            while (r.next()) {
                top.add(String.format(Locale.ROOT, "%-20s %8d calls %7.1f s  %s", r.getString(1), r.getLong(2), r.getDouble(3), r.getString(4)));
            }
        }
        report.put("topStatementsByExecutionTime", top);
        System.out.println("   statements that took the most database time in the window:");
        top.forEach(t -> System.out.println("     " + t));
        System.out.println("   share of the machine's CPU during the window, %: " + cpuShare);
        row("1. where the CPU went during run 1 (% of " + Runtime.getRuntime().availableProcessors() + " cores)",
                listing(cpuShare), "from /proc/<pid>/stat");
        for (Map.Entry<String, ServiceProcess> e : services.entrySet()) {
            peakRss.put(e.getKey(), BenchStack.peakRssMb(e.getValue().pid()));
        }
        stop.set(true);
        loader.join();
        if (failure.get() != null) {
            throw failure.get();
        }
        double rate = (a1 - a0) / ((t1 - t0) / 1e9);
        System.out.printf(Locale.ROOT, "   %,d effects in %.1f s: %,.0f jobs/s%n", a1 - a0, (t1 - t0) / 1e9, rate);
        report.put("throughputJobsPerSecond", rate);
        BenchStack.waitFor("the backlog to drain", () -> scalar("SELECT count(*) FROM jobs WHERE state = 'pending'") == 0
                && scalar("SELECT count(*) FROM outbox_unpublished") == 0
                && scalar("SELECT coalesce(max(id), 0) FROM ledger") >= scalar("SELECT count(*) FROM jobs"), Duration.ofMinutes(5));
        return rate;
    }

    private final Map<String, Long> peakRss = new LinkedHashMap<>();

    private void memory() {
        report.put("peakRssMb", peakRss);
        row("6. peak RSS during run 1 (" + HEAP + ")", listing(peakRss) + " MB", "heap " + HEAP + " each");
    }

    // ------------------------------------------------------------------ 2. the bound

    /** The lower of {@link PipelinedBound}'s two bounds, each measured with the machine to itself. */
    private double bound() throws Exception {
        System.out.println("2. the bound: PostgreSQL alone doing the same row writes, stages pipelined, " + windowSeconds
                + " s window after 10 s of warm-up");
        double postgres = PipelinedBound.postgresOnly(pg, 10, windowSeconds);
        System.out.println("   Kafka alone doing the produce and the consume, " + windowSeconds + " s window after 10 s of warm-up");
        double kafkaOnly = PipelinedBound.kafkaOnly(kafka, 10, windowSeconds);
        report.put("boundPostgresOnlyJobsPerSecond", postgres);
        report.put("boundKafkaOnlyRecordsPerSecond", kafkaOnly);
        row("2. bound: PostgreSQL alone, the same row writes in the services' batch sizes, four stages at once",
                String.format(Locale.ROOT, "%,.0f jobs/s", postgres), "same run, same server; no service, lease, LISTEN, purge or Kafka");
        row("2. bound: Kafka alone, envelopes produced with the relay's settings and consumed with offset commits",
                String.format(Locale.ROOT, "%,.0f records/s", kafkaOnly), "same run, same broker");
        return Math.min(postgres, kafkaOnly);
    }

    // ------------------------------------------------------------------ 3. latency

    private void latency() throws Exception {
        System.out.println("3. due-to-effect latency at offered loads " + Arrays.toString(loads) + " jobs/s, 20 s each");
        stack.settle();
        List<Map<String, Object>> points = new ArrayList<>();
        try (Connection c = owner(); Statement s = c.createStatement()) {
            for (int load : loads) {
                int perTick = Math.max(1, load / 100);
                long before = scalar(s, "SELECT coalesce(max(id), 0) FROM jobs");
                long[] background0 = BenchStack.backgroundWork(s);
                // The first 3 s warm the pipeline to the new rate and are not counted.
                BenchSql.offer(s, String.format(INSERT_DUE, perTick), load, perTick, 3);
                long from = scalar(s, "SELECT coalesce(max(id), 0) FROM jobs");
                double offered = BenchSql.offer(s, String.format(INSERT_DUE, perTick), load, perTick, 17);
                long to = scalar(s, "SELECT coalesce(max(id), 0) FROM jobs");
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
                while (scalar(s, "SELECT count(*) FROM ledger WHERE job_id > " + before + " AND job_id <= " + to) < to - before
                        && System.nanoTime() < deadline) {
                    Thread.sleep(200);
                }
                double[] p = BenchSql.percentiles(s, "extract(epoch FROM (l.applied_at - j.due_at)) * 1000",
                        "FROM ledger l JOIN jobs j ON j.id = l.job_id WHERE l.job_id > " + from + " AND l.job_id <= " + to);
                boolean complete = p[0] == to - from;
                long[] background1 = BenchStack.backgroundWork(s);
                String background = (background1[0] - background0[0]) + " autovacuum/autoanalyze runs ended, "
                        + (background1[1] - background0[1]) + " checkpoints";
                Map<String, Object> point = new LinkedHashMap<>();
                point.put("offeredJobsPerSecond", load);
                point.put("achievedInsertRate", Math.round(offered));
                point.put("jobs", (long) p[0]);
                point.put("p50Ms", round(p[1]));
                point.put("p99Ms", round(p[2]));
                point.put("maxMs", round(p[3]));
                point.put("allApplied", complete);
                point.put("meanwhile", background);
                points.add(point);
                System.out.printf(Locale.ROOT, "   %,6d jobs/s offered (%,.0f inserted/s): p50 %8.1f ms  p99 %8.1f ms  max %8.1f ms  (%s)%s%n", load,
                        offered, p[1], p[2], p[3], background, complete ? "" : "  (not all applied within 2 min)");
                row("3. due-to-effect latency at " + String.format(Locale.ROOT, "%,d", load) + " jobs/s",
                        String.format(Locale.ROOT, "p50 %.1f / p99 %.1f / max %.1f ms", p[1], p[2], p[3]),
                        (load == 1000 ? "target p99 < 100 ms; " : "") + (offered < load * 0.95 ? "insert rate reached " + Math.round(offered) + "; " : "")
                                + "meanwhile " + background);
                Thread.sleep(2000);
            }
        }
        report.put("latency", points);
        writeChart(points);
    }

    /** {@code {a=1, b=2}} as {@code a 1, b 2}, for a table cell. */
    private static String listing(Map<String, ?> values) {
        return values.toString().replaceAll("[{}]", "").replace("=", " ");
    }

    private static double round(double v) {
        return BenchStack.round(v);
    }

    // ------------------------------------------------------------------ 4. failover

    private void failover() throws Exception {
        long leaseMs = 10_000; // the services run with the default LEASE_DURATION
        System.out.println("4. failover, " + trials + " trials each, with 200 jobs/s due now; lease " + leaseMs + " ms");
        AtomicBoolean stop = new AtomicBoolean();
        Thread background = new Thread(() -> {
            try (Connection c = owner(); Statement s = c.createStatement()) {
                while (!stop.get()) {
                    s.executeUpdate(String.format(INSERT_DUE, 2));
                    Thread.sleep(10);
                }
            } catch (Exception e) {
                System.err.println("background load: " + e);
            }
        }, "e2e-background");
        background.start();
        try {
            if (phase("failover")) {
                dispatcherFailover();
            }
            consumerFailover();
        } finally {
            stop.set(true);
            background.join();
        }
    }

    /** SIGKILL, then SIGTERM, of the dispatcher leader, {@code trials} times each. */
    private void dispatcherFailover() throws Exception {
        long leaseMs = 10_000; // the services run with the default LEASE_DURATION
        List<Double> kill = new ArrayList<>();
        List<Double> term = new ArrayList<>();
        for (int i = 0; i < trials; i++) {
            kill.add(takeover(true));
            System.out.printf(Locale.ROOT, "   SIGKILL trial %d: %.0f ms%n", i + 1, kill.get(i));
        }
        for (int i = 0; i < trials; i++) {
            term.add(takeover(false));
            System.out.printf(Locale.ROOT, "   SIGTERM trial %d: %.0f ms%n", i + 1, term.get(i));
        }
        report.put("leaseDurationMs", leaseMs);
        report.put("failoverSigkillMs", kill);
        report.put("failoverSigtermMs", term);
        row("4. SIGKILL of the leader to the new leader's first job (each trial starts once every replica reports ready)", summary(kill), "lease " + leaseMs + " ms (the floor); target < " + (leaseMs + 1000));
        row("4. SIGTERM of the leader to the new leader's first job (each trial starts once every replica reports ready)", summary(term), "target p99 < 200 ms");
    }

    /**
     * A second consumer joins the group for this part; each trial stops one of the two and times the
     * first effect from the partitions it held. The second consumer leaves again afterwards, so the
     * idle phase measures the same services as before.
     */
    private void consumerFailover() throws Exception {
        long sessionMs = dev.fencedjobs.consumer.GroupMembership.DEFAULT_SESSION_TIMEOUT.toMillis();
        stack.start("consumer-2", "consumer", "bench_consumer", Map.of("HTTP_PORT", Integer.toString(consumerPorts.get("consumer-2"))));
        List<String> resources = new ArrayList<>();
        for (int i = 0; i < RESOURCES; i++) {
            resources.add("account-" + i);
        }
        ConsumerFailover consumers = new ConsumerFailover(new ConsumerFailover.Services() {
            @Override
            public ServiceProcess get(String name) {
                return services.get(name);
            }

            @Override
            public void restart(String name) {
                stack.restart(name);
            }

            @Override
            public Connection owner() throws SQLException {
                return EndToEndBenchmark.this.owner();
            }
        }, consumerPorts, TOPIC, PARTITIONS, resources);
        try {
            List<Double> kill = consumers.trials(trials, true);
            for (int i = 0; i < kill.size(); i++) {
                System.out.printf(Locale.ROOT, "   consumer SIGKILL trial %d: %.0f ms%n", i + 1, kill.get(i));
            }
            List<Double> term = consumers.trials(trials, false);
            for (int i = 0; i < term.size(); i++) {
                System.out.printf(Locale.ROOT, "   consumer SIGTERM trial %d: %.0f ms%n", i + 1, term.get(i));
            }
            report.put("consumerSessionTimeoutMs", sessionMs);
            report.put("consumerFailoverSigkillMs", kill);
            report.put("consumerFailoverSigtermMs", term);
            row("4. SIGKILL of one of two consumers to the first effect from its partitions", summary(kill),
                    "CONSUMER_SESSION_TIMEOUT " + sessionMs + " ms (the floor), then a rebalance");
            row("4. SIGTERM of one of two consumers to the first effect from its partitions", summary(term),
                    "it leaves the group at once");
        } finally {
            ServiceProcess second = services.remove("consumer-2");
            second.terminate();
            second.waitFor();
        }
    }

    /** Stops the dispatcher leader and returns ms from the signal to the first job its successor completed. */
    private double takeover(boolean sigkill) throws Exception {
        // Each trial starts once every replica reports ready (ops server up, the dispatcher's warm-up
        // over), so that it measures a takeover by a replica that is really following.
        stack.awaitAllReady(Duration.ofSeconds(60));
        String leaderName = null;
        long token = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (leaderName == null) {
            try (Connection c = owner()) {
                java.util.Optional<dev.fencedjobs.db.LeaseRow> lease = dev.fencedjobs.db.LeaseRow.live(c, "scheduler");
                if (lease.isPresent()) {
                    long pid = lease.get().holderPid();
                    token = lease.get().token();
                    for (Map.Entry<String, ServiceProcess> e : services.entrySet()) {
                        if (e.getValue().pid() == pid && e.getValue().isAlive()) {
                            leaderName = e.getKey();
                        }
                    }
                }
            }
            if (leaderName == null) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("no live dispatcher leader");
                }
                Thread.sleep(100);
            }
        }
        long outboxBefore = scalar("SELECT coalesce(max(id), 0) FROM outbox");
        ServiceProcess leader = services.get(leaderName);
        long signalledAt = System.currentTimeMillis();
        if (sigkill) {
            leader.kill();
        } else {
            leader.terminate();
        }
        long first = 0;
        while (first == 0) {
            first = scalar("SELECT coalesce((extract(epoch FROM min(completed_at)) * 1000)::bigint, 0) FROM outbox WHERE id > " + outboxBefore
                    + " AND fencing_token > " + token);
            Thread.sleep(20);
            if (System.currentTimeMillis() - signalledAt > 60_000) {
                throw new IllegalStateException("no takeover within 60 s");
            }
        }
        if (!sigkill) {
            leader.waitFor();
        }
        stack.restart(leaderName);
        return first - signalledAt;
    }

    private static String summary(List<Double> ms) {
        double[] sorted = ms.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        double p50 = sorted[(int) Math.ceil(0.5 * sorted.length) - 1];
        double p99 = sorted[(int) Math.ceil(0.99 * sorted.length) - 1];
        return String.format(Locale.ROOT, "min %.0f / p50 %.0f / p99 %.0f / max %.0f ms (%d trials)", sorted[0], p50, p99, sorted[sorted.length - 1],
                sorted.length);
    }

    // ------------------------------------------------------------------ 5. idle

    private void idle() throws Exception {
        System.out.println("5. idle services, " + idleSeconds + " s");
        BenchStack.waitFor("the system to drain", () -> scalar("SELECT count(*) FROM jobs WHERE state = 'pending'") == 0
                && scalar("SELECT count(*) FROM outbox_unpublished") == 0, Duration.ofMinutes(2));
        Thread.sleep(5_000);
        Map<String, Double> perSecond = new LinkedHashMap<>();
        try (Connection c = owner(); Statement s = c.createStatement()) {
            String leaderPid;
            leaderPid = Long.toString(dev.fencedjobs.db.LeaseRow.of(c, "scheduler").orElseThrow().holderPid());
            s.execute("SELECT pg_stat_statements_reset()");
            long start = System.nanoTime();
            Thread.sleep(idleSeconds * 1000L);
            double elapsed = (System.nanoTime() - start) / 1e9;
            for (String name : List.of("dispatcher-1", "dispatcher-2", "relay", "consumer")) {
                String role = "bench_" + name.replace('-', '_');
                long calls = scalar(s, "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements st JOIN pg_roles r ON r.oid = st.userid"
                        + " WHERE r.rolname = '" + role + "'");
                String label = name.startsWith("dispatcher")
                        ? name + (Long.toString(services.get(name).pid()).equals(leaderPid) ? " (leader)" : " (follower)") : name;
                perSecond.put(label, calls / elapsed);
            }
        }
        report.put("idleStatementsPerSecond", perSecond);
        StringBuilder sb = new StringBuilder();
        perSecond.forEach((k, v) -> sb.append(sb.length() == 0 ? "" : ", ").append(k).append(' ').append(String.format(Locale.ROOT, "%.2f", v)));
        row("5. idle statements/s per service", sb.toString(), "target < 1 each");
    }

    // ------------------------------------------------------------------ output

    private void row(String what, String measured, String against) {
        table.add("| " + what + " | " + measured + " | " + against + " |");
    }

    private void write() throws Exception {
        Files.createDirectories(out);
        StringBuilder md = new StringBuilder();
        md.append("# End-to-end benchmark\n\n");
        md.append("`java -jar benchmarks/target/fenced-jobs-benchmarks.jar e2e` on ").append(report.get("machine")).append("\n\n");
        md.append("| measure | result | against |\n|---|---|---|\n");
        table.forEach(r -> md.append(r).append('\n'));
        md.append("\n![due-to-effect latency against offered load](e2e-latency.svg)\n");
        Files.writeString(out.resolve("e2e.md"), md.toString(), StandardCharsets.UTF_8);
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(out.resolve("e2e.json").toFile(), report);
        System.out.println();
        System.out.println(md);
        System.out.println("Written: " + out.resolve("e2e.md") + ", " + out.resolve("e2e.json") + ", " + out.resolve("e2e-latency.svg"));
    }

    /** A small SVG line chart: p50, p99 and max latency (log scale) against offered load. */
    private void writeChart(List<Map<String, Object>> points) throws Exception {
        int w = 640;
        int h = 400;
        int left = 70;
        int right = 20;
        int top = 40;
        int bottom = 60;
        double maxLoad = points.stream().mapToDouble(p -> ((Number) p.get("offeredJobsPerSecond")).doubleValue()).max().orElse(1);
        double maxMs = points.stream().mapToDouble(p -> ((Number) p.get("maxMs")).doubleValue()).max().orElse(10);
        double logMin = 0; // 1 ms
        double logMax = Math.ceil(Math.log10(Math.max(10, maxMs)));
        StringBuilder svg = new StringBuilder();
        svg.append("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"").append(w).append("\" height=\"").append(h)
                .append("\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
        svg.append("<text x=\"").append(w / 2).append("\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">Due-to-effect latency against offered load</text>\n");
        for (double e = logMin; e <= logMax; e++) {
            double y = top + (h - top - bottom) * (1 - (e - logMin) / (logMax - logMin));
            svg.append(String.format(Locale.ROOT, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", left, w - right, y, y));
            svg.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s ms</text>%n", left - 6, y + 4,
                    String.format(Locale.ROOT, "%,.0f", Math.pow(10, e))));
        }
        for (Map<String, Object> p : points) {
            double load = ((Number) p.get("offeredJobsPerSecond")).doubleValue();
            double x = left + (w - left - right) * load / maxLoad;
            svg.append(String.format(Locale.ROOT, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#eee\"/>", x, x, top, h - bottom));
            svg.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%,.0f</text>%n", x, h - bottom + 16, load));
        }
        svg.append("<text x=\"").append((left + w - right) / 2).append("\" y=\"").append(h - 20)
                .append("\" text-anchor=\"middle\">offered load, jobs/s (due at once, inserted with SQL)</text>\n");
        String[][] series = {{"p50Ms", "#1f77b4", "p50"}, {"p99Ms", "#d62728", "p99"}, {"maxMs", "#7f7f7f", "max"}};
        int legend = 0;
        for (String[] s : series) {
            StringBuilder path = new StringBuilder();
            for (Map<String, Object> p : points) {
                double load = ((Number) p.get("offeredJobsPerSecond")).doubleValue();
                double ms = Math.max(1, ((Number) p.get(s[0])).doubleValue());
                double x = left + (w - left - right) * load / maxLoad;
                double y = top + (h - top - bottom) * (1 - (Math.log10(ms) - logMin) / (logMax - logMin));
                path.append(path.length() == 0 ? "M" : " L").append(String.format(Locale.ROOT, "%.1f %.1f", x, y));
                svg.append(String.format(Locale.ROOT, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", x, y, s[1]));
            }
            svg.append("\n<path d=\"").append(path).append("\" fill=\"none\" stroke=\"").append(s[1]).append("\" stroke-width=\"2\"/>\n");
            svg.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>%n", left + 10 + 50 * legend++, top + 14, s[1], s[2]));
        }
        svg.append("</svg>\n");
        Files.createDirectories(out);
        Files.writeString(out.resolve("e2e-latency.svg"), svg.toString(), StandardCharsets.UTF_8);
    }

    // ------------------------------------------------------------------ helpers
}
