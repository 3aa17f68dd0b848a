package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.internal.Ticker;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.function.ToDoubleFunction;

/**
 * A value read from the database at most once a second, and only when asked for: what a gauge
 * shows, read on the scrape's thread, so that scrapes from several places cost one statement.
 */
public final class ReadCache<T> {

    private final Supplier<T> read;
    private final Ticker ticker;
    private T value;
    private long readAt = Long.MIN_VALUE;

    public ReadCache(Supplier<T> read, Ticker ticker) {
        this.read = read;
        this.ticker = ticker;
    }

    /** For gauges: NaN while the database cannot be read. */
    public double gauge(ToDoubleFunction<T> field) {
        try {
            return field.applyAsDouble(get());
        } catch (RuntimeException e) {
            return Double.NaN;
        }
    }

    /** The value, read again if the last read is over a second old; throws what the read throws. */
    public synchronized T get() {
        long now = ticker.nanoTime();
        if (readAt == Long.MIN_VALUE || now - readAt > TimeUnit.SECONDS.toNanos(1)) {
            value = read.get();
            readAt = now;
        }
        return value;
    }
}
