package dev.fencedjobs.lease;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.internal.Next;
import dev.fencedjobs.runtime.internal.Wakeup;
import java.time.Duration;
import java.util.function.Supplier;

/**
 * A {@link Leadership}'s threads: the lease thread, which runs its steps, and with the fast path
 * the {@link Watcher}'s beside it. Started together, stopped together; the session the watcher
 * waits on is closed last, after a release that a follower waits for first.
 */
final class LeaseThreads {

    private final String role;
    /** Null when the fast path is off, and then so is {@link #watch}. */
    private final Watcher watcher;

    private final SessionWatch watch;
    private final Duration leaseDuration;
    private Thread leaseThread;

    LeaseThreads(String role, Watcher watcher, SessionWatch watch, Duration leaseDuration) {
        this.role = role;
        this.watcher = watcher;
        this.watch = watch;
        this.leaseDuration = leaseDuration;
    }

    /** Starts the watcher, then the lease thread running {@code step}. */
    void start(Supplier<Next> step, Wakeup wakeup, Ticker ticker) {
        if (watcher != null) {
            watcher.start();
        }
        leaseThread = new Thread(
                () -> {
                    try {
                        Next.drive(step, wakeup, ticker);
                    } catch (InterruptedException e) {
                        // Stopped while waiting.
                    }
                },
                "lease-" + role);
        leaseThread.setDaemon(true);
        leaseThread.start();
    }

    /**
     * Ends both threads, once the caller has marked its state stopped and {@code wakeup} has ended
     * the lease thread's wait: a statement in progress on the lease thread may run for up to a lease.
     */
    void stop(Wakeup wakeup) {
        wakeup.signal();
        if (watcher != null) {
            watcher.stop();
        }
        join(leaseThread, leaseDuration);
        if (watcher != null) {
            watcher.join();
        }
    }

    /** Closes the watch's session. */
    void closeWatch() {
        if (watch != null) {
            watch.close();
        }
    }

    /** Waits up to {@code upTo} for {@code t} to end, then interrupts it. */
    static void join(Thread t, Duration upTo) {
        if (t == null) {
            return;
        }
        try {
            t.join(upTo.toMillis());
            if (t.isAlive()) {
                t.interrupt();
            }
        } catch (InterruptedException e) {
            t.interrupt();
            Thread.currentThread().interrupt();
        }
    }
}
