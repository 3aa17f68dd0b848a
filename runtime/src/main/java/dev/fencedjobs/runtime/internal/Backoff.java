package dev.fencedjobs.runtime.internal;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/** Exponential back-off with full jitter, for loops that retry after a fault. Not thread-safe. */
public final class Backoff {

    private final long initialNanos;
    private final long maxNanos;
    private int failures;

    public Backoff(Duration initial, Duration max) {
        if (initial.isNegative() || initial.isZero() || max.compareTo(initial) < 0) {
            throw new IllegalArgumentException("need 0 < initial <= max, got " + initial + " and " + max);
        }
        this.initialNanos = initial.toNanos();
        this.maxNanos = max.toNanos();
    }

    /** The next pause: random in [ceiling/2, ceiling], where the ceiling doubles per failure up to max. */
    public long nextNanos() {
        long ceiling = initialNanos << Math.min(failures, 30);
        if (ceiling <= 0 || ceiling > maxNanos) {
            ceiling = maxNanos;
        }
        failures++;
        return ceiling / 2 + ThreadLocalRandom.current().nextLong(ceiling / 2 + 1);
    }

    public void reset() {
        failures = 0;
    }

    public int failures() {
        return failures;
    }
}
