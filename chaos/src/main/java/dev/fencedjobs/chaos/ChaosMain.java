package dev.fencedjobs.chaos;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code java -jar fenced-jobs-chaos.jar [options]}: the command line of the fault-injection suite. */
@Command(
        name = "fenced-jobs-chaos",
        mixinStandardHelpOptions = true,
        version = "fenced-jobs chaos 0.1.0-SNAPSHOT",
        showDefaultValues = true,
        description = {
            "Runs the fault-injection suite (see docs/fault-injection.md), or checks a recorded history again (--check).",
            "Exit code 0 when no invariant is violated, 1 otherwise, 2 on a usage error."
        })
public final class ChaosMain implements Callable<Integer> {

    private static final ChaosRun.Options DEFAULTS = ChaosRun.Options.defaults();

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Option(names = "--seconds", description = "how long faults are injected (every kind is injected at least once)")
    long seconds = DEFAULTS.seconds();

    @Option(
            names = "--seed",
            description = "the fault schedule's seed (default: random, printed first)",
            showDefaultValue = CommandLine.Help.Visibility.NEVER)
    long seed = DEFAULTS.seed();

    @Option(names = "--rate", description = "jobs inserted per second")
    int rate = DEFAULTS.rate();

    @Option(names = "--lease", paramLabel = "MS", description = "the services' lease duration in milliseconds")
    long leaseMillis = DEFAULTS.leaseMillis();

    @Option(names = "--drain-seconds", description = "how long the system may take to drain after the faults")
    long drainSeconds = DEFAULTS.drainTimeout().toSeconds();

    @Option(
            names = "--brokers",
            description = "Kafka brokers, separate processes: 3 (replication 3, min.insync.replicas 2) or 1")
    int brokers = DEFAULTS.brokers();

    @Option(
            names = "--faults",
            paramLabel = "K,K",
            description = "only these kinds of fault (default: all), by the labels in the summary line;"
                    + " kill-broker and move-leaders need 3 brokers",
            showDefaultValue = CommandLine.Help.Visibility.NEVER)
    String faults;

    @Option(names = "--out", description = "service and server logs")
    Path out = DEFAULTS.out();

    @Option(names = "--record", paramLabel = "FILE", description = "save the history (gzip JSON) for --check")
    Path record;

    @Option(names = "--repo", description = "the checkout whose */target jars to run")
    Path repo = DEFAULTS.repo();

    @Option(names = "--check", paramLabel = "FILE", description = "check a recorded history again instead of running")
    Path check;

    public static void main(String[] args) {
        System.exit(commandLine().execute(args));
    }

    static CommandLine commandLine() {
        return new CommandLine(new ChaosMain());
    }

    @Override
    public Integer call() throws Exception {
        ChaosRun.Options options;
        try {
            List<ChaosRun.Kind> kinds = faults == null ? ChaosRun.Kind.all(brokers) : ChaosRun.kinds(faults);
            options = new ChaosRun.Options(
                    seconds,
                    seed,
                    rate,
                    leaseMillis,
                    out,
                    record,
                    repo,
                    Duration.ofSeconds(drainSeconds),
                    kinds,
                    brokers);
        } catch (IllegalArgumentException e) {
            throw new CommandLine.ParameterException(spec.commandLine(), e.getMessage());
        }
        Checker.Result result;
        if (check != null) {
            result = Checker.check(History.load(check));
            ChaosRun.report(result);
        } else {
            result = new ChaosRun(options).run();
        }
        return result.ok() ? 0 : 1;
    }
}
