package dev.fencedjobs.runtime.internal;

import java.time.Duration;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;
import java.util.function.IntConsumer;
import java.util.function.IntSupplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A retention purge on a thread of its own, next to a service's work loop and not inside it: a
 * slow delete holds up only the next delete, never a batch. Under load the deletes took up to a
 * second each (the soak benchmark, 10,500 jobs/s), and while they ran inside the loops every job
 * that came due meanwhile waited behind them.
 *
 * <p>It deletes when its {@link PurgeSchedule} says so, and only while {@code active} is true
 * (the dispatcher and the relay: while leading; asked again at least every {@link #INACTIVE_CHECK}
 * and whenever {@link #wake()} is called). It uses a connection of the service's pool only while a
 * delete runs.
 */
public final class Purger implements AutoCloseable {

    /** How often an inactive purger asks again whether it is active, between {@link #wake()}s. */
    public static final Duration INACTIVE_CHECK = Duration.ofSeconds(1);

    private static final Logger log = LoggerFactory.getLogger(Purger.class);

    private final PurgeSchedule schedule;
    private final BooleanSupplier active;
    private final IntSupplier purge;
    private final IntConsumer deleted;
    private final Consumer<RuntimeException> failed;
    private final Wakeup wakeup = new Wakeup();
    private final Thread thread;
    private volatile boolean running = true;

    /**
     * @param purge one bounded delete; returns the rows it deleted
     * @param deleted told the rows of each delete that found any
     * @param failed told each failure; the next try waits the schedule's idle interval
     */
    public Purger(
            String name,
            PurgeSchedule schedule,
            BooleanSupplier active,
            IntSupplier purge,
            IntConsumer deleted,
            Consumer<RuntimeException> failed) {
        this.schedule = schedule;
        this.active = active;
        this.purge = purge;
        this.deleted = deleted;
        this.failed = failed;
        this.thread = new Thread(this::run, name);
        thread.setDaemon(true);
    }

    public Purger start() {
        thread.start();
        return this;
    }

    /** Ask {@code active} again now (a leadership change). */
    public void wake() {
        wakeup.signal();
    }

    private void run() {
        try {
            while (running) {
                long wait = INACTIVE_CHECK.toNanos();
                if (active.getAsBoolean()) {
                    // A delete ended by the pool's close at shutdown is not worth a warning.
                    int rows = schedule.runIfDue(purge, e -> {
                        if (running) {
                            failed.accept(e);
                        }
                    });
                    if (rows > 0) {
                        deleted.accept(rows);
                    }
                    wait = schedule.nanosUntilDue();
                }
                wakeup.await(wait);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (RuntimeException e) {
            // Only a callback can throw this far (a failed delete goes to `failed`): retention stops, the service goes
            // on.
            log.error("Retention purge thread {} stopped; nothing more is purged until a restart", thread.getName(), e);
        }
    }

    /**
     * Stops, and waits up to {@code timeout} for a delete in flight. Call before the pool closes;
     * a delete still running after the wait is ended by the pool's close and rolled back.
     */
    public void close(Duration timeout) {
        running = false;
        wakeup.signal();
        try {
            thread.join(Math.max(1, timeout.toMillis()));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public void close() {
        close(Duration.ofSeconds(10));
    }
}
