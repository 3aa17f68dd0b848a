package dev.fencedjobs.runtime.internal;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class LatencyWindowTest {

    @Test
    void percentilesAreReadToWithinABucketAndNeverBelowTheTrueValue() {
        LatencyWindow w = new LatencyWindow();
        for (int ms = 1; ms <= 1000; ms++) {
            w.record(ms * 1_000_000L);
        }
        LatencyWindow.Summary s = w.drain();
        assertThat(s.count()).isEqualTo(1000);
        assertThat(s.p50Seconds()).isBetween(0.500, 0.500 * 1.0906);
        assertThat(s.p99Seconds()).isBetween(0.990, 1.000);
        assertThat(s.maxSeconds()).isEqualTo(1.0);
    }

    @Test
    void aDrainEmptiesTheWindow() {
        LatencyWindow w = new LatencyWindow();
        w.record(5_000_000L);
        assertThat(w.drain().count()).isEqualTo(1);
        assertThat(w.drain()).isEqualTo(new LatencyWindow.Summary(0, 0, 0, 0));
    }

    @Test
    void negativeAndHugeLatenciesLandInTheEndBuckets() {
        LatencyWindow w = new LatencyWindow();
        w.record(-5_000_000L);
        w.record(Long.MAX_VALUE);
        LatencyWindow.Summary s = w.drain();
        assertThat(s.count()).isEqualTo(2);
        assertThat(s.p50Seconds()).isEqualTo(0.000001);
        long maxMicros = Long.MAX_VALUE / 1_000; // the window keeps whole microseconds
        assertThat(s.maxSeconds()).isEqualTo(maxMicros / 1e6);
        assertThat(LatencyWindow.bucket(Long.MAX_VALUE)).isEqualTo(320);
    }

    @Test
    void everyBucketHoldsTheValuesBelowItsUpperBound() {
        for (long micros = 0; micros < 5_000_000; micros += 1 + micros / 50) {
            int b = LatencyWindow.bucket(micros);
            assertThat(LatencyWindow.upperMicros(b))
                    .as("upper bound of %d µs", micros)
                    .isGreaterThanOrEqualTo((double) micros);
            if (b > 0) {
                assertThat(LatencyWindow.upperMicros(b - 1))
                        .as("the bucket below %d µs", micros)
                        .isLessThanOrEqualTo((double) micros);
            }
        }
    }
}
