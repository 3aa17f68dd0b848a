package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.ScriptedGrants;
import dev.fencedjobs.runtime.internal.Next;
import dev.fencedjobs.runtime.internal.Tracing;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.opentelemetry.api.OpenTelemetry;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The dispatch loop's steps on a settable clock, with the jobs table in memory: what it does and
 * when it asks to be woken, exactly. One real-server test of the same paths is {@code DispatcherTest}.
 */
class DispatchLoopTest {

    private static final long DATABASE_EPOCH_MILLIS = 1_800_000_000_000L;
    private static final int BATCH = 3;

    private static final long START = TimeUnit.SECONDS.toNanos(5);

    private long now = START;
    private final Ticker ticker = () -> now;
    private final MemoryJobs jobs = new MemoryJobs(this::databaseMillis);
    private final ScriptedGrants grants = new ScriptedGrants("scheduler");
    private final DispatchLoop loop = new DispatchLoop(
            grants,
            jobs,
            BATCH,
            Duration.ofDays(7),
            ticker,
            new SimpleMeterRegistry(),
            Schedules.NONE,
            new Tracing(OpenTelemetry.noop()));

    /** Database time, epoch ms: it moves with the ticker, measured in differences (readings may wrap). */
    private long databaseMillis() {
        return DATABASE_EPOCH_MILLIS + (now - START) / 1_000_000;
    }

    private static long ms(long millis) {
        return TimeUnit.MILLISECONDS.toNanos(millis);
    }

    private void lead(long token) {
        jobs.heldToken = token;
        grants.lead(token);
    }

    private void notify(MemoryJobs.Job job) {
        loop.onNotification(Dispatcher.JOBS_DUE, MemoryJobs.payload(job));
    }

    @Test
    void aFollowerWaitsForLeadershipAndANewLeaderRunsABatchAtOnce() {
        MemoryJobs.Job due = jobs.insert(0);
        assertThat(loop.step()).isEqualTo(Next.await());
        assertThat(jobs.batchesAfter()).as("no grant, no statement").isEmpty();

        lead(1);
        assertThat(loop.step())
                .as("a job completed: batches start after it, and one reads from the start a second later")
                .isEqualTo(Next.sleepUntil(now + ms(1000)));
        assertThat(jobs.completedAt(due)).isEqualTo(DATABASE_EPOCH_MILLIS);

        now += ms(1000);
        assertThat(loop.step())
                .as("nothing pending, no position: sleep until woken")
                .isEqualTo(Next.await());
        assertThat(jobs.batchesAfter()).containsExactly(null, null);
    }

    @Test
    void aJobDueSoonIsCompletedAtItsDueTimeNotAtAPollOrARenewal() {
        lead(1);
        MemoryJobs.Job later = jobs.insert(3_600_000);
        assertThat(loop.step())
                .as("sleeps until the job due in an hour, plus the rounding millisecond")
                .isEqualTo(Next.sleepUntil(now + ms(3_600_001)));

        now += ms(100);
        MemoryJobs.Job soon = jobs.insert(300);
        notify(soon);
        long dueAt = now + ms(301);
        assertThat(loop.step()).as("the notification shortens the sleep").isEqualTo(Next.sleepUntil(dueAt));
        now = dueAt - 1;
        assertThat(loop.step()).as("a nanosecond early: still asleep").isEqualTo(Next.sleepUntil(dueAt));
        assertThat(jobs.batchesAfter()).as("no batch while asleep").hasSize(1);

        now = dueAt;
        assertThat(loop.step())
                .as("a job completed: batches start after it, and one reads from the start a second later")
                .isEqualTo(Next.sleepUntil(now + ms(1000)));
        assertThat(jobs.completedAt(soon))
                .as("completed in the millisecond after it was due")
                .isEqualTo(soon.dueMillis() + 1);
        assertThat(jobs.completedAt(later)).isNull();

        // A job moved earlier by an UPDATE notifies too.
        now += ms(200);
        MemoryJobs.Job moved = jobs.move(later, 0);
        notify(moved);
        assertThat(loop.step()).isEqualTo(Next.sleepUntil(now + ms(1)));
        now += ms(1);
        assertThat(loop.step()).isEqualTo(Next.sleepUntil(dueAt + ms(1000)));
        assertThat(jobs.completedAt(moved)).isEqualTo(moved.dueMillis() + 1);
        assertThat(jobs.batchesAfter())
                .as("from the start, from the start, after the first job completed")
                .containsExactly(null, null, soon.position());
    }

