package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.Grant;
import dev.fencedjobs.runtime.Leadership;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Plays a SIGSTOP for one replica inside the test JVM: once paused, its lease operations and its
 * batches block where they stand until resumed. The replica's threads keep the state they had
 * (its worker keeps the grant it already took), exactly like a stopped process.
 */
final class PauseSwitch {

    private volatile CountDownLatch resume = new CountDownLatch(0);
    private final AtomicInteger blocked = new AtomicInteger();

    void pause() {
        resume = new CountDownLatch(1);
    }

    void resume() {
        resume.countDown();
    }

    int blocked() {
        return blocked.get();
    }

    private void gate() {
        CountDownLatch latch = resume;
        if (latch.getCount() == 0) {
            return;
        }
        blocked.incrementAndGet();
        try {
            latch.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            blocked.decrementAndGet();
        }
    }

    Leadership.LeaseOps lease(Leadership.LeaseOps delegate) {
        return new Leadership.LeaseOps() {
            @Override
            public Optional<Grant> acquireOrRenew() {
                gate();
                return delegate.acquireOrRenew();
            }

            @Override
            public boolean release(long token) {
                gate();
                return delegate.release(token);
            }
        };
    }

    JobBatches batches(JobBatches delegate) {
        return new JobBatches() {
            @Override
            public BatchResult completeDue(Grant grant, int limit) {
                gate();
                return delegate.completeDue(grant, limit);
            }

            @Override
            public NextDue nextDue() {
                gate();
                return delegate.nextDue();
            }
        };
    }
}
