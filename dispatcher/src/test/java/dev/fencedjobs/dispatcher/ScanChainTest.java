package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import org.junit.jupiter.api.Test;

/** Which late notifications the batches since the last read from the start had already seen. */
class ScanChainTest {

    private static JobBatches.Position at(long millis) {
        return new JobBatches.Position(OffsetDateTime.ofInstant(Instant.ofEpochMilli(millis), ZoneOffset.UTC), millis);
    }

    @Test
    void aSnapshotSeesWhatCommittedBeforeItAndNothingInProgressOrLater() {
        DbSnapshot s = DbSnapshot.parse("100:105:101,103");
        assertThat(s.sees(99)).isTrue();
        assertThat(s.sees(100)).isTrue();
        assertThat(s.sees(101)).isFalse();
        assertThat(s.sees(102)).isTrue();
        assertThat(s.sees(103)).isFalse();
        assertThat(s.sees(105)).isFalse();
        assertThat(DbSnapshot.parse("7:7:").sees(6)).isTrue();
        assertThat(DbSnapshot.parse("7:7:").sees(7)).isFalse();
    }

    @Test
    void theBatchThatScannedTheDueTimeDecides() {
        ScanChain chain = new ScanChain();
        chain.restart();
        chain.ran(at(1_000), DbSnapshot.parse("50:50:")); // from the start to 1,000 ms; saw transactions below 50
        chain.ran(at(2_000), DbSnapshot.parse("60:60:")); // 1,000 to 2,000; saw below 60
        chain.ran(at(3_000), DbSnapshot.parse("70:72:70")); // 2,000 to 3,000; saw below 72 but 70

        assertThat(chain.saw(500, 49)).as("seen by the first batch").isTrue();
        assertThat(chain.saw(500, 55))
                .as("committed after the batch that scanned its place: behind the position")
                .isFalse();
        assertThat(chain.saw(1_500, 55)).isTrue();
        assertThat(chain.saw(1_000, 55))
                .as("at a batch's end: the earlier batch decides")
                .isFalse();
        assertThat(chain.saw(2_500, 70)).as("in progress for that batch").isFalse();
        assertThat(chain.saw(2_500, 71)).isTrue();
        assertThat(chain.saw(2_500, -1)).as("a payload without a transaction").isFalse();
        assertThat(chain.saw(3_500, 10)).as("past every batch's end").isFalse();
    }

    @Test
    void nothingCountsAsSeenAcrossARestartABatchWithoutSnapshotOrForgottenBatches() {
        ScanChain chain = new ScanChain();
        chain.ran(at(1_000), DbSnapshot.parse("50:50:"));
        chain.restart();
        assertThat(chain.saw(500, 10)).isFalse();

        chain.ran(at(1_000), DbSnapshot.parse("50:50:"));
        chain.ran(at(2_000), null);
        assertThat(chain.saw(500, 10))
                .as("a batch of unknown snapshot may have been the one")
                .isFalse();
        chain.restart();

        for (int i = 1; i <= ScanChain.MAX_BATCHES + 1; i++) {
            chain.ran(at(i * 10L), DbSnapshot.parse("50:50:"));
        }
        assertThat(chain.saw(5, 10))
                .as("the batch that scanned it was forgotten")
                .isFalse();
        assertThat(chain.saw(ScanChain.MAX_BATCHES * 10L, 10)).isTrue();
    }
}
