package dev.fencedjobs.runtime.internal;

import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * Latencies recorded since the window was last drained, as a histogram of logarithmic buckets
 * (eight to a doubling: a percentile is read to within 9 %, never below the true value), and the
 * exact maximum. Recording is a few atomic adds and costs no allocation, from any thread; the
 * dashboard's sampler drains it every few seconds. A latency recorded while a drain runs counts in
 * this window or the next, never in both, never in neither.
 */
public final class LatencyWindow {

    /** Buckets per doubling. */
    private static final int PER_DOUBLING = 8;
    /** Microseconds up to 2^40 (12.7 days); longer ones count in the last bucket. */
    private static final int BUCKETS = 40 * PER_DOUBLING + 1;

    private final AtomicLongArray counts = new AtomicLongArray(BUCKETS);
    private final AtomicLong max = new AtomicLong();

    /** What one window held: the number of latencies and their median, 99th percentile and maximum in seconds (0 when empty). */
    public record Summary(long count, double p50Seconds, double p99Seconds, double maxSeconds) {
        static final Summary EMPTY = new Summary(0, 0, 0, 0);
    }

    /** Records a latency of {@code nanos}; a negative one (clocks apart) as 0. */
    public void record(long nanos) {
        long micros = Math.max(0, nanos / 1_000);
        counts.incrementAndGet(bucket(micros));
        long m = max.get();
        while (micros > m && !max.compareAndSet(m, micros)) {
            m = max.get();
        }
    }

    /** The window's summary; the window starts again empty. */
    public Summary drain() {
        long[] taken = new long[BUCKETS];
        long total = 0;
        for (int i = 0; i < BUCKETS; i++) {
            taken[i] = counts.getAndSet(i, 0);
            total += taken[i];
        }
        long maxMicros = max.getAndSet(0);
        if (total == 0) {
            return Summary.EMPTY;
        }
        double maxSeconds = maxMicros / 1e6;
        return new Summary(
                total,
                Math.min(maxSeconds, percentile(taken, total, 0.50)),
                Math.min(maxSeconds, percentile(taken, total, 0.99)),
                maxSeconds);
    }

    /** The upper bound, in seconds, of the bucket that holds the {@code q} quantile. */
    private static double percentile(long[] taken, long total, double q) {
        long rank = (long) Math.ceil(q * total);
        long seen = 0;
        for (int i = 0; i < BUCKETS; i++) {
            seen += taken[i];
            if (seen >= rank) {
                return upperMicros(i) / 1e6;
            }
        }
        return upperMicros(BUCKETS - 1) / 1e6;
    }

    /** Bucket 0 holds 0 and 1 µs; bucket i the microseconds in [2^((i-1)/8), 2^(i/8)). */
    static int bucket(long micros) {
        if (micros <= 1) {
            return 0;
        }
        int i = (int) (Math.log((double) micros) / Math.log(2) * PER_DOUBLING) + 1;
        return Math.min(i, BUCKETS - 1);
    }

    static double upperMicros(int bucket) {
        return Math.pow(2, (double) bucket / PER_DOUBLING);
    }
}
