package dev.fencedjobs.bench;

import dev.fencedjobs.testing.KafkaProcess;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * What tracing costs end to end: the sustained throughput of {@link ThroughputPhase} with every
 * service as it ships, no OpenTelemetry SDK installed (its spans are no-ops), beside the same with
 * the SDK installed in every service ({@link SdkAgent}: every span sampled, a batch span processor,
 * an in-memory exporter), and, when given a build from before tracing ({@code base}), beside that
 * build's services, all on one stack, {@code rounds} times each, in the order A B C C B A…, so that a
 * drift of the machine shows as spread, not as cost.
 */
final class TracingPhase {

    private enum Side {
        BEFORE("before tracing"),
        NO_SDK("no SDK (as shipped)"),
        SDK("SDK, in-memory exporter");

        final String label;

        Side(String label) {
            this.label = label;
        }
    }

    private static final Pattern EXPORTED = Pattern.compile(Pattern.quote(SdkAgent.EXPORTED) + "(\\d+)");

    private final BenchStack stack;
    private final E2eReport report;
    private final ThroughputPhase throughput;
    private final int rounds;
    /** A build from before tracing, or null. */
    private final Path base;

    TracingPhase(BenchStack stack, E2eReport report, ThroughputPhase throughput, int rounds, Path base) {
        this.stack = stack;
        this.report = report;
        this.throughput = throughput;
        this.rounds = rounds;
        this.base = base;
    }

    void run() throws Exception {
        List<Side> sides = new ArrayList<>(
                base == null ? List.of(Side.NO_SDK, Side.SDK) : List.of(Side.BEFORE, Side.NO_SDK, Side.SDK));
        System.out.println("8. tracing: sustained throughput "
                + sides.stream().map(s -> s.label).toList() + ", alternating, " + rounds + " rounds each"
                + (base == null ? "" : "; before tracing: the services of " + base));
        // Logs written from now on: the log directory outlives a run, and an earlier run's logs of more restarts stay
        // in it.
        FileTime started = FileTime.from(Instant.now().minusSeconds(1));
        String agent = "-javaagent:"
                + Path.of(SdkAgent.class
                        .getProtectionDomain()
                        .getCodeSource()
                        .getLocation()
                        .toURI());
        Map<Side, List<Double>> rates = new LinkedHashMap<>();
        Map<Side, List<Map<String, Long>>> cpu = new LinkedHashMap<>();
        sides.forEach(s -> {
            rates.put(s, new ArrayList<>());
            cpu.put(s, new ArrayList<>());
        });
        Side current = Side.NO_SDK;
        for (int round = 0; round < rounds; round++) {
            List<Side> order = new ArrayList<>(sides);
            if (round % 2 == 1) {
                Collections.reverse(order);
            }
            for (Side side : order) {
                throughput.awaitDrained();
                if (side != current || round == 0) {
                    configure(side, agent);
                    current = side;
                }
                System.out.println("   " + side.label + ":");
                ThroughputPhase.Costed measured = throughput.sustainedWithCpu();
                rates.get(side).add(measured.rate());
                cpu.get(side).add(measured.cpuPerJob());
            }
        }
        throughput.awaitDrained();
        configure(
                Side.NO_SDK,
                agent); // the later phases run the services as shipped; the SDK's services print their counts as they
        // stop
        long spans = exportedSpans(started);

        // Each round's sides ran back to back: their ratios within a round see the least drift of the machine.
        List<Double> sdkToNone = paired(rates.get(Side.SDK), rates.get(Side.NO_SDK));
        report.put("tracingSdkToNoSdkByRound", sdkToNone);
        System.out.println("   by round, SDK / no SDK: " + ratios(sdkToNone)
                + (base == null
                        ? ""
                        : "; no SDK / before tracing: "
                                + ratios(paired(rates.get(Side.NO_SDK), rates.get(Side.BEFORE)))));
        double none = BenchSql.median(rates.get(Side.NO_SDK));
        double sdk = BenchSql.median(rates.get(Side.SDK));
        rates.forEach((side, values) -> report.put("tracing " + side.label + " jobsPerSecond", values));
        cpu.forEach((side, values) -> report.put("tracing " + side.label + " cpuMicrosecondsPerJob", values));
        report.put("tracingSpansExported", spans);
        if (base != null) {
            double before = BenchSql.median(rates.get(Side.BEFORE));
            report.row(
                    "8. end to end, before tracing (" + base.getFileName() + ")",
                    String.format(
                            Locale.ROOT, "median %,.0f jobs/s of %s", before, E2eReport.rates(rates.get(Side.BEFORE))),
                    "same run, same stack, alternating");
            List<Double> noneToBefore = paired(rates.get(Side.NO_SDK), rates.get(Side.BEFORE));
            report.put("tracingNoSdkToBeforeByRound", noneToBefore);
            report.row(
                    "8. end to end, tracing, no SDK",
                    String.format(
                            Locale.ROOT, "median %,.0f jobs/s of %s", none, E2eReport.rates(rates.get(Side.NO_SDK))),
                    String.format(
                            Locale.ROOT,
                            "%.1f %% of before tracing (by round %s, median %.2f); target within 3 %%",
                            100 * none / before,
                            ratios(noneToBefore),
                            BenchSql.median(noneToBefore)));
            System.out.printf(
                    Locale.ROOT,
                    "   before tracing median %,.0f jobs/s, no SDK median %,.0f jobs/s: %.1f %%%n",
                    before,
                    none,
                    100 * none / before);
        } else {
            report.row(
                    "8. end to end, tracing, no SDK",
                    String.format(
                            Locale.ROOT, "median %,.0f jobs/s of %s", none, E2eReport.rates(rates.get(Side.NO_SDK))),
                    "no build from before tracing given (--tracing-base)");
        }
        report.row(
                "8. end to end, tracing, SDK with an in-memory exporter",
                String.format(Locale.ROOT, "median %,.0f jobs/s of %s", sdk, E2eReport.rates(rates.get(Side.SDK))),
                String.format(
                        Locale.ROOT,
                        "%.1f %% of no SDK (by round %s, median %.2f); %,d spans exported",
                        100 * sdk / none,
                        ratios(sdkToNone),
                        BenchSql.median(sdkToNone),
                        spans));
        System.out.printf(
                Locale.ROOT,
                "   no SDK median %,.0f jobs/s, SDK median %,.0f jobs/s: %.1f %%; %,d spans exported%n",
                none,
                sdk,
                100 * sdk / none,
                spans);
    }

