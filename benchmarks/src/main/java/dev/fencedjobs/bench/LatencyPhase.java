package dev.fencedjobs.bench;

import java.nio.file.Path;
import java.sql.Connection;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** Part 3 of the end-to-end benchmark: due-to-effect latency at several offered loads up to saturation, and its chart. */
final class LatencyPhase {

    private final BenchStack stack;
    private final E2eReport report;
    private final int[] loads;
    private final Path out;

    LatencyPhase(BenchStack stack, E2eReport report, int[] loads, Path out) {
        this.stack = stack;
        this.report = report;
        this.loads = loads;
        this.out = out;
    }

    /**
     * Offers the rate for 3 s, then on until the JIT compilers of the services and the broker are
     * quiet (as before the throughput phase's window), at most {@code -DwarmUpMaxSeconds} (180; CI's
     * short mode 5). Returns the seconds it took. A pipeline that has just run at full batches
     * compiles again for small ones: at 400 jobs/s right after the throughput phase, the services'
     * compiler threads took 62 % of a core of two, and the p50 of five 20 s windows in a row fell from
     * 87 to 27 ms with one shard and from 154 to 63 ms with two (docs/benchmarks/2026-12-07-shards.md).
     */
    private static double warmUp(Statement s, String insert, int load, int perTick) throws Exception {
        return BenchStack.untilCompilersQuiet(
                3,
                BenchStack.warmUpMaxSeconds(),
                BenchStack::compilerTicks,
                millis -> BenchSql.offerMillis(s, insert, load, perTick, millis));
    }

    void run() throws Exception {
        System.out.println("3. due-to-effect latency at offered loads " + Arrays.toString(loads)
                + " jobs/s, 17 s each after a warm-up at the rate until the JIT compilers are quiet");
        stack.settle();
        List<Map<String, Object>> points = new ArrayList<>();
        try (Connection c = stack.owner();
                Statement s = c.createStatement()) {
            for (int load : loads) {
                int perTick = Math.max(1, load / 100);
                long before = BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM jobs");
                long[] background0 = BenchStack.backgroundWork(s);
                String insert = String.format(BenchStack.INSERT_DUE, perTick);
                double warmUp = warmUp(s, insert, load, perTick);
                long from = BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM jobs");
                Map<String, Long> cpu0 = BenchStack.cpuTicksByComponent();
                long compilers0 = BenchStack.compilerTicks();
                long windowStarted = System.nanoTime();
                double offered = BenchSql.offer(s, insert, load, perTick, 17);
                double windowSeconds = (System.nanoTime() - windowStarted) / 1e9;
                Map<String, Double> cpuShare =
                        BenchStack.cpuShare(cpu0, BenchStack.cpuTicksByComponent(), windowSeconds);
                double compilersShare = BenchStack.cpuShare(BenchStack.compilerTicks() - compilers0, windowSeconds);
                long to = BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM jobs");
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
                while (BenchStack.scalar(
                                        s,
                                        "SELECT count(*) FROM ledger WHERE job_id > " + before + " AND job_id <= " + to)
                                < to - before
                        && System.nanoTime() < deadline) {
                    Thread.sleep(200);
                }
                double[] p = BenchSql.dueToEffect(s, "l.job_id > " + from + " AND l.job_id <= " + to);
                boolean complete = p[0] == to - from;
                // Where it goes: due to completed (the dispatcher), completed to applied (relay, Kafka, consumer).
                double[] dispatch = BenchSql.percentiles(
                        s,
                        "extract(epoch FROM (j.completed_at - j.due_at)) * 1000",
                        "FROM ledger l JOIN jobs j ON j.id = l.job_id WHERE l.job_id > " + from + " AND l.job_id <= "
                                + to);
                long[] background1 = BenchStack.backgroundWork(s);
                String background = (background1[0] - background0[0]) + " autovacuum/autoanalyze runs ended, "
                        + (background1[1] - background0[1]) + " checkpoints";
                Map<String, Object> point = new LinkedHashMap<>();
                point.put("offeredJobsPerSecond", load);
                point.put("achievedInsertRate", Math.round(offered));
                point.put("jobs", (long) p[0]);
                point.put("p50Ms", BenchStack.round(p[1]));
                point.put("p99Ms", BenchStack.round(p[2]));
                point.put("maxMs", BenchStack.round(p[3]));
                point.put("dueToCompletedP50Ms", BenchStack.round(dispatch[1]));
                point.put("dueToCompletedP99Ms", BenchStack.round(dispatch[2]));
                point.put("allApplied", complete);
                point.put("warmUpSeconds", BenchStack.round(warmUp));
                point.put("cpuSharePercent", cpuShare);
                point.put("jitCompilersSharePercent", compilersShare);
                point.put("meanwhile", background);
                points.add(point);
                System.out.printf(
                        Locale.ROOT,
                        "   %,6d jobs/s offered (%,.0f inserted/s): p50 %8.1f ms  p99 %8.1f ms  max %8.1f ms  (%s)%s%n",
                        load,
                        offered,
                        p[1],
                        p[2],
                        p[3],
                        background,
                        complete ? "" : "  (not all applied within 2 min)");
                System.out.printf(
                        Locale.ROOT,
                        "          of which due to completed: p50 %8.1f ms  p99 %8.1f ms; after %.0f s at this rate "
                                + "(the services' and the broker's JIT compilers quiet, or the most allowed)%n",
                        dispatch[1],
                        dispatch[2],
                        warmUp);
                System.out.println("          share of the machine's CPU while offered, %: " + cpuShare
                        + "; of it the services' and the broker's JIT compilers " + compilersShare);
                report.row(
                        "3. due-to-effect latency at " + String.format(Locale.ROOT, "%,d", load) + " jobs/s",
                        String.format(Locale.ROOT, "p50 %.1f / p99 %.1f / max %.1f ms", p[1], p[2], p[3]),
                        (load == 1000 ? "target p99 < 100 ms; " : "")
                                + (offered < load * 0.95 ? "insert rate reached " + Math.round(offered) + "; " : "")
                                + "meanwhile " + background);
                Thread.sleep(2000);
            }
        }
        report.put("latency", points);
        LatencyChart.write(out.resolve("e2e-latency.svg"), points);
    }
}
