package dev.fencedjobs.bench;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.PrintWriter;
import java.io.StringWriter;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/** The benchmarks' command lines: help prints usage and runs nothing; a bad option is a one-line error and exit code 2. */
class BenchCommandLineTest {

    private record Run(int code, String out, String err) {}

    private static Run run(String... args) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        CommandLine cli = Bench.commandLine();
        cli.setOut(new PrintWriter(out));
        cli.setErr(new PrintWriter(err));
        int code = cli.execute(args);
        return new Run(code, out.toString(), err.toString());
    }

    @Test
    void e2eHelpPrintsItsUsageAndRunsNothing() {
        Run help = run("e2e", "--help");
        assertThat(help.code()).isZero();
        assertThat(help.out())
                .contains(
                        "Usage: fenced-jobs-benchmarks e2e",
                        "--trials=<trials>",
                        "failover trials of each kind",
                        "Default: 10",
                        "--phases=<phases>");
        assertThat(help.err()).isEmpty();
    }

    @Test
    void everyBenchmarkHasHelp() {
        for (String benchmark : new String[] {"dispatcher", "relay", "consumer", "e2e", "soak", "shards"}) {
            Run help = run(benchmark, "--help");
            assertThat(help.code()).as(benchmark).isZero();
            assertThat(help.out()).as(benchmark).contains("Usage: fenced-jobs-benchmarks " + benchmark);
        }
        assertThat(run("--help").out()).contains("dispatcher", "relay", "consumer", "e2e", "soak", "shards");
    }

    @Test
    void badInputIsAUsageErrorThatNamesIt() {
        Run unknown = run("e2e", "--trails", "3");
        assertThat(unknown.code()).isEqualTo(2);
        assertThat(unknown.err()).contains("Unknown options: '--trails'", "Possible solutions: --trials");
        Run notANumber = run("soak", "--minutes", "many");
        assertThat(notANumber.code()).isEqualTo(2);
        assertThat(notANumber.err()).contains("--minutes", "many");
        Run badAutovacuum = run("soak", "--autovacuum", "sometimes");
        assertThat(badAutovacuum.code()).isEqualTo(2);
        assertThat(badAutovacuum.err()).contains("MIGRATED", "DEFAULT");
        Run none = run();
        assertThat(none.code()).isEqualTo(2);
        assertThat(none.err()).contains("name a benchmark");
    }
}
