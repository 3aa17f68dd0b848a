package dev.fencedjobs.bench;

import dev.fencedjobs.db.Settings;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code java -jar fenced-jobs-benchmarks.jar <benchmark> [options]}; {@code --help} on each says what it measures and takes. */
@Command(
        name = "fenced-jobs-benchmarks",
        scope = CommandLine.ScopeType.INHERIT,
        mixinStandardHelpOptions = true,
        version = "fenced-jobs benchmarks 0.1.0-SNAPSHOT",
        subcommands = {
            Bench.Dispatcher.class,
            Bench.Policy.class,
            Bench.Relay.class,
            Bench.Consumer.class,
            Bench.EndToEnd.class,
            Bench.Soak.class,
            Bench.Shards.class
        },
        description = "Benchmarks that print figures (see docs/performance.md). Each starts its own real servers.")
public final class Bench implements Callable<Integer> {

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    private Bench() {}

    public static void main(String[] args) {
        System.exit(commandLine().execute(args));
    }

    /** The parser, for the tests: {@code execute} returns the exit code (2 for a usage error). */
    static CommandLine commandLine() {
        return new CommandLine(new Bench()).setCaseInsensitiveEnumValuesAllowed(true);
    }

    @Override
    public Integer call() {
        throw new CommandLine.ParameterException(
                spec.commandLine(), "name a benchmark: dispatcher, policy, relay, consumer, e2e, soak or shards");
    }

    @Command(
            name = "dispatcher",
            description = {
                "One dispatcher leader against PostgreSQL: throughput draining a backlog, latency at a steady rate, idle statements.",
                "Takes the system properties -Dbacklog=200000 -Drate=500 -Dseconds=30 -DidleSeconds=60."
            })
    static final class Dispatcher implements Callable<Integer> {
        @Override
        public Integer call() throws Exception {
            DispatcherBenchmark.main(new String[0]);
            return 0;
        }
    }

    @Command(
            name = "policy",
            description = {
                "The dispatch policy beside the plain path: throughput with 1,000 limited keys, and a small tenant's latency behind a large backlog.",
                "Takes the system properties -Dbacklog=200000 -Drounds=2 -DbigBacklog=1000000 -DsmallRate=20 -DsmallSeconds=20."
            })
    static final class Policy implements Callable<Integer> {
        @Override
        public Integer call() throws Exception {
            PolicyBenchmark.main(new String[0]);
            return 0;
        }
    }

    @Command(name = "relay", description = "The relay publishing an outbox backlog to an in-JVM broker.")
    static final class Relay implements Callable<Integer> {
        @Override
        public Integer call() throws Exception {
            RelayBenchmark.main(new String[0]);
            return 0;
        }
    }

    @Command(name = "consumer", description = "The consumer applying records from an in-JVM broker.")
    static final class Consumer implements Callable<Integer> {
        @Override
        public Integer call() throws Exception {
            ConsumerBenchmark.main(new String[0]);
            return 0;
        }
    }

    @Command(
            name = "e2e",
            showDefaultValues = true,
            description = {
                "The whole pipeline as separate processes: throughput beside its bound, due-to-effect latency at offered loads,",
                "failover of the dispatcher and the relay (fast path, lease, partition) and of the consumer, and the idle statements. Writes e2e.md and e2e.json to --out.",
                "-Dshards=N runs the stack with N shards (docs/shards.md); 1 by default."
            })
    static final class EndToEnd implements Callable<Integer> {
        @Option(names = "--seconds", defaultValue = "20", description = "length of each throughput window")
        int seconds;

        @Option(names = "--trials", defaultValue = "10", description = "failover trials of each kind")
        int trials;

        @Option(names = "--idle-seconds", defaultValue = "60", description = "length of the idle phase")
        int idleSeconds;

        @Option(
                names = "--loads",
                split = ",",
                defaultValue = "100,500,1000,2000,4000,8000,12000",
                description = "offered loads of the latency phase, jobs/s")
        int[] loads;

        @Option(
                names = "--phases",
                defaultValue = "all",
                description =
                        "all (every phase but tracing-side-by-side, shard-kill and reshard), or some of throughput,latency,failover,consumer-failover,shard-kill,reshard,signatures,tracing,tracing-side-by-side,idle; shard-kill and reshard need -Dshards=2 or more")
        String phases;

        @Option(
                names = "--signature-rounds",
                defaultValue = "2",
                description = "rounds of the signatures phase, each one unsigned and one signed window (A B B A...)")
        int signatureRounds;

