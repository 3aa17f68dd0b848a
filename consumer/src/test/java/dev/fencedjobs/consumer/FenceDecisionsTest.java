package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.FenceDecisions.verdict;
import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.consumer.FenceDecisions.Claim;
import dev.fencedjobs.consumer.FenceDecisions.Fence;
import dev.fencedjobs.consumer.FenceDecisions.Tenure;
import dev.fencedjobs.consumer.FenceDecisions.Verdict;
import dev.fencedjobs.lease.FencingToken;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import org.junit.jupiter.api.Test;

/** Every outcome of the consumer's exactly-once decisions, without a database. */
class FenceDecisionsTest {

    private static final OffsetDateTime T0 = OffsetDateTime.of(2026, 12, 2, 10, 0, 0, 0, ZoneOffset.UTC);
    private static final Tenure A = new Tenure("dispatcher-a", T0);
    private static final Tenure B = new Tenure("dispatcher-b", T0.plusSeconds(30));

    private static FencingToken t(long value) {
        return FencingToken.of(value);
    }

    /** Token 5 applied from outbox id 100 up to 120, under tenure A. */
    private static final Fence FENCE = new Fence(t(5), 100, 120, A);

    @Test
    void applied_anEqualOrHigherTokenAboveEverythingApplied() {
        assertThat(verdict(false, Claim.NEW, FENCE, 121, t(5))).isEqualTo(Verdict.APPLIED);
        assertThat(verdict(false, Claim.NEW, FENCE, 121, t(6))).isEqualTo(Verdict.APPLIED);
        assertThat(verdict(false, Claim.NEW, Fence.NEW, 1, t(1)))
                .as("a resource never seen")
                .isEqualTo(Verdict.APPLIED);
    }

    @Test
    void aHigherTokenStartsTheFenceOverFromItsFirstRow() {
        Fence after = FENCE.after(90, t(6), B);
        assertThat(after).isEqualTo(new Fence(t(6), 90, 90, B));
        assertThat(verdict(false, Claim.NEW, FENCE, 90, t(6)))
                .as("after a failover the promoted database may hand out outbox ids already seen: not late")
                .isEqualTo(Verdict.APPLIED);
    }

    @Test
    void late_belowAnOutboxIdApplied_withoutAHigherToken() {
        assertThat(verdict(false, Claim.NEW, FENCE, 110, t(5))).isEqualTo(Verdict.LATE);
        assertThat(FENCE.after(110, t(5), A))
                .as("a late row lowers the token's first row, never the highest")
                .isEqualTo(FENCE);
        assertThat(FENCE.after(95, t(5), A)).isEqualTo(new Fence(t(5), 95, 120, A));
        assertThat(verdict(false, Claim.NEW, FENCE, 99, t(4)))
                .as("a lower token below where token 5 begins: a genuine row of the earlier tenure, late")
                .isEqualTo(Verdict.LATE);
        assertThat(FENCE.after(99, t(4), Tenure.UNKNOWN))
                .as("which moves no token")
                .isEqualTo(FENCE);
    }

    @Test
    void stale_aLowerTokenAboveWhereTheHighestBegins_orWhereThatIsNotKnown() {
        assertThat(verdict(false, Claim.NEW, FENCE, 101, t(4))).isEqualTo(Verdict.STALE);
        assertThat(verdict(false, Claim.NEW, FENCE, 130, t(4))).isEqualTo(Verdict.STALE);
        Fence firstNotKnown = new Fence(t(5), Fence.UNKNOWN_OUTBOX_ID, 120, A);
        assertThat(verdict(false, Claim.NEW, firstNotKnown, 1, t(4))).isEqualTo(Verdict.STALE);
        assertThat(firstNotKnown.after(121, t(5), A).tokenFirstOutboxId())
                .as("an unknown first row stays unknown")
                .isEqualTo(Fence.UNKNOWN_OUTBOX_ID);
    }

    @Test
    void duplicate_whateverTheFenceSays() {
        assertThat(verdict(false, Claim.SAME_JOB, FENCE, 121, t(5))).isEqualTo(Verdict.DUPLICATE);
        assertThat(verdict(false, Claim.SAME_JOB, FENCE, 101, t(4)))
                .as("a rejected job seen again")
                .isEqualTo(Verdict.DUPLICATE);
    }

    @Test
    void reused_anIdProcessedBeforeWithAnotherCreationTimeIsANewJob_unlessTheFenceRefusesIt() {
        assertThat(verdict(false, Claim.OTHER_JOB, FENCE, 121, t(5))).isEqualTo(Verdict.REUSED);
        assertThat(verdict(false, Claim.OTHER_JOB, FENCE, 101, t(4))).isEqualTo(Verdict.STALE);
    }

    @Test
    void waiting_behindARetryComesBeforeEverythingElse() {
        assertThat(verdict(true, Claim.NEW, FENCE, 121, t(5))).isEqualTo(Verdict.WAITING);
        assertThat(verdict(true, Claim.SAME_JOB, FENCE, 101, t(4))).isEqualTo(Verdict.WAITING);
    }

    @Test
    void theClaimOnAJobId() {
        assertThat(Claim.of(false, null, T0)).isEqualTo(Claim.NEW);
        assertThat(Claim.of(true, T0, T0.withOffsetSameInstant(ZoneOffset.ofHours(2))))
                .as("the same instant")
                .isEqualTo(Claim.SAME_JOB);
        assertThat(Claim.of(true, T0, T0.plusNanos(1000))).isEqualTo(Claim.OTHER_JOB);
        assertThat(Claim.of(true, null, T0))
                .as("not known on the stored side: the id alone decides")
                .isEqualTo(Claim.SAME_JOB);
        assertThat(Claim.of(true, T0, null))
                .as("not known on the record's side")
                .isEqualTo(Claim.SAME_JOB);
    }

    @Test
    void aTokenReusedIsTheHighestTokenFromAnotherKnownTenure() {
        assertThat(FENCE.tokenReusedBy(t(5), B)).isTrue();
        assertThat(FENCE.tokenReusedBy(t(5), A)).isFalse();
        assertThat(FENCE.tokenReusedBy(
                        t(5), new Tenure("dispatcher-a", T0.withOffsetSameInstant(ZoneOffset.ofHours(-5)))))
                .isFalse();
        assertThat(FENCE.tokenReusedBy(t(5), Tenure.UNKNOWN))
                .as("unknown contradicts nothing")
                .isFalse();
        assertThat(FENCE.tokenReusedBy(t(6), B)).as("another token").isFalse();
        assertThat(FENCE.after(121, t(5), B).tenure())
                .as("the fence keeps the newer tenure")
                .isEqualTo(B);
        assertThat(FENCE.after(121, t(5), Tenure.UNKNOWN).tenure())
                .as("and keeps what it knew over unknown")
                .isEqualTo(A);
    }
}
