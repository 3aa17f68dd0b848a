package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.internal.Ticker;
import java.util.function.Supplier;

/**
 * What a loop's step asks for next. A loop is a {@code step()} that does one unit of work and
 * returns one of these; {@link #drive} is the thin thread that runs it, and a test calls the step
 * itself with a settable {@link Ticker} and checks each answer exactly.
 *
 * @param atNanos for {@link Kind#SLEEP_UNTIL} and {@link Kind#BACK_OFF}: the {@link Ticker}
 *     reading to wait for; 0 otherwise
 * @param reason for {@link Kind#BACK_OFF} and {@link Kind#STEPPED_DOWN}: why; {@code null} otherwise
 */
public record Next(Kind kind, long atNanos, String reason) {

    public enum Kind {
        /** Step again at once: a full batch, say. */
        AGAIN,
        /** Nothing to do before {@code atNanos}; a wake-up (a notification, a leadership change) ends the wait early. */
        SLEEP_UNTIL,
        /** A fault: wait until {@code atNanos} before trying again; a wake-up ends the wait early. */
        BACK_OFF,
        /** Nothing to do until a wake-up: no grant, or nothing pending. */
        WAIT,
        /** The grant no longer holds; the loop has given it up. Step again (it will wait for leadership). */
        STEPPED_DOWN,
        /** Stopped: the thread ends. */
        STOPPED
    }

    private static final Next AGAIN = new Next(Kind.AGAIN, 0, null);
    private static final Next WAIT = new Next(Kind.WAIT, 0, null);
    private static final Next STOPPED = new Next(Kind.STOPPED, 0, null);

    public static Next again() {
        return AGAIN;
    }

    public static Next sleepUntil(long atNanos) {
        return new Next(Kind.SLEEP_UNTIL, atNanos, null);
    }

    public static Next backOff(long atNanos, String reason) {
        return new Next(Kind.BACK_OFF, atNanos, reason);
    }

    public static Next await() {
        return WAIT;
    }

    public static Next steppedDown(String reason) {
        return new Next(Kind.STEPPED_DOWN, 0, reason);
    }

    public static Next stopped() {
        return STOPPED;
    }

    /**
     * Runs {@code step} until it answers {@link Kind#STOPPED}, waiting on {@code wakeup} where it
     * asks to. The waits are measured with {@code ticker}, which in service is the system's.
     */
    public static void drive(Supplier<Next> step, Wakeup wakeup, Ticker ticker) throws InterruptedException {
        for (; ; ) {
            Next next = step.get();
            switch (next.kind()) {
                case AGAIN, STEPPED_DOWN -> {}
                case SLEEP_UNTIL, BACK_OFF -> {
                    long wait = next.atNanos() - ticker.nanoTime();
                    if (wait > 0) {
                        wakeup.await(wait);
                    }
                }
                case WAIT -> wakeup.await(Long.MAX_VALUE);
                case STOPPED -> {
                    return;
                }
            }
        }
    }
}
