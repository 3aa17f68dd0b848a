package dev.fencedjobs.db.internal;

/**
 * A monotonic clock in nanoseconds, for local scheduling and deadlines only. Lease decisions
 * never use it: they are made in database time ({@code clock_timestamp()}).
 */
@FunctionalInterface
public interface Ticker {

    long nanoTime();

    static Ticker system() {
        return System::nanoTime;
    }
}
