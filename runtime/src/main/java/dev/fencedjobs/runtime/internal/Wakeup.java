package dev.fencedjobs.runtime.internal;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A sticky wake-up signal for one waiting loop: a signal sent while the loop is busy is kept and
 * ends its next wait at once, so no wake-up is lost between "decide to sleep" and "sleep".
 */
public final class Wakeup {

    private final ReentrantLock lock = new ReentrantLock();
    private final Condition signalled = lock.newCondition();
    private boolean pending;

    public void signal() {
        lock.lock();
        try {
            pending = true;
            signalled.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /**
     * Waits until a signal or until {@code nanos} have passed ({@code Long.MAX_VALUE}: no limit),
     * and consumes the signal. Returns true when signalled.
     */
    public boolean await(long nanos) throws InterruptedException {
        lock.lock();
        try {
            long remaining = nanos;
            while (!pending) {
                if (remaining <= 0) {
                    return false;
                }
                if (nanos == Long.MAX_VALUE) {
                    signalled.await();
                } else {
                    remaining = signalled.awaitNanos(remaining);
                }
            }
            pending = false;
            return true;
        } finally {
            lock.unlock();
        }
    }

    public boolean await(long amount, TimeUnit unit) throws InterruptedException {
        return await(unit.toNanos(amount));
    }
}