    /**
     * The same comparison with the two sides at once instead of in turn: a second pipeline
     * ({@link BenchStack#sibling}: its own database and topic on the same server and broker), one side
     * on each, {@code windows} windows side by side, then the sides swapped; {@code rounds} times.
     * Before tracing against no SDK when given a build from before tracing, else no SDK against the
     * SDK. A window's ratio of the two rates sees the same machine on both sides, and the swap
     * cancels what differs between the two pipelines: a round's ratio is the geometric mean of its
     * two arrangements' medians.
     */
    void sideBySide(int windows) throws Exception {
        Side x = base == null ? Side.NO_SDK : Side.BEFORE;
        Side y = base == null ? Side.SDK : Side.NO_SDK;
        System.out.println("8b. tracing, side by side: " + y.label + " against " + x.label
                + ", two pipelines on one server and broker, " + rounds + " round(s) of " + windows
                + " windows each way" + (base == null ? "" : "; before tracing: the services of " + base));
        FileTime started = FileTime.from(Instant.now().minusSeconds(1));
        String agent = "-javaagent:"
                + Path.of(SdkAgent.class
                        .getProtectionDomain()
                        .getCodeSource()
                        .getLocation()
                        .toURI());
        List<Double> ratios = new ArrayList<>();
        List<Double> roundRatios = new ArrayList<>();
        Map<Side, List<Double>> rates = new LinkedHashMap<>();
        rates.put(x, new ArrayList<>());
        rates.put(y, new ArrayList<>());
        Map<Side, List<Map<String, Long>>> cpu = new LinkedHashMap<>();
        cpu.put(x, new ArrayList<>());
        cpu.put(y, new ArrayList<>());
        long spans;
        try (BenchStack second = stack.sibling("pipeline-2")) {
            second.setUp(Map.of(), KafkaProcess.freePort());
            ThroughputPhase secondThroughput = new ThroughputPhase(second, report, throughput.windowSeconds());
            for (int round = 1; round <= rounds; round++) {
                List<Double> arrangementMedians = new ArrayList<>();
                for (boolean swapped : new boolean[] {false, true}) {
                    Side first = swapped ? y : x;
                    Side other = swapped ? x : y;
                    throughput.awaitDrained();
                    secondThroughput.awaitDrained();
                    configure(stack, first, agent);
                    configure(second, other, agent);
                    // Both pipelines start their windows with every service up, not one still starting.
                    stack.awaitAllReady(Duration.ofMinutes(2));
                    second.awaitAllReady(Duration.ofMinutes(2));
                    stack.settle();
                    System.out.println(
                            "   round " + round + ": pipeline 1 " + first.label + ", pipeline 2 " + other.label);
                    List<Double> arrangement = new ArrayList<>();
                    for (ThroughputPhase.Paired window : throughput.sideBySide(secondThroughput, windows)) {
                        double rateX = swapped ? window.rate2() : window.rate1();
                        double rateY = swapped ? window.rate1() : window.rate2();
                        if (rateX == 0 || rateY == 0) {
                            System.out.println("   (a pipeline applied nothing in that window: not counted)");
                            continue;
                        }
                        rates.get(x).add(rateX);
                        rates.get(y).add(rateY);
                        cpu.get(x).add(swapped ? window.cpu2() : window.cpu1());
                        cpu.get(y).add(swapped ? window.cpu1() : window.cpu2());
                        arrangement.add(rateY / rateX);
                    }
                    if (arrangement.isEmpty()) {
                        throw new IllegalStateException("round " + round + ": no window had effects on both pipelines");
                    }
                    ratios.addAll(arrangement);
                    arrangementMedians.add(BenchSql.median(arrangement));
                }
                double roundRatio = Math.sqrt(arrangementMedians.get(0) * arrangementMedians.get(1));
                roundRatios.add(roundRatio);
                System.out.printf(
                        Locale.ROOT,
                        "   round %d: %s / %s: %.3f with %s on pipeline 2, %.3f on pipeline 1; geometric mean %.3f%n",
                        round,
                        y.label,
                        x.label,
                        arrangementMedians.get(0),
                        y.label,
                        arrangementMedians.get(1),
                        roundRatio);
            }
            throughput.awaitDrained();
            secondThroughput.awaitDrained();
            configure(stack, Side.NO_SDK, agent); // the later phases run the services as shipped
            second.stopServices(); // the SDK's services print their counts as they stop
            spans = exportedSpans(stack, started) + exportedSpans(second, started);
        }
        double ratio = BenchSql.median(roundRatios);
        String key = y == Side.NO_SDK ? "tracingSideBySideNoSdkToBefore" : "tracingSideBySideSdkToNoSdk";
        report.put(key + "ByRound", roundRatios);
        report.put(key + "ByWindow", ratios);
        rates.forEach((side, values) -> report.put("tracing side by side " + side.label + " jobsPerSecond", values));
        Map<Side, Map<String, Double>> cpuMedians = new LinkedHashMap<>();
        cpu.forEach((side, windowsCpu) -> {
            Map<String, List<Double>> byService = new TreeMap<>();
            windowsCpu.forEach(m -> m.forEach((service, nanos) ->
                    byService.computeIfAbsent(service, k -> new ArrayList<>()).add((double) nanos)));
            Map<String, Double> medians = new TreeMap<>();
            byService.forEach((service, values) -> medians.put(service, BenchSql.median(values)));
            cpuMedians.put(side, medians);
            report.put("tracing side by side " + side.label + " serviceCpuNanosecondsPerJob", windowsCpu);
        });
        System.out.println("   services' CPU per job, ns, medians of the windows: "
                + cpuMedians.entrySet().stream()
                        .map(e -> e.getKey().label + " " + e.getValue())
                        .toList());
        report.row(
                "8b. end to end, side by side, " + y.label + " / " + x.label,
                String.format(
                        Locale.ROOT,
                        "%.1f %% (median of %d rounds %s)",
                        100 * ratio,
                        roundRatios.size(),
                        precise(roundRatios)),
                String.format(
                        Locale.ROOT,
                        "each window's ratio %s; median %,.0f against %,.0f jobs/s a pipeline%s",
                        precise(ratios),
                        BenchSql.median(rates.get(y)),
                        BenchSql.median(rates.get(x)),
                        y == Side.SDK
                                ? String.format(Locale.ROOT, "; %,d spans exported", spans)
                                : "; target within 3 %"));
        System.out.printf(
                Locale.ROOT,
                "   side by side, %s / %s: %.1f %% (rounds %s; windows %s)%s%n",
                y.label,
                x.label,
                100 * ratio,
                precise(roundRatios),
                precise(ratios),
                y == Side.SDK ? String.format(Locale.ROOT, "; %,d spans exported", spans) : "");
    }