        @Option(
                names = "--tracing-rounds",
                defaultValue = "2",
                description = "rounds of the tracing phase, each one window per side (A B C C B A...)")
        int tracingRounds;

        @Option(
                names = "--side-by-side-windows",
                defaultValue = "3",
                description = "windows each way of each round (--tracing-rounds) of the tracing phase side by side")
        int sideBySideWindows;

        @Option(
                names = "--tracing-base",
                description =
                        "a build from before tracing (a repository with its jars built), for the tracing phase's comparison")
        Path tracingBase;

        @Option(
                names = "--bound-repetitions",
                defaultValue = "3",
                description = "windows of the PostgreSQL bound, each after the server settled; the median counts")
        int boundRepetitions;

        @Option(
                names = "--shard-rate",
                defaultValue = "400",
                description = "jobs/s due now during shard-kill and reshard")
        int shardRate;

        @Option(names = "--out", defaultValue = "docs/benchmarks", description = "where the report goes")
        Path out;

        @Option(names = "--repo", defaultValue = ".", description = "the repository whose jars the services run")
        Path repo;

        @Option(names = "--service-log-level", defaultValue = "INFO", description = "the services' log level")
        String serviceLogLevel;

        @Override
        public Integer call() throws Exception {
            new EndToEndBenchmark(
                            repo,
                            out,
                            seconds,
                            trials,
                            idleSeconds,
                            loads,
                            phases,
                            serviceLogLevel,
                            signatureRounds,
                            boundRepetitions,
                            tracingRounds,
                            sideBySideWindows,
                            tracingBase,
                            shardRate)
                    .run();
            return 0;
        }
    }

    /** How the soak leaves autovacuum: as the migrations set it, or PostgreSQL's defaults. */
    enum Autovacuum {
        MIGRATED,
        DEFAULT
    }

    @Command(
            name = "shards",
            description = {
                "The dispatch stage with k shards: PostgreSQL alone completing a backlog of due jobs from k connections, one shard each,",
                "beside two dispatcher replicas sharing k shards on the same backlog. Takes -Dbacklog=200000 -Drounds=2 -Dshards=1,2,4,8."
            })
    static final class Shards implements Callable<Integer> {
        @Override
        public Integer call() throws Exception {
            ShardBoundBenchmark.run();
            return 0;
        }
    }

    @Command(
            name = "soak",
            showDefaultValues = true,
            description = {
                "A steady load for --minutes with retention on: latency per window, table sizes, WAL and the machine's load.",
                "Writes soak.md, soak.json and soak.svg to --out."
            })
    static final class Soak implements Callable<Integer> {
        @Option(names = "--minutes", defaultValue = "30", description = "how long the load runs")
        int minutes;

        @Option(
                names = "--warm-up-seconds",
                defaultValue = "60",
                description = "the unmeasured rise to the rate before the windows")
        int warmUpSeconds;

        @Option(names = "--window-seconds", defaultValue = "20", description = "length of each reported window")
        int windowSeconds;

        @Option(
                names = "--retention",
                defaultValue = "3m",
                description = "JOBS_RETENTION, OUTBOX_RETENTION and the consumer's")
        String retention;

        @Option(names = "--rate", defaultValue = "0", description = "jobs/s; 0: half the saturation, measured first")
        int rate;

        @Option(names = "--history", defaultValue = "0", description = "completed jobs kept throughout")
        long history;

        @Option(names = "--autovacuum", defaultValue = "migrated", description = "migrated or default")
        Autovacuum autovacuum;

        @Option(names = "--chart-from", description = "only draw soak.svg again from this soak.json")
        Path chartFrom;

        @Option(names = "--out", defaultValue = "docs/benchmarks", description = "where the report goes")
        Path out;

        @Option(names = "--repo", defaultValue = ".", description = "the repository whose jars the services run")
        Path repo;

        @Option(names = "--service-log-level", defaultValue = "INFO", description = "the services' log level")
        String serviceLogLevel;

        @Override
        public Integer call() throws Exception {
            if (chartFrom != null) {
                SoakBenchmark.redraw(chartFrom);
                return 0;
            }
            Duration parsed = Settings.parseDuration("--retention", retention);
            new SoakBenchmark(
                            repo,
                            out,
                            minutes,
                            warmUpSeconds,
                            windowSeconds,
                            parsed,
                            rate,
                            history,
                            autovacuum == Autovacuum.DEFAULT,
                            serviceLogLevel)
                    .run();
            return 0;
        }
    }
}
