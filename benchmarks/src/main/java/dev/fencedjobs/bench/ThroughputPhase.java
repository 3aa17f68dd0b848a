package dev.fencedjobs.bench;

import dev.fencedjobs.testing.ServiceProcess;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Parts 1, 2 and 6 of the end-to-end benchmark: throughput from a SQL INSERT of due jobs to the
 * consumer's effect row, sustained, with where the CPU went and the statements that took the most
 * database time; the bound it stands beside, the same SQL and Kafka work by plain JDBC and
 * kafka-clients ({@link PipelinedBound}); and each service's peak RSS during the run.
 */
final class ThroughputPhase {

    private final BenchStack stack;
    private final E2eReport report;
    private final int windowSeconds;
    private final Map<String, Long> peakRss = new LinkedHashMap<>();

    ThroughputPhase(BenchStack stack, E2eReport report, int windowSeconds) {
        this.stack = stack;
        this.report = report;
        this.windowSeconds = windowSeconds;
    }

    int windowSeconds() {
        return windowSeconds;
    }

    /**
     * The throughput phase's most warm-up for the services, where the others wait for their JIT
     * compilers up to {@code -DwarmUpMaxSeconds} (180 s): on two cores they take two minutes or more
     * to be quiet, and the whole phase is meant to answer in five.
     */
    static final long THROUGHPUT_WARM_UP_SECONDS = 60;

    /** The most a warm-up under load waits for quiet JIT compilers. */
    private long warmUpMaxSeconds = BenchStack.warmUpMaxSeconds();

    /** A sustained window's rate, and the CPU each component spent per job over it, in microseconds. */
    record Costed(double rate, Map<String, Long> cpuPerJob) {}

    /**
     * {@link #sustained} with the CPU per job of each component (clock ticks are 10 ms) over the
     * window, printed: where a cost lands.
     */
    Costed sustainedWithCpu() throws Exception {
        Map<String, Long> cpu0 = new TreeMap<>();
        Map<String, Long> perJob = new TreeMap<>();
        double rate = sustained(
                () -> cpu0.putAll(BenchStack.cpuTicksByComponent()),
                window ->
                        perJob.putAll(BenchStack.cpuMicrosecondsEach(cpu0, window.cpuTicksAtEnd(), window.effects())));
        System.out.println("   CPU per job, microseconds: " + perJob);
        return new Costed(rate, perJob);
    }

