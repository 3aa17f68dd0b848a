package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.internal.Ticker;
import java.time.Duration;
import java.util.function.Consumer;
import java.util.function.IntSupplier;

/**
 * When a retention purge of bounded chunks is due next: {@link #AGAIN} after a delete that came
 * back with a full chunk, so the purge keeps up with any rate of work and not only when idle;
 * otherwise {@link #EVERY}, or half the retention when that is shorter. Owned by one worker thread.
 */
public final class PurgeSchedule {

    public static final Duration AGAIN = Duration.ofMillis(50);
    public static final Duration EVERY = Duration.ofMinutes(1);

    private final int chunk;
    private final Duration idle;
    private final Ticker ticker;
    private long next;

    /** Due at once; {@code retention} is the shortest retention the purge serves. */
    public PurgeSchedule(int chunk, Duration retention, Ticker ticker) {
        this.chunk = chunk;
        Duration half = retention.dividedBy(2);
        this.idle = half.compareTo(EVERY) < 0 ? half : EVERY;
        this.ticker = ticker;
        this.next = ticker.nanoTime();
    }

    /** Rows per delete. */
    public int chunk() {
        return chunk;
    }

    private boolean due() {
        return ticker.nanoTime() - next >= 0;
    }

    /** How long until the next purge is due, at least a nanosecond. */
    public long nanosUntilDue() {
        return Math.max(1, next - ticker.nanoTime());
    }

    /**
     * Runs {@code purge} (one bounded delete; it returns the rows it deleted) if it is due, and
     * schedules the next. A failure goes to {@code failed} and counts as nothing deleted, so the
     * next try waits the idle interval. Returns the rows deleted, 0 when not due or failed.
     */
    public int runIfDue(IntSupplier purge, Consumer<RuntimeException> failed) {
        if (!due()) {
            return 0;
        }
        int rows = 0;
        try {
            rows = purge.getAsInt();
        } catch (RuntimeException e) {
            failed.accept(e);
        }
        deleted(rows);
        return rows;
    }

    /** A purge deleted {@code rows} (0 when it failed): schedules the next. */
    private void deleted(int rows) {
        next = ticker.nanoTime() + (rows >= chunk ? AGAIN : idle).toNanos();
    }

    /** The wait after a purge that did not find a full chunk. */
    public Duration idleInterval() {
        return idle;
    }
}
