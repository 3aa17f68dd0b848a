package dev.fencedjobs.bench;

import dev.fencedjobs.testing.KafkaProcess;
import java.nio.file.Path;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;

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
 *   <li>peak RSS of each service during the throughput run, with the heap setting used;
 *   <li>what record signatures cost: throughput signed and unsigned, alternating ({@link SignaturesPhase});
 *   <li>what tracing costs: throughput with no SDK, with one, and before tracing, alternating; and two sides at once on
 *       two pipelines, swapped each round ({@link TracingPhase}).
 * </ol>
 *
 * It prints a table and writes {@code e2e.json}, {@code e2e.md} and {@code e2e-latency.svg}
 * ({@link E2eReport}). Each part is a class of its own: {@link ThroughputPhase}, {@link LatencyPhase},
 * {@link FailoverPhase}, {@link IdlePhase}; this one sets the stack up and runs the parts asked for.
 */
final class EndToEndBenchmark {

    private final Path repo;
    private final Path out;
    private final int windowSeconds;
    private final int trials;
    private final int idleSeconds;
    private final int[] loads;
    private final E2eReport report = new E2eReport();
    private BenchStack stack;
    /** Fixed ops ports of the consumers, whose {@code /status} the consumer failover reads. */
    private final Map<String, Integer> consumerPorts = new LinkedHashMap<>();

    private final String phases;
    private final String serviceLogLevel;
    private final int signatureRounds;
    private final int boundRepetitions;
    private final int tracingRounds;
    /** Windows each way of each round of the tracing phase side by side. */
    private final int sideBySideWindows;
    /** A build from before tracing, or null. */
    private final Path tracingBase;
    /** Jobs a second due now during the shard phases. */
    private final int shardRate;

    EndToEndBenchmark(
            Path repo,
            Path out,
            int windowSeconds,
            int trials,
            int idleSeconds,
            int[] loads,
            String phases,
            String serviceLogLevel,
            int signatureRounds,
            int boundRepetitions,
            int tracingRounds,
            int sideBySideWindows,
            Path tracingBase,
            int shardRate) {
        this.shardRate = shardRate;
        this.tracingRounds = tracingRounds;
        this.sideBySideWindows = sideBySideWindows;
        this.tracingBase = tracingBase == null ? null : tracingBase.toAbsolutePath();
        this.signatureRounds = signatureRounds;
        this.boundRepetitions = boundRepetitions;
        this.repo = repo;
        this.out = out;
        this.windowSeconds = windowSeconds;
        this.trials = trials;
        this.idleSeconds = idleSeconds;
        this.loads = loads;
        this.phases = phases;
        this.serviceLogLevel = serviceLogLevel;
    }

    /**
     * The embedded server's settings beside fsync and synchronous commit on
     * ({@code FJ_BENCH_POSTGRES_SETTINGS} may change them). A window writes over a gigabyte of
     * WAL: with the default {@code max_wal_size} of 1 GB two or three checkpoints land in each, at
     * different moments, with their full-page images; 4 GB, and as much kept for reuse, leaves one
     * at the same place in each. And the small tables that take an update per batch and per
     * resource (the fences, the relay's position) bloat between autovacuum's visits: with the
     * default {@code autovacuum_naptime} of a minute, the bound's 20 s windows ran at 25,000 jobs/s
     * without a visit and at 32,000 to 37,000 with one; every 5 s, each window gets its visits, and
     * five windows in one run were within 8 % of each other (docs/performance.md).
     */
    static final Map<String, String> SERVER_SETTINGS =
            Map.of("max_wal_size", "4GB", "min_wal_size", "4GB", "autovacuum_naptime", "5s");

    void run() throws Exception {
        long started = System.nanoTime();
        // A directory of this run's own: two runs at once (CI's lanes) must not write, or count spans in, each other's
        // logs.
        Path logs = Path.of(
                "target", "e2e-logs", Long.toString(ProcessHandle.current().pid()));
        System.out.println("Service logs in " + logs);
        stack = new BenchStack(repo, serviceLogLevel, logs, SERVER_SETTINGS);
        try {
            machine();
            if (phase("throughput")) {
                ThroughputPhase throughput = new ThroughputPhase(stack, report, windowSeconds);
                double bound = throughput.bound(boundRepetitions);
                setUp();
                double ours = throughput.throughput();
                report.row(
                        "1. end to end, SQL INSERT to effect row",
                        String.format(Locale.ROOT, "%,.0f jobs/s", ours),
                        "target 12,000; " + String.format(Locale.ROOT, "%.2f", ours / bound)
                                + " of the lower bound below");
                report.put("ratioToBound", ours / bound);
                throughput.memory();
            } else {
                setUp();
            }
            took("set-up", started);
            if (phase("latency")) {
                long t = System.nanoTime();
                new LatencyPhase(stack, report, loads, out).run();
                took("latency", t);
            }
            if (phase("failover") || phase("consumer-failover")) {
                long t = System.nanoTime();
                new FailoverPhase(stack, report, trials, phase("failover"), consumerPorts).run();
                took("failover", t);
            }
            if (named("shard-kill") || named("reshard")) { // not in "all": they need -Dshards= of 2 or more
                if (BenchStack.SHARDS < 2) {
                    throw new IllegalArgumentException("--phases shard-kill and reshard need -Dshards=2 or more");
                }
                long t = System.nanoTime();
                ShardFaultsPhase shardFaults =
                        new ShardFaultsPhase(stack, report, trials, shardRate, Duration.ofSeconds(3));
                if (named("shard-kill")) {
                    shardFaults.kill();
                }
                if (named("reshard")) {
                    shardFaults.reshard();
                }
                took("shard faults", t);
            }
            if (phase("signatures")) {
                long t = System.nanoTime();
                new SignaturesPhase(stack, report, new ThroughputPhase(stack, report, windowSeconds), signatureRounds)
                        .run();
                took("signatures", t);
            }
            if (phase("tracing")) {
                long t = System.nanoTime();
                new TracingPhase(
                                stack,
                                report,
                                new ThroughputPhase(stack, report, windowSeconds),
                                tracingRounds,
                                tracingBase)
                        .run();
                took("tracing", t);
            }
            if (named("tracing-side-by-side")) { // not in "all": a second pipeline, about 25 minutes
                long t = System.nanoTime();
                new TracingPhase(
                                stack,
                                report,
                                new ThroughputPhase(stack, report, windowSeconds),
                                tracingRounds,
                                tracingBase)
                        .sideBySide(sideBySideWindows);
                took("tracing-side-by-side", t);
            }
            if (phase("idle")) {
                long t = System.nanoTime();
                new IdlePhase(stack, report, idleSeconds).run();
                took("idle", t);
            }
        } finally {
            stack.close();
        }
        report.write(out);
    }

    /** How long a phase took, the stack's start and the throughput phase included in "set-up". */
    private static void took(String phase, long startedNanos) {
        System.out.printf(Locale.ROOT, "   (%s took %.0f s)%n", phase, (System.nanoTime() - startedNanos) / 1e9);
    }

    private boolean phase(String name) {
        return phases.equals("all") || named(name);
    }

    /** Whether {@code --phases} names this phase itself ("all" does not count). */
    private boolean named(String name) {
        return Arrays.asList(phases.split(",")).contains(name);
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
}
