package dev.fencedjobs.lease;

import dev.fencedjobs.runtime.internal.Next;
import java.util.Optional;

/**
 * What a leader's work sees of its leadership: the grant to work under, a way to give it up, and
 * a signal when it changes. {@link Leadership} is the one in service; a test scripts its own and
 * drives a loop's {@link Next steps} on a settable clock.
 */
public interface Grants {

    /** The grant to work under: empty while not leading, or past the local deadline. */
    Optional<Grant> current();

    /** The work found that {@code stale} no longer holds (its guard rejected it, or its transaction failed). */
    void stepDown(Grant stale, String reason);

    /** Called on every change of the grant. */
    void onChange(Runnable listener);
}
