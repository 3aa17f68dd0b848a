package dev.fencedjobs.chaos;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * The asynchronous failover of {@link AsyncFailover}: the jobs the old primary took with it are
 * lost, but every job the promoted database holds gets exactly one effect of its own, every id it
 * handed out again is reported, and no token is issued twice.
 */
class AsyncFailoverIT {

    @Test
    void everyJobThePromotedDatabaseHoldsGetsOneEffectOfItsOwnAndTheReuseIsReported() throws Exception {
        AsyncFailover.Figures f = AsyncFailover.run(Duration.ofSeconds(4), Duration.ofSeconds(6));
        System.out.println(f.summary());

        assertThat(f.lost())
                .as("acknowledged jobs lost with the old primary: the scenario did cut replication")
                .isPositive();
        assertThat(f.idsReissued())
                .as("ids the promoted database handed out again")
                .isPositive();
        assertThat(f.withoutOwnEffect()).as(f.summary()).isZero();
        assertThat(f.withSeveralOwnEffects()).as(f.summary()).isZero();
        assertThat(f.jobIdReusesReported()).as("each reissued id reported once").isEqualTo(f.idsReissued());
        assertThat(f.tokensReissued()).as(f.summary()).isZero();
        assertThat(f.lowestTokenAfterPromotion())
                .as("the first token after the promotion is above every token before it")
                .isGreaterThan(f.highestTokenLost())
                .isEqualTo((1L << 32) + 1);
    }
}
