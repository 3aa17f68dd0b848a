package dev.fencedjobs.runtime;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.Grant;
import dev.fencedjobs.db.Lease;
import dev.fencedjobs.db.LeaseConfig;
import dev.fencedjobs.db.Ticker;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** Leadership's state machine, with a scripted lease and a settable clock: no database, no sleeps. */
class LeadershipTest {

    private static final LeaseConfig LEASE = new LeaseConfig(Duration.ofSeconds(10), Duration.ofSeconds(3));
    private static final Duration MARGIN = Duration.ofSeconds(2);

    private long now = 1_000_000_000L;
    private final Ticker ticker = () -> now;
    private final Deque<Object> answers = new ArrayDeque<>();
    private final AtomicInteger released = new AtomicInteger();
    private final AtomicInteger changes = new AtomicInteger();

    private final Leadership.LeaseOps script = new Leadership.LeaseOps() {
        @Override
        public Optional<Grant> acquireOrRenew() {
            Object next = answers.removeFirst();
            if (next instanceof RuntimeException e) {
                throw e;
            }
            return next instanceof Long token
                    ? Optional.of(new Grant("r", "me", token, OffsetDateTime.now(), now + LEASE.duration().toNanos()))
                    : Optional.empty();
        }

        @Override
        public boolean release(long token) {
            released.incrementAndGet();
            return true;
        }

        @Override
        public Optional<Lease.Holder> holder() {
            return Optional.ofNullable(holderRemaining).map(left -> new Lease.Holder("other", holderToken, left, signOfLife));
        }

        @Override
        public Optional<Grant> takeOver(long token) {
            takeOvers.add(token);
            return token == holderToken ? Optional.of(new Grant("r", "me", token + 1, OffsetDateTime.now(), now + LEASE.duration().toNanos()))
                    : Optional.empty();
        }
    };
    private Duration holderRemaining;
    private long holderToken = 7L;
    private boolean signOfLife;
    private final java.util.List<Long> takeOvers = new java.util.ArrayList<>();
    private final AtomicInteger interrupts = new AtomicInteger();

    /** The fast path's wait, never run here: the tests drive the lease thread's side. */
    private final Leadership.SessionWatch watch = new Leadership.SessionWatch() {
        @Override
        public boolean await(long token, Duration upTo) {
            throw new AssertionError("no watcher thread in this test");
        }

        @Override
        public void unlock(long token) {}

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
        assertThat(l.watchTarget()).as("no sign of life: nothing proves a crash, the expiry decides").isEmpty();

        signOfLife = true;
        now += Duration.ofMillis(6510).toNanos();
        answers.add("another holder");
        l.attempt();
        assertThat(l.watchTarget()).hasValue(7L);

        // The token moved on by expiry, with no sign of life yet: the wait for token 7 is dropped.
        holderToken = 8L;
        signOfLife = false;
        now += Duration.ofMillis(6510).toNanos();
        answers.add("another holder");
        l.attempt();
        assertThat(l.watchTarget()).isEmpty();
        assertThat(interrupts).as("no wait was in progress to cut").hasValue(0);
    }

    @Test
    void whenTheWatchedSessionEnds_theFollowerTakesOverAtOnceWithTheNextToken() {
        Leadership l = withFastPath();
        holderRemaining = Duration.ofSeconds(9);
        signOfLife = true;
        answers.add("another holder");
        l.attempt();
        int before = changes.get();

        l.takeOverFrom(7L);

        assertThat(takeOvers).containsExactly(7L);
        assertThat(l.state()).isEqualTo(Leadership.State.LEADER);
        assertThat(l.current()).map(Grant::token).contains(8L);
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
        l.takeOverFrom(7L);

        assertThat(takeOvers).containsExactly(7L);
        assertThat(l.state()).isEqualTo(Leadership.State.FOLLOWER);
        assertThat(answers).as("the ordinary attempt asked").isEmpty();
        assertThat(l.watchTarget()).as("and now waits for the new holder's session").hasValue(8L);
        assertThat(l.fastTakeoverCount()).isZero();
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
        assertThat(l.current()).map(Grant::token).contains(1L);

        now += Duration.ofSeconds(7).toNanos();
        assertThat(l.current()).as("7.0 s into a 10 s lease, margin 2 s").isPresent();
        now += Duration.ofMillis(1001).toNanos();
        assertThat(l.current()).as("8.001 s into a 10 s lease: stop starting work").isEmpty();
        assertThat(l.state()).as("still leader until a renewal says otherwise").isEqualTo(Leadership.State.LEADER);

        int before = changes.get();
        answers.add(1L);
        l.attempt();
        assertThat(l.current()).as("a renewal moves the deadline").map(Grant::token).contains(1L);
        assertThat(changes.get()).as("the worker is woken when a lapsed deadline is lifted").isEqualTo(before + 1);
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
        assertThat(l.current()).map(Grant::token).contains(2L);
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
        assertThat(l.current()).as("a newer grant survives a step-down for an older one").map(Grant::token).contains(2L);
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
            long ceiling = Math.min(Duration.ofMillis(100).toNanos() << Math.min(i, 30), Duration.ofSeconds(1).toNanos());
            assertThat(pause).isBetween(ceiling / 2, ceiling);
        }
        b.reset();
        assertThat(b.nextNanos()).isLessThanOrEqualTo(Duration.ofMillis(100).toNanos());
    }
}