    /**
     * Inserts due jobs whenever fewer than 50,000 are between INSERT and effect, so the pipeline never
     * starves, and counts effect rows over the window after a warm-up.
     */
    double throughput() throws Exception {
        // What ran before (the bound's writes) checkpointed and vacuumed first, as for the bound.
        stack.settle();
        long flushes = Math.round(DiskFlushProbe.flushesPerSecond(2000));
        System.out.printf(Locale.ROOT, "   disk before the warm-up: %,d synced 8 KB writes a second%n", flushes);
        report.put("throughputDiskFlushesPerSecond", flushes);
        System.out.println("1. end-to-end throughput: " + windowSeconds
                + " s window after a warm-up under load (at least 15 s, until the JIT compilers are quiet, at most "
                + THROUGHPUT_WARM_UP_SECONDS + " s unless -DwarmUpMaxSeconds says otherwise)");
        warmUpMaxSeconds = Long.getLong("warmUpMaxSeconds", THROUGHPUT_WARM_UP_SECONDS);
        Map<String, Long> cpu0 = new LinkedHashMap<>();
        double rate = sustained(
                () -> {
                    cpu0.putAll(BenchStack.cpuTicksByComponent());
                    try (Connection c = stack.owner();
                            Statement s = c.createStatement()) {
                        s.execute("SELECT pg_stat_statements_reset()");
                    }
                },
                window -> {
                    Map<String, Double> cpuShare = BenchStack.cpuShare(cpu0, window.cpuTicksAtEnd(), window.seconds());
                    report.put("cpuShareDuringThroughputPercent", cpuShare);
                    List<String> top = new ArrayList<>();
                    try (Connection c = stack.owner();
                            Statement s = c.createStatement();
                            ResultSet r = s.executeQuery(
                                    "SELECT r.rolname, st.calls, round(st.total_exec_time::numeric / 1000, 1),"
                                            + " left(regexp_replace(st.query, '\\s+', ' ', 'g'), 90)"
                                            + " FROM pg_stat_statements st JOIN pg_roles r ON r.oid = st.userid ORDER BY st.total_exec_time DESC LIMIT 6")) {
                        while (r.next()) {
                            top.add(String.format(
                                    Locale.ROOT,
                                    "%-20s %8d calls %7.1f s  %s",
                                    r.getString(1),
                                    r.getLong(2),
                                    r.getDouble(3),
                                    r.getString(4)));
                        }
                    }
                    report.put("topStatementsByExecutionTime", top);
                    System.out.println("   statements that took the most database time in the window:");
                    top.forEach(t -> System.out.println("     " + t));
                    System.out.println("   share of the machine's CPU during the window, %: " + cpuShare);
                    report.row(
                            "1. where the CPU went during run 1 (% of "
                                    + Runtime.getRuntime().availableProcessors() + " cores)",
                            E2eReport.listing(cpuShare),
                            "from /proc/<pid>/stat");
                    for (Map.Entry<String, ServiceProcess> e : stack.services().entrySet()) {
                        peakRss.put(
                                e.getKey(), BenchStack.peakRssMb(e.getValue().pid()));
                    }
                });
        report.put("throughputJobsPerSecond", rate);
        return rate;
    }

    /**
     * A measured window: how long, how many effects were applied in it, and each component's CPU
     * ticks read as it ended ({@link BenchStack#cpuTicksByComponent}), before the queries that say
     * where the work waits: those took 3.6 to 3.9 s of PostgreSQL's CPU in one run (a count of the
     * view outbox_unpublished before migration V14), which a reading after them counted in the window.
     */
    record Window(double seconds, long effects, Map<String, Long> cpuTicksAtEnd) {}

    /** What a measurement does at the start of its window, and at its end (given the window) before the load stops. */
    interface Hook<T> {
        void run(T value) throws Exception;

        /** A hook with nothing to be given. */
        interface Start {
            void run() throws Exception;
        }
    }

