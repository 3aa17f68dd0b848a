package dev.fencedjobs.chaos;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.PrintWriter;
import java.io.StringWriter;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/** The chaos suite's command line: usage, usage errors (exit code 2), and --check of a recorded history (no servers). */
class ChaosMainTest {

    private record Run(int code, String out, String err) {}

    private static Run run(String... args) {
        StringWriter out = new StringWriter();
        StringWriter err = new StringWriter();
        CommandLine cli = ChaosMain.commandLine();
        cli.setOut(new PrintWriter(out));
        cli.setErr(new PrintWriter(err));
        return new Run(cli.execute(args), out.toString(), err.toString());
    }

    @Test
    void helpPrintsTheOptionsWithTheirDefaults() {
        Run help = run("--help");
        assertThat(help.code()).isZero();
        assertThat(help.out())
                .contains(
                        "Usage: fenced-jobs-chaos",
                        "--seconds=<seconds>",
                        "Default: 120",
                        "--faults=K,K",
                        "--check=FILE",
                        "Exit code 0 when no invariant is violated");
    }

    @Test
    void badOptionsAreUsageErrors() {
        Run fault = run("--faults", "kill-everything");
        assertThat(fault.code()).isEqualTo(2);
        assertThat(fault.err()).contains("unknown fault 'kill-everything'", "kill-dispatcher-leader");
        Run brokers = run("--brokers", "2");
        assertThat(brokers.code()).isEqualTo(2);
        assertThat(brokers.err()).contains("--brokers must be 1 or 3, got 2");
        Run needsThree = run("--brokers", "1", "--faults", "kill-broker");
        assertThat(needsThree.code()).isEqualTo(2);
        assertThat(needsThree.err()).contains("kill-broker needs --brokers 3");
        Run notANumber = run("--seconds", "ten");
        assertThat(notANumber.code()).isEqualTo(2);
        assertThat(notANumber.err()).contains("--seconds", "ten");
    }

    @Test
    void checkOfARecordedHistoryPasses() {
        Run check = run("--check", "src/test/resources/recorded-history.json.gz");
        assertThat(check.code()).isZero();
    }
}