    /** Every service of the stack as {@code side} runs it: from the build before tracing, or this one with or without the SDK. */
    private void configure(Side side, String agent) {
        configure(stack, side, agent);
    }

    private void configure(BenchStack on, Side side, String agent) {
        Map<String, String> environment = Map.of("JAVA_TOOL_OPTIONS", side == Side.SDK ? agent : "");
        for (String name : on.serviceNames()) {
            on.reconfigure(name, environment, side == Side.BEFORE ? base : null);
        }
    }

    /** The spans the SDK's services exported, as each said when it stopped, in the logs written since {@code since}. */
    private long exportedSpans(FileTime since) throws IOException {
        return exportedSpans(stack, since);
    }

    private static long exportedSpans(BenchStack stack, FileTime since) throws IOException {
        long total = 0;
        try (Stream<Path> logs = Files.list(stack.logs())) {
            for (Path log : logs.filter(p -> p.toString().endsWith(".log")).toList()) {
                if (Files.getLastModifiedTime(log).compareTo(since) < 0) {
                    continue;
                }
                Matcher m = EXPORTED.matcher(Files.readString(log));
                while (m.find()) {
                    total += Long.parseLong(m.group(1));
                }
            }
        }
        return total;
    }

    /** {@code a[i] / b[i]} for each round i. */
    private static List<Double> paired(List<Double> a, List<Double> b) {
        List<Double> ratios = new ArrayList<>();
        for (int i = 0; i < Math.min(a.size(), b.size()); i++) {
            ratios.add(a.get(i) / b.get(i));
        }
        return ratios;
    }

    /** Ratios to three places: a side-by-side ratio resolves a percent. */
    private static String precise(List<Double> values) {
        return values.stream()
                .map(v -> String.format(Locale.ROOT, "%.3f", v))
                .toList()
                .toString();
    }

    private static String ratios(List<Double> values) {
        return values.stream()
                .map(v -> String.format(Locale.ROOT, "%.2f", v))
                .toList()
                .toString();
    }
}
