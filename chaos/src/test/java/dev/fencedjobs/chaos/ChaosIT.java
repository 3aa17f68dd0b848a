package dev.fencedjobs.chaos;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * The short fault-injection run that every build makes: the packaged services as OS processes, a
 * real PostgreSQL primary with a synchronous standby, restarted once and failed over once (the
 * primary SIGKILLed, the standby promoted), and a replicated cluster of three Kafka brokers (separate
 * processes), every kind of fault at least once, one broker killed and the partition leaders
 * moved among them, rate-limited keys with a backlog, then the checker over everything the run
 * left. The seed is printed; rerun a failure with {@code java -jar chaos/target/fenced-jobs-chaos.jar
 * --seed <seed>}. Set {@code chaos.seed} to pin it, {@code chaos.brokers=1} for a single broker.
 */
class ChaosIT {

    @Test
    void everyInvariantHoldsUnderEveryKindOfFault() throws Exception {
        long seed = Long.getLong("chaos.seed", System.nanoTime() & 0xffffff);
        int brokers = Integer.getInteger("chaos.brokers", 3);
        String all = String.join(
                ",", ChaosRun.Kind.all(brokers).stream().map(k -> k.label).toList());
        ChaosRun.Options options = new ChaosRun.Options(
                Long.getLong("chaos.seconds", 60),
                seed,
                Integer.getInteger("chaos.rate", 200),
                5000,
                Path.of(System.getProperty("chaos.out", "target/chaos")),
                null,
                Path.of(System.getProperty("chaos.repo", "..")),
                Duration.ofMinutes(4),
                ChaosRun.kinds(System.getProperty("chaos.faults", all)),
                brokers);

        Checker.Result result = new ChaosRun(options).run();

        assertThat(result.violations()).as(result.summary()).isEmpty();
        assertThat(result.faults().keySet())
                .as("fault kinds injected")
                .containsAll(options.faults().stream().map(k -> k.label).toList());
        assertThat(result.scheduled()).as("jobs from schedules").isPositive();
        assertThat(result.completed())
                .isEqualTo(result.jobs())
                .isEqualTo(result.submitted() + result.scheduled())
                .isPositive();
        assertThat(result.staleRejected()).as("forged stale records rejected").isPositive();
        assertThat(result.deadLetters())
                .as("forged malformed records dead-lettered")
                .isPositive();
        assertThat(result.limitedJobs())
                .as("jobs under a rate limit (invariant 14)")
                .isPositive();
    }
}