    @Test
    void whileBatchesStartAfterAPositionOneReadsFromTheStartEverySecond() {
        lead(1);
        MemoryJobs.Job first = jobs.insert(0);
        jobs.insert(60_000);
        long started = now;
        assertThat(loop.step()).isEqualTo(Next.sleepUntil(started + ms(1000)));
        now += ms(400);
        MemoryJobs.Job second = jobs.insert(0);
        notify(second);
        assertThat(loop.step()).as("due now, plus the rounding millisecond").isEqualTo(Next.sleepUntil(now + ms(1)));
        now += ms(1);
        assertThat(loop.step()).as("a batch after the position").isEqualTo(Next.sleepUntil(started + ms(1000)));
        assertThat(jobs.batchesAfter()).containsExactly(null, first.position());

        now = started + ms(1000);
        assertThat(loop.step())
                .as("nothing completed by the read from the start: no position, sleep until the job a minute away")
                .isEqualTo(Next.sleepUntil(started + ms(60_001)));
        assertThat(jobs.batchesAfter()).containsExactly(null, first.position(), null);
    }

    @Test
    void aNotificationBehindThePositionSendsTheNextBatchBackToTheStartUnlessTheBatchSawIt() {
        lead(1);
        MemoryJobs.Job first = jobs.insert(0);
        loop.step();
        // Seen by the batch that completed it: its late notification changes nothing.
        notify(first);
        now += ms(5);
        MemoryJobs.Job ahead = jobs.insert(0);
        notify(ahead);
        now += ms(1);
        loop.step();
        assertThat(jobs.batchesAfter()).containsExactly(null, first.position());

        // Due before the position, in a transaction no batch saw (a job locked when its turn came, say).
        now += ms(10);
        MemoryJobs.Job behind = jobs.insert(-15);
        assertThat(behind.position().isAfter(ahead.position())).isFalse();
        notify(behind);
        assertThat(loop.step())
                .as("already due; the batch from the start begins the next second")
                .isEqualTo(Next.sleepUntil(now + ms(1000)));
        assertThat(jobs.batchesAfter()).last().as("back to the start").isNull();
        assertThat(jobs.completedAt(behind)).isNotNull();
    }

    @Test
    void aJobDueInTheYear9999NeitherWakesTheLeaderNorStopsTheReadFromTheStart() {
        lead(1);
        MemoryJobs.Job first = jobs.insert(0);
        jobs.insert(253_402_300_799_000L - databaseMillis()); // 9999-12-31T23:59:59Z
        long started = now;
        assertThat(loop.step())
                .as("the read from the start a second later, not a sleep until 9999")
                .isEqualTo(Next.sleepUntil(started + ms(1000)));
        now += ms(1000);
        loop.step();
        assertThat(jobs.batchesAfter()).containsExactly(null, null);
        assertThat(jobs.completedAt(first)).isNotNull();
    }

    @Test
    void aFullBatchGoesAgainAtOnce() {
        lead(1);
        for (int i = 0; i < 7; i++) {
            jobs.insert(0);
        }
        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(loop.step()).isEqualTo(Next.again());
        assertThat(loop.step()).as("one left: a partial batch").isEqualTo(Next.sleepUntil(now + ms(1000)));
        assertThat(jobs.completed()).isEqualTo(7);
    }

    @Test
    void aRejectedGuardStepsDownWritingNothing() {
        lead(1);
        jobs.insert(0);
        jobs.heldToken = 2;
        assertThat(loop.step()).isEqualTo(Next.steppedDown("lease guard rejected token 1; nothing was written"));
        assertThat(grants.stepDowns()).containsExactly("lease guard rejected token 1; nothing was written");
        assertThat(jobs.completed()).isZero();
        assertThat(loop.step()).isEqualTo(Next.await());
    }

