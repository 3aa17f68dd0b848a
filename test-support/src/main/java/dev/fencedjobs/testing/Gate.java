package dev.fencedjobs.testing;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Plays a SIGSTOP inside the test JVM: while closed, every thread that passes through
 * {@link #pass()} stops there until the gate opens again, keeping whatever state it had (a grant
 * it already took, rows it already read), exactly like a stopped process.
 */
public final class Gate {

    private volatile CountDownLatch open = new CountDownLatch(0);
    private final AtomicInteger waiting = new AtomicInteger();

    public void close() {
        open = new CountDownLatch(1);
    }

    public void open() {
        open.countDown();
    }

    /** How many threads are stopped at the gate now. */
    public int waiting() {
        return waiting.get();
    }

    public void pass() {
        CountDownLatch latch = open;
        if (latch.getCount() == 0) {
            return;
        }
        waiting.incrementAndGet();
        try {
            latch.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            waiting.decrementAndGet();
        }
    }
}
