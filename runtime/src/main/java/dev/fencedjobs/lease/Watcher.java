package dev.fencedjobs.lease;

import dev.fencedjobs.runtime.internal.Faults;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The fast path's watcher: a plain blocking worker on a thread of its own. It runs the lease
 * thread's commands one at a time, in order: wait for a token's holder session to end (a second at
 * a time, {@link Leadership#WATCH_WAIT}: a running statement holds back vacuum), or let a token's
 * lock go. It posts each wait's outcome back ({@link Answers}) and decides nothing: what a wait
 * proves, and what to wait for next, is {@link Leadership}'s, on the lease thread.
 */
final class Watcher {

    /** What the watcher is told to do next. */
    record Command(Kind kind, FencingToken token) {
        enum Kind {
            WAIT,
            UNLOCK,
            STOP
        }
    }

    /** Where the outcome of each wait goes: the session let the lock go ({@code ended}), the wait ran out, or it failed ({@code error}). */
    interface Answers {
        void waitEnded(FencingToken token, boolean ended, RuntimeException error);
    }

    private static final Logger log = LoggerFactory.getLogger(Watcher.class);

    private final String role;
    private final SessionWatch watch;
    private final Duration chunk;
    private final Answers answers;
    private final BlockingQueue<Command> commands = new LinkedBlockingQueue<>();
    private Thread thread;

    Watcher(String role, SessionWatch watch, Duration chunk, Answers answers) {
        this.role = role;
        this.watch = watch;
        this.chunk = chunk;
        this.answers = answers;
    }

    void start() {
        thread = new Thread(this::run, "lease-" + role + "-watch");
        thread.setDaemon(true);
        thread.start();
    }

    void waitFor(FencingToken token) {
        commands.add(new Command(Command.Kind.WAIT, token));
    }

    void unlock(FencingToken token) {
        commands.add(new Command(Command.Kind.UNLOCK, token));
    }

    /** Ends a wait in progress, from the lease thread; with none in progress, the next one ends at once. */
    void interrupt() {
        watch.interrupt();
    }

    /** Drops what is queued, and ends a wait in progress; the thread ends after it. */
    void stop() {
        commands.clear();
        commands.add(new Command(Command.Kind.STOP, null));
        watch.interrupt();
    }

    void join() {
        LeaseThreads.join(thread, chunk);
    }

    /** What was queued and not taken yet; for tests, which start no thread. */
    List<Command> takeCommands() {
        List<Command> taken = new ArrayList<>();
        commands.drainTo(taken);
        return taken;
    }

    private void run() {
        for (; ; ) {
            Command c;
            try {
                c = commands.take();
            } catch (InterruptedException e) {
                return;
            }
            switch (c.kind()) {
                case WAIT -> {
                    try {
                        answers.waitEnded(c.token(), watch.await(c.token(), chunk), null);
                    } catch (RuntimeException e) {
                        answers.waitEnded(c.token(), false, e);
                    }
                }
                case UNLOCK -> {
                    try {
                        watch.unlock(c.token());
                    } catch (RuntimeException e) {
                        log.debug(
                                "Lease {}: letting go of token {}'s lock failed: {}",
                                role,
                                c.token(),
                                Faults.describe(e));
                    }
                }
                case STOP -> {
                    return;
                }
            }
        }
    }
}
