package dev.fencedjobs.runtime;

import java.time.Duration;
import java.util.Map;

/**
 * A started dispatcher, relay or consumer, as its owner sees it: what it is doing, its status,
 * and how to stop it. {@link #close()} stops it gracefully (work in flight finishes, a leader
 * releases its lease) and returns when it has stopped.
 */
public interface RunningService extends AutoCloseable {

    /** What a service is doing. */
    enum State {
        /** Holds its role's lease and does the role's work (dispatcher, relay). */
        LEADING,
        /** Waits for its role's lease (dispatcher, relay). */
        FOLLOWING,
        /** Consumes (consumer). */
        RUNNING,
        /** Stopped, or stopping. */
        STOPPED
    }

    State state();

    /** Whether it can do its work now: connected to the database (and, for the relay and consumer, to Kafka). */
    boolean ready();

    /** What {@code GET /status} answers. */
    Map<String, Object> status();

    /** The port of its ops endpoint, or -1 when it has none. */
    int httpPort();

    /** Blocks until it has stopped. */
    void awaitTermination() throws InterruptedException;

    /** Blocks until it has stopped or {@code timeout} passed; true if it stopped. */
    boolean awaitTermination(Duration timeout) throws InterruptedException;

    @Override
    void close();
}
