package dev.fencedjobs.lease;

import java.time.Duration;

/** The fast path's wait for the end of a holder's session; {@link HolderWatch} provides it. */
public interface SessionWatch extends AutoCloseable {
    /** True once the sign of life of {@code token} is let go by every session (this one holds it then); false when {@code upTo} ran out. */
    boolean await(FencingToken token, Duration upTo);

    void unlock(FencingToken token);

    /** Ends a wait in progress, from another thread; with none in progress, the next one ends at once. */
    void interrupt();

    @Override
    void close();
}