    @Test
    void aFailedBatchStepsDownAndBacksOffLongerEachTime() {
        lead(1);
        jobs.insert(0);
        jobs.failNext = new IllegalStateException("connection reset");
        Next first = loop.step();
        assertThat(first.kind()).isEqualTo(Next.Kind.BACK_OFF);
        assertThat(first.reason()).isEqualTo("batch failed (IllegalStateException)");
        assertThat(first.atNanos() - now).as("the first back-off: 25 to 50 ms").isBetween(ms(25), ms(50));
        assertThat(grants.stepDowns()).containsExactly("batch failed (IllegalStateException)");

        lead(1);
        jobs.failNext = new IllegalStateException("connection reset");
        assertThat(loop.step().atNanos() - now).as("the second: 50 to 100 ms").isBetween(ms(50), ms(100));
        lead(1);
        assertThat(loop.step()).as("a batch that works").isEqualTo(Next.sleepUntil(now + ms(1000)));
        assertThat(jobs.completed()).isEqualTo(1);
    }

    @Test
    void aLeadershipChangeEndsTheSleepAndANewGrantStartsFromTheStart() {
        lead(1);
        MemoryJobs.Job first = jobs.insert(0);
        jobs.insert(60_000);
        assertThat(loop.step()).isEqualTo(Next.sleepUntil(now + ms(1000)));
        grants.lose();
        assertThat(loop.step()).isEqualTo(Next.await());

        now += ms(200);
        MemoryJobs.Job next = jobs.insert(0);
        lead(2);
        loop.step();
        assertThat(jobs.batchesAfter()).as("the position belonged to token 1").containsExactly(null, null);
        assertThat(jobs.completedAt(next)).isNotNull();
        assertThat(jobs.completedAt(first)).isNotNull();
    }

    @Test
    void aLostNotificationStreamRunsABatchFromTheStartAtOnce() {
        lead(1);
        MemoryJobs.Job first = jobs.insert(0);
        jobs.insert(60_000);
        loop.step();
        loop.onListenerConnected();
        loop.step();
        assertThat(jobs.batchesAfter()).containsExactly(null, null);
        assertThat(jobs.completedAt(first)).isNotNull();
    }

    @Test
    void whileTheShardMapDrainsNoBatchRunsOnlyALockFreeLookEvery50MsThatNotificationsDoNotHurry() {
        lead(1);
        jobs.draining = true;
        MemoryJobs.Job due = jobs.insert(0);
        long drainSeen = now;
        assertThat(loop.step())
                .as("a batch that completed nothing, then the next-due read: the map drains")
                .isEqualTo(Next.sleepUntil(drainSeen + ms(50)));
        assertThat(jobs.batchesAfter()).hasSize(1);
        assertThat(jobs.nextDueReads()).isEqualTo(1);

        now += ms(10);
        notify(jobs.insert(0));
        assertThat(loop.step())
                .as("a producer's notification does not end the wait")
                .isEqualTo(Next.sleepUntil(drainSeen + ms(50)));
        now = drainSeen + ms(50);
        assertThat(loop.step()).as("still draining: another look in 50 ms").isEqualTo(Next.sleepUntil(now + ms(50)));
        assertThat(jobs.batchesAfter()).as("no batch while the map drains").hasSize(1);
        assertThat(jobs.nextDueReads()).isEqualTo(2);

        jobs.draining = false;
        now += ms(50);
        assertThat(loop.step()).as("switched: jobs are due, a batch at once").isEqualTo(Next.again());
        loop.step();
        assertThat(jobs.batchesAfter()).hasSize(2);
        assertThat(jobs.completedAt(due)).isNotNull();
    }

    @Test
    void stopEndsTheLoop() {
        lead(1);
        loop.stop();
        assertThat(loop.step()).isEqualTo(Next.stopped());
        assertThat(jobs.batchesAfter()).isEmpty();
    }
}
