package dev.fencedjobs.runtime;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.runtime.internal.Next;
import dev.fencedjobs.runtime.internal.Wakeup;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The thin thread that runs a loop's steps: it waits where a step asks and nowhere else. */
class NextTest {

    private long now = 1_000;

    @Test
    void theDriverWaitsOnlyForWhatIsAheadAndEndsWhenStopped() throws Exception {
        Wakeup wakeup = new Wakeup();
        Deque<Next> script = new ArrayDeque<>(List.of(
                Next.again(),
                Next.sleepUntil(now),
                Next.backOff(now - 1, "past"),
                Next.steppedDown("guard"),
                Next.await(),
                Next.sleepUntil(Long.MAX_VALUE),
                Next.stopped()));
        List<Next> taken = new ArrayList<>();
        Next.drive(
                () -> {
                    Next next = script.removeFirst();
                    taken.add(next);
                    if (next.kind() == Next.Kind.WAIT
                            || (next.kind() == Next.Kind.SLEEP_UNTIL && next.atNanos() == Long.MAX_VALUE)) {
                        // A signal sent before the wait (while the step ran) ends it: it is not lost.
                        wakeup.signal();
                    }
                    return next;
                },
                wakeup,
                () -> now);
        assertThat(taken).hasSize(7).last().isEqualTo(Next.stopped());
        assertThat(script).isEmpty();
    }
}
