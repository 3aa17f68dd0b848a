package dev.fencedjobs.chaos;

import java.util.concurrent.TimeUnit;

/**
 * The run's clock and log ({@code chaos +12.3s ...}), and its sleep, which ends the run early once
 * a reason to stop was given (a service that refused its configuration).
 */
final class RunLog {

    private final long startNanos = System.nanoTime();
    /** The same moment on the wall clock, epoch milliseconds: what the run's elapsed times count from. */
    private final long startEpochMillis = System.currentTimeMillis();

    private volatile String stopReason;

    long elapsedMillis() {
        return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNanos);
    }

    String elapsedSeconds() {
        return String.format("%.1f", elapsedMillis() / 1000.0);
    }

    /** When the run began, epoch milliseconds. */
    long startEpochMillis() {
        return startEpochMillis;
    }

    /** When the run began, on {@link System#nanoTime()}. */
    long startNanos() {
        return startNanos;
    }

    void log(String message) {
        System.out.println("chaos +" + elapsedSeconds() + "s " + message);
    }

    /** From now on, every {@link #sleep} throws with this reason. */
    void stop(String reason) {
        stopReason = reason;
        log(reason);
    }

    void sleep(long millis) throws InterruptedException {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        long left;
        while ((left = end - System.nanoTime()) > 0) {
            if (stopReason != null) {
                throw new IllegalStateException(stopReason);
            }
            Thread.sleep(Math.min(200, TimeUnit.NANOSECONDS.toMillis(left) + 1));
        }
    }
}
