package dev.fencedjobs.runtime;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.internal.PurgeSchedule;
import dev.fencedjobs.runtime.internal.Purger;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** The retention purge's own thread: when it deletes, what it does with failures, and its stop. */
class PurgerTest {

    private static final int CHUNK = 10;
    /** Half of it, the idle interval, is short enough for a test to see a second delete. */
    private static final Duration RETENTION = Duration.ofMillis(20);

    @Test
    void deletesNothingWhileInactiveAndStartsWhenWokenActive() throws Exception {
        AtomicBoolean active = new AtomicBoolean();
        LinkedBlockingQueue<Boolean> asked = new LinkedBlockingQueue<>();
        AtomicInteger purges = new AtomicInteger();
        CountDownLatch purged = new CountDownLatch(1);
        try (Purger purger = new Purger(
                        "test-purge",
                        new PurgeSchedule(CHUNK, RETENTION, Ticker.system()),
                        () -> {
                            boolean a = active.get();
                            asked.add(a);
                            return a;
                        },
                        () -> {
                            purges.incrementAndGet();
                            purged.countDown();
                            return 0;
                        },
                        rows -> {},
                        e -> {})
                .start()) {
            assertThat(asked.poll(10, TimeUnit.SECONDS)).isFalse();
            purger.wake();
            assertThat(asked.poll(10, TimeUnit.SECONDS))
                    .as("asked again when woken")
                    .isFalse();
            assertThat(purges).as("no delete while inactive").hasValue(0);

            active.set(true);
            purger.wake();
            assertThat(purged.await(10, TimeUnit.SECONDS))
                    .as("a delete once active")
                    .isTrue();
        }
    }

    @Test
    void goesAgainWhileChunksComeBackFullAndReportsWhatItDeleted() throws Exception {
        LinkedBlockingQueue<Integer> results = new LinkedBlockingQueue<>(List.of(CHUNK, CHUNK, 3));
        List<Integer> deleted = new CopyOnWriteArrayList<>();
        CountDownLatch three = new CountDownLatch(3);
        try (Purger purger = new Purger(
                        "test-purge",
                        new PurgeSchedule(CHUNK, Duration.ofDays(1), Ticker.system()),
                        () -> true,
                        () -> {
                            Integer next = results.poll();
                            return next == null ? 0 : next;
                        },
                        rows -> {
                            deleted.add(rows);
                            three.countDown();
                        },
                        e -> {})
                .start()) {
            // With a day's retention the idle interval is a minute: the three deletes came from full chunks going
            // again.
            assertThat(three.await(10, TimeUnit.SECONDS)).isTrue();
            assertThat(deleted).containsExactly(CHUNK, CHUNK, 3);
        }
    }

    @Test
    void aFailedDeleteIsReportedAndTheNextOneStillRuns() throws Exception {
        AtomicInteger calls = new AtomicInteger();
        List<RuntimeException> failures = new CopyOnWriteArrayList<>();
        CountDownLatch second = new CountDownLatch(1);
        RuntimeException boom = new IllegalStateException("connection reset");
        try (Purger purger = new Purger(
                        "test-purge",
                        new PurgeSchedule(CHUNK, RETENTION, Ticker.system()),
                        () -> true,
                        () -> {
                            if (calls.incrementAndGet() == 1) {
                                throw boom;
                            }
                            second.countDown();
                            return 0;
                        },
                        rows -> {},
                        failures::add)
                .start()) {
            assertThat(second.await(10, TimeUnit.SECONDS))
                    .as("tried again after the idle interval")
                    .isTrue();
            assertThat(failures).containsExactly(boom);
        }
    }

    @Test
    void closeWaitsForTheDeleteInFlightAndThenNoneRuns() throws Exception {
        CountDownLatch inDelete = new CountDownLatch(1);
        CountDownLatch finish = new CountDownLatch(1);
        AtomicInteger calls = new AtomicInteger();
        AtomicBoolean finished = new AtomicBoolean();
        Purger purger = new Purger(
                        "test-purge",
                        new PurgeSchedule(CHUNK, RETENTION, Ticker.system()),
                        () -> true,
                        () -> {
                            calls.incrementAndGet();
                            inDelete.countDown();
                            try {
                                finish.await();
                            } catch (InterruptedException e) {
                                Thread.currentThread().interrupt();
                            }
                            finished.set(true);
                            return CHUNK;
                        },
                        rows -> {},
                        e -> {})
                .start();
        assertThat(inDelete.await(10, TimeUnit.SECONDS)).isTrue();
        Thread closer = new Thread(() -> purger.close(Duration.ofSeconds(30)));
        closer.start();
        // The closer is in its join, so the stop is set before the delete returns.
        while (closer.getState() != Thread.State.TIMED_WAITING) {
            Thread.onSpinWait();
        }
        finish.countDown();
        closer.join();
        assertThat(finished).as("close returned after the delete in flight").isTrue();
        assertThat(calls)
                .as("no delete after the stop, though the chunk came back full")
                .hasValue(1);
    }
}
