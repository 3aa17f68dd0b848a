package dev.fencedjobs.lease;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.internal.Backoff;
import dev.fencedjobs.runtime.internal.Next;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * Leadership's state machine, with a scripted lease, a scripted watch and a settable clock: no
 * database, no threads, no sleeps. The tests call {@link Leadership#step()} as the lease thread
 * would, read what it told the watcher, and answer for the watcher.
 */
class LeadershipTest {

    private static final LeaseConfig LEASE = new LeaseConfig(Duration.ofSeconds(10), Duration.ofSeconds(3));
    private static final Duration MARGIN = Duration.ofSeconds(2);

    private long now = 1_000_000_000L;
    private final Ticker ticker = () -> now;
    private final Deque<Object> answers = new ArrayDeque<>();
    private final AtomicInteger released = new AtomicInteger();
    private final AtomicInteger changes = new AtomicInteger();

    private final LeaseOps script = new LeaseOps() {
        @Override
        public Optional<Grant> acquireOrRenew() {
            Object next = answers.removeFirst();
            if (next instanceof RuntimeException e) {
                throw e;
            }
            return next instanceof Long token
                    ? Optional.of(new Grant(
                            "r",
                            "me",
                            FencingToken.of(token),
                            OffsetDateTime.now(ZoneOffset.UTC),
                            now + LEASE.duration().toNanos()))
                    : Optional.empty();
        }

        @Override
        public boolean release(FencingToken token) {
            released.incrementAndGet();
            return true;
        }

        @Override
        public Optional<Lease.Holder> holder() {
            return Optional.ofNullable(holderRemaining)
                    .map(left -> new Lease.Holder("other", FencingToken.of(holderToken), left, signOfLife));
        }

        @Override
        public Optional<Grant> takeOver(FencingToken token) {
            takeOvers.add(token.value());
            return token.value() == holderToken
                    ? Optional.of(new Grant(
                            "r",
                            "me",
                            token.next(),
                            OffsetDateTime.now(ZoneOffset.UTC),
                            now + LEASE.duration().toNanos()))
                    : Optional.empty();
        }
    };
    private Duration holderRemaining;
    private long holderToken = 7L;
    private boolean signOfLife;
    private final java.util.List<Long> takeOvers = new java.util.ArrayList<>();
    private final AtomicInteger interrupts = new AtomicInteger();

    /** The fast path's wait, never run here: the tests answer for the watcher with {@link Leadership#waitEnded}. */
    private final SessionWatch watch = new SessionWatch() {
        @Override
        public boolean await(FencingToken token, Duration upTo) {
            throw new AssertionError("no watcher thread in this test");
        }

        @Override
        public void unlock(FencingToken token) {}

        @Override
        public void interrupt() {
            interrupts.incrementAndGet();
        }

        @Override
        public void close() {}
    };

    private Leadership withFastPath() {
        Leadership l = new Leadership("r", "me", script, watch, LEASE, MARGIN, ticker, new SimpleMeterRegistry());
        l.onChange(changes::incrementAndGet);
        return l;
    }

    @Test
    void aFollowerWatchesOnlyAHolderThatShowsASignOfLife() {
        Leadership l = withFastPath();
        holderRemaining = Duration.ofMillis(6500);
        answers.add("another holder");
        l.attempt();
        assertThat(l.watchTarget())
                .as("no sign of life: nothing proves a crash, the expiry decides")
                .isEmpty();

        signOfLife = true;
        now += Duration.ofMillis(6510).toNanos();
        answers.add("another holder");
        l.attempt();
        assertThat(l.watchTarget()).hasValue(FencingToken.of(7));

        // The token moved on by expiry, with no sign of life yet: the wait for token 7 is dropped.
        holderToken = 8L;
        signOfLife = false;
        now += Duration.ofMillis(6510).toNanos();
        answers.add("another holder");
        l.attempt();
        assertThat(l.watchTarget()).isEmpty();
        assertThat(interrupts).as("the wait handed to the watcher is cut").hasValue(1);
    }

    @Test
    void whenTheWatchedSessionEnds_theFollowerTakesOverAtOnceWithTheNextToken() {
        Leadership l = withFastPath();
        holderRemaining = Duration.ofSeconds(9);
        signOfLife = true;
        answers.add("another holder");
        l.attempt();
        int before = changes.get();

        l.takeOverFrom(FencingToken.of(7));

        assertThat(takeOvers).containsExactly(7L);
        assertThat(l.state()).isEqualTo(Leadership.State.LEADER);
        assertThat(l.current()).map(Grant::token).contains(FencingToken.of(8));
        assertThat(l.fastTakeoverCount()).isEqualTo(1);
        assertThat(l.acquisitions()).isEqualTo(1);
        assertThat(changes.get()).as("the worker is told").isEqualTo(before + 1);
        assertThat(l.watchTarget()).as("a leader waits for no one").isEmpty();
        assertThat(answers).as("no acquire-or-renew was needed").isEmpty();
        l.close();
    }

    @Test
    void aTakeoverFromATokenThatMovedOnChangesNothing_andAnOrdinaryAttemptLooksAgain() {
        Leadership l = withFastPath();
        holderRemaining = Duration.ofSeconds(9);
        signOfLife = true;
        answers.add("another holder");
        l.attempt();
        holderToken = 8L; // someone took over by expiry meanwhile

        answers.add("another holder");
        l.takeOverFrom(FencingToken.of(7));

        assertThat(takeOvers).containsExactly(7L);
        assertThat(l.state()).isEqualTo(Leadership.State.FOLLOWER);
        assertThat(answers).as("the ordinary attempt asked").isEmpty();
        assertThat(l.watchTarget())
                .as("and now waits for the new holder's session")
                .hasValue(FencingToken.of(8));
        assertThat(l.fastTakeoverCount()).isZero();
        l.close();
    }

    private static Watcher.Command waitFor(long token) {
        return new Watcher.Command(Watcher.Command.Kind.WAIT, FencingToken.of(token));
    }

    private static Watcher.Command unlock(long token) {
        return new Watcher.Command(Watcher.Command.Kind.UNLOCK, FencingToken.of(token));
    }

    /** A follower's first step: another holder (token 7, 9 s left) shows a sign of life, so the watcher is told to wait for it. */
    private Leadership following() {
        Leadership l = withFastPath();
        holderRemaining = Duration.ofSeconds(9);
        signOfLife = true;
        answers.add("another holder");
        long start = now;
        assertThat(l.step())
                .as("next: the periodic attempt")
                .isEqualTo(Next.sleepUntil(start + LEASE.renewInterval().toNanos()));
        assertThat(l.takeWatchCommands()).containsExactly(waitFor(7));
        assertThat(l.watchTarget()).hasValue(FencingToken.of(7));
        return l;
    }

    @Test
    void theStepSleepsUntilTheNextThingDue_andAFollowerSendsNothingBeforeTheHoldersExpiry() {
        Leadership l = following();
        now += LEASE.renewInterval().toNanos();
        assertThat(l.step())
                .as("the periodic attempt is skipped: the holder's lease runs until 9 s")
                .isEqualTo(Next.sleepUntil(now + LEASE.renewInterval().toNanos()));
        now += Duration.ofMillis(6005).toNanos();
        holderToken = 8L;
        signOfLife = false;
        answers.add(9L);
        l.step();
        assertThat(answers).as("the attempt at the expiry asked").isEmpty();
        assertThat(l.current()).map(Grant::token).contains(FencingToken.of(9));
        assertThat(l.takeWatchCommands())
                .as("a wait in progress is left to end by itself")
                .isEmpty();
        assertThat(interrupts).hasValue(0);
    }

    @Test
    void race_theTokenMovesDuringAWait_theWaitIsCutAndTheNewTokenWaitedFor() {
        Leadership l = following();
        // The holder of 7 expired and a third replica took over (token 8, with a sign of life)
        // while the watcher still waits for 7.
        now += Duration.ofMillis(9005).toNanos();
        holderToken = 8L;
        holderRemaining = Duration.ofSeconds(10);
        answers.add("another holder");
        l.step();
        assertThat(l.watchTarget()).hasValue(FencingToken.of(8));
        assertThat(interrupts).as("the wait for 7 is cut").hasValue(1);
        assertThat(l.takeWatchCommands())
                .as("nothing new until the watcher answers")
                .isEmpty();

        // Its session ended just before the cut: the answer for 7 takes nothing over.
        l.waitEnded(FencingToken.of(7), true, null);
        l.step();
        assertThat(takeOvers).isEmpty();
        assertThat(l.takeWatchCommands()).containsExactly(unlock(7), waitFor(8));
        assertThat(l.state()).isEqualTo(Leadership.State.FOLLOWER);

        // The wait for 8 is cut by a later token move too; a failed (cut) wait hands the next one over.
        now += Duration.ofMillis(10005).toNanos();
        holderToken = 9L;
        answers.add("another holder");
        l.step();
        l.waitEnded(FencingToken.of(8), false, new IllegalStateException("connection aborted"));
        l.step();
        assertThat(l.takeWatchCommands()).containsExactly(waitFor(9));
        assertThat(l.watchTarget()).hasValue(FencingToken.of(9));
        l.close();
    }

    @Test
    void race_aWaitFailsAfterADatabaseRestart_theFollowerLooksAgainUntilTheHolderShowsASignOfLife() {
        Leadership l = following();
        long failedAt = now;
        l.waitEnded(
                FencingToken.of(7),
                false,
                new IllegalStateException("terminating connection due to administrator command"));
        assertThat(l.step())
                .as("one look at the holder a renewal interval later")
                .isEqualTo(Next.sleepUntil(failedAt + LEASE.renewInterval().toNanos()));
        assertThat(l.watchTarget()).as("a failed wait proves nothing").isEmpty();
        assertThat(takeOvers).isEmpty();

        // The holder has not taken its sign of life again on its new session yet: look again later.
        now += LEASE.renewInterval().toNanos();
        signOfLife = false;
        holderRemaining = Duration.ofSeconds(6);
        l.step();
        assertThat(l.takeWatchCommands()).isEmpty();

        // Now it has: wait for it again, and take over when that session ends.
        now += LEASE.renewInterval().toNanos();
        signOfLife = true;
        holderRemaining = Duration.ofSeconds(3).plusMillis(500);
        l.step();
        assertThat(l.takeWatchCommands()).containsExactly(waitFor(7));
        l.waitEnded(FencingToken.of(7), true, null);
        l.step();
        assertThat(takeOvers).containsExactly(7L);
        assertThat(l.current()).map(Grant::token).contains(FencingToken.of(8));
        assertThat(l.takeWatchCommands()).containsExactly(unlock(7));
        l.close();
    }

    @Test
    void race_aReleaseArrivesDuringAWait_theFollowerAcquiresAndTheLateAnswerTakesNothingOver() {
        Leadership l = following();
        holderToken = 8L;
        answers.add(8L);
        l.attemptNow();
        l.step();
        assertThat(l.current()).map(Grant::token).contains(FencingToken.of(8));
        assertThat(l.watchTarget()).isEmpty();
        assertThat(interrupts).as("the wait is left to end by itself, not cut").hasValue(0);

        // The released holder's session ends: the watcher's answer arrives after the grant.
        l.waitEnded(FencingToken.of(7), true, null);
        l.step();
        assertThat(takeOvers).as("a leader takes nothing over").isEmpty();
        assertThat(l.takeWatchCommands())
                .as("the lock is let go, and no new wait begins")
                .containsExactly(unlock(7));
        assertThat(l.current()).map(Grant::token).contains(FencingToken.of(8));
        assertThat(l.acquisitions()).isEqualTo(1);
        l.close();
    }

    @Test
    void race_theSessionEndedAnswerArrivesAfterTheHolderCameBack_theFollowerTakesOverAndTheHolderIsFenced() {
        Leadership l = following();
        // The holder's session ended (a restart of its process, say) and it came back on a new one
        // and renewed token 7 before this answer was handled. The ended session is proof enough:
        // the takeover moves the token, so whatever the returning holder writes under 7 is refused.
        holderRemaining = Duration.ofSeconds(10);
        l.waitEnded(FencingToken.of(7), true, null);
        int before = changes.get();
        l.step();
        assertThat(takeOvers).containsExactly(7L);
        assertThat(l.current()).map(Grant::token).contains(FencingToken.of(8));
        assertThat(l.fastTakeoverCount()).isEqualTo(1);
        assertThat(changes.get()).as("the worker is told").isEqualTo(before + 1);
        assertThat(l.takeWatchCommands()).containsExactly(unlock(7));

        // The same answer twice (it cannot come twice; if it did) changes nothing.
        l.waitEnded(FencingToken.of(7), true, null);
        l.step();
        assertThat(takeOvers).containsExactly(7L);
        l.close();
    }

    @Test
    void aStepDownByTheWorkStopsHandingOutTheGrantAtOnce_andTheLeaseThreadTellsTheListeners() {
        Leadership l = leadership();
        answers.add(1L);
        l.step();
        Grant g = l.current().orElseThrow();
        int before = changes.get();
        l.stepDown(g, "guard rejected");
        assertThat(l.current()).isEmpty();
        assertThat(l.state()).isEqualTo(Leadership.State.FOLLOWER);
        assertThat(changes.get()).as("not on the worker's thread").isEqualTo(before);
        holderRemaining = null;
        l.step();
        assertThat(changes.get()).isEqualTo(before + 1);
        l.close();
    }

    private Leadership leadership() {
        Leadership l = new Leadership("r", "me", script, LEASE, MARGIN, ticker, new SimpleMeterRegistry());
        l.onChange(changes::incrementAndGet);
        return l;
    }

    @Test
    void grantIsHandedOutOnlyUntilTheLocalDeadlineLessTheMargin() {
        Leadership l = leadership();
        answers.add(1L);
        l.attempt();
        assertThat(l.state()).isEqualTo(Leadership.State.LEADER);
        assertThat(l.current()).map(Grant::token).contains(FencingToken.of(1));

        now += Duration.ofSeconds(7).toNanos();
        assertThat(l.current()).as("7.0 s into a 10 s lease, margin 2 s").isPresent();
        now += Duration.ofMillis(1001).toNanos();
        assertThat(l.current())
                .as("8.001 s into a 10 s lease: stop starting work")
                .isEmpty();
        assertThat(l.state()).as("still leader until a renewal says otherwise").isEqualTo(Leadership.State.LEADER);

        int before = changes.get();
        answers.add(1L);
        l.attempt();
        assertThat(l.current())
                .as("a renewal moves the deadline")
                .map(Grant::token)
                .contains(FencingToken.of(1));
        assertThat(changes.get())
                .as("the worker is woken when a lapsed deadline is lifted")
                .isEqualTo(before + 1);
    }

    @Test
    void aFollowerAsksAgainOnlyWhenTheHoldersLeaseCanHaveExpired() {
        Leadership l = leadership();
        holderRemaining = Duration.ofMillis(6500);
        answers.add("another holder");
        l.attempt();
        assertThat(l.state()).isEqualTo(Leadership.State.FOLLOWER);

        // The periodic attempts before the holder's expiry send nothing: the script has no answer
        // queued, so a statement would fail the test with NoSuchElementException.
        now += Duration.ofSeconds(3).toNanos();
        l.attempt();
        now += Duration.ofSeconds(3).toNanos();
        l.attempt();
        assertThat(answers).isEmpty();

        // Past the expiry (plus a few milliseconds of slack), the next attempt asks and acquires.
        now += Duration.ofMillis(510).toNanos();
        answers.add(2L);
        l.attempt();
        assertThat(l.state()).isEqualTo(Leadership.State.LEADER);
        assertThat(answers).isEmpty();

        // A leader renews on every attempt, whatever it read as a follower.
        answers.add(2L);
        l.attempt();
        assertThat(answers).isEmpty();
        l.close();
    }

    @Test
    void aFollowerThatCannotReadTheExpiryKeepsAskingEveryInterval() {
        Leadership l = leadership();
        holderRemaining = null;
        answers.add("another holder");
        l.attempt();
        now += Duration.ofSeconds(3).toNanos();
        answers.add("another holder");
        l.attempt();
        assertThat(answers).as("the second periodic attempt asked").isEmpty();
        l.close();
    }

    @Test
    void aFailedRenewalStepsDownAtOnceAndAnEmptyOneToo() {
        Leadership l = leadership();
        answers.add(1L);
        l.attempt();
        answers.add(new IllegalStateException("connection refused"));
        l.attempt();
        assertThat(l.state()).isEqualTo(Leadership.State.FOLLOWER);
        assertThat(l.current()).isEmpty();
        assertThat(l.databaseReachable()).isFalse();

        answers.add(2L);
        l.attempt();
        assertThat(l.current()).map(Grant::token).contains(FencingToken.of(2));
        answers.add("none");
        l.attempt();
        assertThat(l.state()).isEqualTo(Leadership.State.FOLLOWER);
        assertThat(l.databaseReachable()).isTrue();
        assertThat(l.acquisitions()).isEqualTo(2);
    }

    @Test
    void aGuardRejectionStepsDownOnlyTheGrantItWasFor() {
        Leadership l = leadership();
        answers.add(1L);
        l.attempt();
        Grant old = l.current().orElseThrow();
        answers.add(2L);
        l.attempt();
        l.stepDown(old, "guard rejected an older grant");
        assertThat(l.current())
                .as("a newer grant survives a step-down for an older one")
                .map(Grant::token)
                .contains(FencingToken.of(2));
        l.stepDown(l.current().orElseThrow(), "guard rejected");
        assertThat(l.state()).isEqualTo(Leadership.State.FOLLOWER);
    }

    @Test
    void stopReleasesOnlyWhenLeader() {
        Leadership follower = leadership();
        answers.add("none");
        follower.attempt();
        follower.stopAndRelease();
        assertThat(released).hasValue(0);

        Leadership leader = leadership();
        answers.add(5L);
        leader.attempt();
        leader.stopAndRelease();
        assertThat(released).hasValue(1);
        assertThat(leader.state()).isEqualTo(Leadership.State.STOPPED);
        assertThat(leader.current()).isEmpty();
    }

    @Test
    void backoffGrowsWithFailuresWithinItsBounds() {
        Backoff b = new Backoff(Duration.ofMillis(100), Duration.ofSeconds(1));
        for (int i = 0; i < 20; i++) {
            long pause = b.nextNanos();
            long ceiling = Math.min(
                    Duration.ofMillis(100).toNanos() << Math.min(i, 30),
                    Duration.ofSeconds(1).toNanos());
            assertThat(pause).isBetween(ceiling / 2, ceiling);
        }
        b.reset();
        assertThat(b.nextNanos()).isLessThanOrEqualTo(Duration.ofMillis(100).toNanos());
    }
}