    /**
     * Inserts due jobs whenever fewer than 50,000 are between INSERT and effect, so the pipeline never
     * starves, counts effect rows over the window after a warm-up, and waits for the backlog to drain.
     */
    double sustained(Hook.Start atStart, Hook<Window> atEnd) throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Exception> failure = new AtomicReference<>();
        Thread loader = stack.saturatingLoader("e2e-loader", stop, failure);
        loader.start();
        long a0;
        long a1;
        long t0;
        long t1;
        try {
            warmUp(warmUpMaxSeconds, List.of(stack));
            atStart.run();
            long wal0 = stack.scalar(BenchStack.WAL_BYTES);
            long checkpoints0 = stack.backgroundWork()[1];
            MachineCounters machine0 = MachineCounters.read();
            a0 = ledgerEnd(stack);
            t0 = System.nanoTime();
            Thread.sleep(windowSeconds * 1000L);
            a1 = ledgerEnd(stack);
            t1 = System.nanoTime();
            Map<String, Long> cpu1 = BenchStack.cpuTicksByComponent();
            MachineCounters machine1 = MachineCounters.read();
            System.out.printf(
                    Locale.ROOT,
                    "   in the window: %,.0f MB of WAL, %d checkpoint(s); %s%n",
                    (stack.scalar(BenchStack.WAL_BYTES) - wal0) / 1e6,
                    stack.backgroundWork()[1] - checkpoints0,
                    machine1.since(machine0));
            // Where the work waits at the window's end: which stage the others outran. Every shard's rows from its
            // own position (the view): shard 0's position alone said nothing of the others'.
            long unpublished = stack.scalar("SELECT count(*) FROM outbox_unpublished");
            System.out.printf(
                    Locale.ROOT,
                    "   waiting at the window's end: %,d due jobs for the dispatchers, %,d outbox rows for the relay%n",
                    stack.scalar("SELECT count(*) FROM jobs WHERE state = 'pending' AND due_at <= now()"),
                    unpublished);
            atEnd.run(new Window((t1 - t0) / 1e9, a1 - a0, cpu1));
        } finally {
            stop.set(true);
            loader.join();
        }
        if (failure.get() != null) {
            throw failure.get();
        }
        double rate = (a1 - a0) / ((t1 - t0) / 1e9);
        System.out.printf(Locale.ROOT, "   %,d effects in %.1f s: %,.0f jobs/s%n", a1 - a0, (t1 - t0) / 1e9, rate);
        awaitDrained();
        return rate;
    }

    /**
     * This stack's pipeline and {@code other}'s under load at once, each from a saturating loader of
     * its own: after one warm-up, {@code windows} back-to-back windows, each counting both pipelines'
     * effects over the same seconds, so that whatever slows the machine in a window slows both.
     * Returns each window's rates and the services' CPU per job, this stack's first, and waits for
     * both backlogs to drain.
     */
    List<Paired> sideBySide(ThroughputPhase other, int windows) throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Exception> failure = new AtomicReference<>();
        List<Thread> loaders = List.of(
                stack.saturatingLoader("e2e-loader-1", stop, failure),
                other.stack.saturatingLoader("e2e-loader-2", stop, failure));
        List<Paired> rates = new ArrayList<>();
        loaders.forEach(Thread::start);
        try {
            warmUp(warmUpMaxSeconds, List.of(stack, other.stack));
            long[] before = {ledgerEnd(stack), ledgerEnd(other.stack)};
            List<Map<String, Long>> cpuBefore = List.of(stack.serviceCpuTicks(), other.stack.serviceCpuTicks());
            long t0 = System.nanoTime();
            for (int w = 1; w <= windows && failure.get() == null; w++) {
                Thread.sleep(windowSeconds * 1000L);
                // Read in the same order at both ends of a window: both pipelines' windows are equally long.
                long[] after = {ledgerEnd(stack), ledgerEnd(other.stack)};
                List<Map<String, Long>> cpuAfter = List.of(stack.serviceCpuTicks(), other.stack.serviceCpuTicks());
                long t1 = System.nanoTime();
                double seconds = (t1 - t0) / 1e9;
                Paired window = new Paired(
                        (after[0] - before[0]) / seconds,
                        (after[1] - before[1]) / seconds,
                        cpuNanosEach(cpuBefore.get(0), cpuAfter.get(0), after[0] - before[0]),
                        cpuNanosEach(cpuBefore.get(1), cpuAfter.get(1), after[1] - before[1]));
                rates.add(window);
                System.out.printf(
                        Locale.ROOT,
                        "   window %d, %.1f s: pipeline 1 %,.0f jobs/s, pipeline 2 %,.0f jobs/s; 2 / 1: %.3f;"
                                + " services' CPU per job, ns: %s, %s%n",
                        w,
                        seconds,
                        window.rate1(),
                        window.rate2(),
                        window.rate2() / window.rate1(),
                        window.cpu1(),
                        window.cpu2());
                before = after;
                cpuBefore = cpuAfter;
                t0 = t1;
            }
        } finally {
            stop.set(true);
            for (Thread loader : loaders) {
                loader.join();
            }
        }
        if (failure.get() != null) {
            throw failure.get();
        }
        awaitDrained();
        other.awaitDrained();
        return rates;
    }

    /** One window side by side: each pipeline's rate, and each of its services' CPU per job in nanoseconds. */
    record Paired(double rate1, double rate2, Map<String, Long> cpu1, Map<String, Long> cpu2) {}

    /**
     * Each kind of service's CPU (the dispatchers together: which one leads changes) in nanoseconds
     * per job between two readings of {@link BenchStack#serviceCpuTicks} (ticks are 10 ms).
     */
    private static Map<String, Long> cpuNanosEach(Map<String, Long> before, Map<String, Long> after, long jobs) {
        Map<String, Long> ticks = new TreeMap<>();
        after.forEach((service, t) ->
                ticks.merge(service.replaceAll("-\\d+$", ""), t - before.getOrDefault(service, t), Long::sum));
        Map<String, Long> each = new TreeMap<>();
        ticks.forEach((kind, t) -> each.put(kind, Math.round(t * 1e7 / Math.max(1, jobs))));
        return each;
    }

    private static long ledgerEnd(BenchStack stack) {
        return stack.scalar("SELECT coalesce(max(id), 0) FROM ledger");
    }

    /** Waits until every job inserted so far has its effect: none pending, the outbox published, the ledger caught up. */
    void awaitDrained() throws InterruptedException {
        BenchStack.waitFor(
                "the backlog to drain",
                () -> stack.scalar("SELECT count(*) FROM jobs WHERE state = 'pending'") == 0
                        && stack.scalar("SELECT count(*) FROM outbox_unpublished") == 0
                        && ledgerEnd(stack) >= stack.scalar("SELECT count(*) FROM jobs"),
                Duration.ofMinutes(5));
    }

    /**
     * Under load for 15 s, then until the JIT compilers of the services and the broker are quiet
     * (under 5 % of a core over 5 s; at most 3 minutes, or {@code -DwarmUpMaxSeconds}, which the
     * short mode of CI sets): a service restarted for a measurement compiles for a minute or more
     * on two cores, and a window that starts before it is done measures the compiler as much as the
     * pipeline. Then, whatever that cap, until each pipeline delivers effects ({@link #untilFlowing}):
     * a window must not measure a consumer still joining its group or a relay still taking its lease.
     */
    private static void warmUp(long maxSeconds, List<BenchStack> stacks) throws InterruptedException {
        double compilers = BenchStack.untilCompilersQuiet(15, maxSeconds, BenchStack::compilerTicks);
        double flowing = untilFlowing(stacks);
        System.out.printf(
                Locale.ROOT,
                "   warmed up under load for %.0f s (JIT compilers quiet, or the most allowed: %d s; then %.0f s until effects flowed)%n",
                compilers + flowing,
                maxSeconds,
                flowing);
    }

    /**
     * Seconds until each stack's ledger has grown over one second: its whole pipeline, from the
     * dispatcher's lease to the consumer's partitions, is at work. At most {@link #FLOWING_WITHIN}, then
     * the phase fails: a pipeline that delivers nothing for that long under load is broken, not slow.
     */
    static double untilFlowing(List<BenchStack> stacks) throws InterruptedException {
        long started = System.nanoTime();
        long deadline = started + FLOWING_WITHIN.toNanos();
        for (BenchStack s : stacks) {
            long before = ledgerEnd(s);
            while (true) {
                Thread.sleep(1_000);
                long now = ledgerEnd(s);
                if (now > before) {
                    break;
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(
                            "no effect for " + FLOWING_WITHIN + " under load: the pipeline is stuck");
                }
                before = now;
            }
        }
        return (System.nanoTime() - started) / 1e9;
    }

    /** How long a pipeline under load may deliver nothing before a phase gives up on it. */
    static final Duration FLOWING_WITHIN = Duration.ofMinutes(2);

    void memory() {
        report.put("peakRssMb", peakRss);
        report.row(
                "6. peak RSS during run 1 (" + BenchStack.HEAP + ")",
                E2eReport.listing(peakRss) + " MB",
                "heap " + BenchStack.HEAP + " each");
    }

    /** How far apart a run's windows of the PostgreSQL bound may be, at most, for the bound to be a reference. */
    static final double BOUND_SPREAD = 0.15;

    /**
     * The lower of {@link PipelinedBound}'s two bounds, each measured with the machine to itself.
     * PostgreSQL's is the median of {@code repetitions} windows, each on a fresh database (dropped
     * after it) once the server has settled (autovacuum quiet, a checkpoint taken, so that what ran
     * before, such as db-scheduler's benchmark in compare-db-scheduler.sh, is not cleaned up inside
     * the window), the first after 10 s under load and the others after 5 s (this JVM's JIT is warm
     * by then). The spread of the windows (highest over lowest, less one) is printed beside {@link
     * #BOUND_SPREAD}: a bound that moves more than that within a run is no reference, whatever ran.
     * Each window prints what it shared the machine with. Kafka's bound, a quarter of PostgreSQL's
     * at most, is one window of at most 10 s.
     */
    double bound(int repetitions) throws Exception {
        System.out.println("2. the bound: PostgreSQL alone doing the same row writes, stages pipelined, "
                + windowSeconds + " s windows (the first after 10 s under load, the others after 5 s), " + repetitions
                + " time(s), each on a fresh database after the server settled");
        List<Double> windows = new ArrayList<>();
        List<Long> flushes = new ArrayList<>();
        for (int i = 0; i < repetitions; i++) {
            stack.settle();
            flushes.add(Math.round(DiskFlushProbe.flushesPerSecond(2000)));
            System.out.printf(
                    Locale.ROOT, "   disk before window %d: %,d synced 8 KB writes a second%n", i + 1, flushes.get(i));
            windows.add(PipelinedBound.postgresOnly(stack.pg(), i == 0 ? 10 : 5, windowSeconds));
        }
        report.put("boundDiskFlushesPerSecond", flushes);
        double postgres = BenchSql.median(windows);
        double low = windows.stream().mapToDouble(Double::doubleValue).min().orElseThrow();
        double high = windows.stream().mapToDouble(Double::doubleValue).max().orElseThrow();
        double spread = high / low - 1;
        System.out.printf(
                Locale.ROOT,
                "   PostgreSQL alone: median %,.0f per second, spread %,.0f to %,.0f (%d windows): %.1f %%, %s %.0f %%%n",
                postgres,
                low,
                high,
                windows.size(),
                100 * spread,
                spread <= BOUND_SPREAD ? "within" : "NOT within",
                100 * BOUND_SPREAD);
        report.put("boundPostgresOnlySpread", spread);
        int kafkaSeconds = Math.min(10, windowSeconds);
        System.out.println(
                "   Kafka alone doing the produce and the consume, " + kafkaSeconds + " s window after 5 s of warm-up");
        double kafkaOnly = PipelinedBound.kafkaOnly(stack.kafka(), 5, kafkaSeconds);
        report.put("boundPostgresOnlyJobsPerSecond", postgres);
        report.put("boundPostgresOnlyWindows", windows);
        report.put("boundKafkaOnlyRecordsPerSecond", kafkaOnly);
        report.row(
                "2. bound: PostgreSQL alone, the same row writes in the services' batch sizes, four stages at once",
                String.format(
                        Locale.ROOT,
                        "%,.0f jobs/s (median of %d; %,.0f to %,.0f)",
                        postgres,
                        windows.size(),
                        low,
                        high),
                "same run, same server, settled before each; no service, lease, LISTEN, purge or Kafka");
        report.row(
                "2. bound: Kafka alone, envelopes produced with the relay's settings and consumed with offset commits",
                String.format(Locale.ROOT, "%,.0f records/s", kafkaOnly),
                "same run, same broker");
        return Math.min(postgres, kafkaOnly);
    }
}
