package dev.fencedjobs.dispatcher;

import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.testing.PostgresExtension;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * While it is busy, the leader starts its batches after the last job it completed instead of at
 * the left of {@code jobs_pending_due}; no job behind that position is left there: one inserted
 * due earlier (it notifies), and one that another transaction held locked when the batches passed
 * it, with no notification to send them back (the batch from the start, every second).
 */
class ScanPositionTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private DispatcherFixture fixture;
    private final List<JobBatches.Position> starts = new CopyOnWriteArrayList<>();
    private final AtomicBoolean loading = new AtomicBoolean(true);
    private final AtomicReference<Exception> loadFailure = new AtomicReference<>();
    private Thread load;
    private Object tokenAtStart;

    @BeforeEach
    void startBusyLeader() {
        var db = postgres.database();
        fixture = new DispatcherFixture(db.url(), db.user(), db.password());
        fixture.start(
                fixture.config(new LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW), 500),
                UnaryOperator.identity(),
                delegate -> new TimedBatches(
                        new ObservedBatches(delegate, after -> starts.add(after == null ? FROM_START : after))));
        await().atMost(Duration.ofSeconds(10))
                .until(() -> fixture.leader()
                        .map(d -> d.state() == RunningService.State.LEADING)
                        .orElse(false));
        // A steady stream of jobs due at once keeps the leader busy, so that its batches start after a
        // position. At most 1,000 wait at a time: an offered load the machine cannot follow (CI
        // builds root filesystems beside the tests) would grow the backlog without end instead.
        load = new Thread(
                () -> {
                    try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                            Statement s = c.createStatement()) {
                        int lastRows = -1;
                        while (loading.get()) {
                            long began = System.nanoTime();
                            int rows = s.executeUpdate(
                                    "INSERT INTO jobs (resource, due_at) SELECT 'load', clock_timestamp() FROM generate_series(1, 20)"
                                            + " WHERE (SELECT count(*) FROM jobs WHERE state = 'pending') < 1000");
                            long took = System.nanoTime() - began;
                            if ((rows == 0) != (lastRows == 0) || took > SLOW) {
                                event(
                                        began,
                                        "load inserted " + rows + " in " + took / 1_000_000 + " ms"
                                                + (rows == 0 ? " (1,000 jobs waiting), and so on" : ""));
                            }
                            lastRows = rows;
                            Thread.sleep(5);
                        }
                    } catch (Exception e) {
                        loadFailure.set(e);
                    }
                },
                "load");
        load.start();
        await().atMost(Duration.ofSeconds(10)).until(() -> starts.stream().anyMatch(p -> !FROM_START.equals(p)));
        tokenAtStart = fixture.leader().orElseThrow().status().get("token");
    }

    @AfterEach
    void stop() throws Exception {
        loading.set(false);
        load.join();
        assertThat(loadFailure.get()).isNull();
        await().atMost(Duration.ofSeconds(10)).until(() -> fixture.pending() == 0);
        fixture.assertExactlyOnceWithOutbox(fixture.completed());
        fixture.close();
    }

    /** The load's inserts slower than this go into the timeline. */
    private static final long SLOW = Duration.ofMillis(100).toNanos();

    private static final int TIMELINE = 1000;
    private final long testStart = System.nanoTime();
    /** The last {@value #TIMELINE} batches and next-due reads, and the load's slow or empty inserts: what a failure prints. */
    private final ConcurrentLinkedDeque<String> timeline = new ConcurrentLinkedDeque<>();

    private void event(long startedNanos, String what) {
        timeline.add(String.format("%9.3f s %s", (startedNanos - testStart) / 1e9, what));
        while (timeline.size() > TIMELINE) {
            timeline.poll();
        }
    }

    private String timeline() {
        return String.join("\n", timeline) + "\nleader: "
                + fixture.leader().map(d -> d.status().toString()).orElse("none") + "\npending: " + fixture.pending();
    }

    /** Puts each batch and next-due read in the timeline: when it began, where from, how long it took, what it did. */
    private final class TimedBatches extends ForwardingBatches {

        TimedBatches(JobBatches delegate) {
            super(delegate);
        }

        @Override
        public BatchResult completeDue(Grant grant, int limit, Position after, String startKey) {
            long began = System.nanoTime();
            try {
                BatchResult r = super.completeDue(grant, limit, after, startKey);
                event(
                        began,
                        "batch " + (after == null ? "from the start" : "from a position") + " under " + grant.token()
                                + ": " + r.completed() + " jobs, lease held " + r.leaseHeld() + ", "
                                + (System.nanoTime() - began) / 1_000_000 + " ms");
                return r;
            } catch (RuntimeException e) {
                event(began, "batch failed after " + (System.nanoTime() - began) / 1_000_000 + " ms: " + e);
                throw e;
            }
        }

        @Override
        public NextDue nextDue(Position after) {
            long began = System.nanoTime();
            NextDue n = super.nextDue(after);
            event(
                    began,
                    "next due "
                            + (n.earliestDueMillis() == Long.MAX_VALUE
                                    ? "none"
                                    : (n.earliestDueMillis() - n.databaseNowMillis()) + " ms from now")
                            + ", " + (System.nanoTime() - began) / 1_000_000 + " ms");
            return n;
        }
    }

    private static final JobBatches.Position FROM_START =
            new JobBatches.Position(java.time.OffsetDateTime.MIN, Long.MIN_VALUE);

    @Test
    void aJobInsertedDueBeforeThePositionIsCompleted() {
        long id = fixture.dsl()
                .fetchOne(
                        "INSERT INTO jobs (resource, due_at) VALUES ('early', clock_timestamp() - interval '1 hour') RETURNING id")
                .get(0, Long.class);

        await().atMost(Duration.ofSeconds(10)).until(() -> state(id).equals("completed"));
    }

    @Test
    void aJobLockedWhileTheBatchesPassedItIsCompletedOnceReleased() throws Exception {
        // No notification at all from here on, so nothing but the periodic batch from the start can
        // find the job (late notifications of completed jobs would otherwise send batches back too).
        fixture.dsl().execute("ALTER TABLE jobs DISABLE TRIGGER jobs_notify_inserted");
        var db = postgres.database();
        long id;
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password())) {
            c.setAutoCommit(false);
            try (Statement s = c.createStatement()) {
                // Due in two seconds, so that it is locked before any batch can take it.
                s.execute(
                        "INSERT INTO jobs (resource, due_at) VALUES ('locked', clock_timestamp() + interval '2 seconds')");
                c.commit();
                id = fixture.dsl()
                        .fetchOne("SELECT id FROM jobs WHERE resource = 'locked'")
                        .get(0, Long.class);
                // A producer holds the row (an update it has not committed yet) while it falls due and later jobs are
                // completed past it.
                s.execute("SELECT id FROM jobs WHERE id = " + id + " FOR UPDATE");
                await().atMost(Duration.ofSeconds(10))
                        .until(() -> fixture.dsl()
                                .fetchOne("SELECT due_at < clock_timestamp() FROM jobs WHERE id = " + id)
                                .get(0, Boolean.class));
                long completedBefore = fixture.completed();
                await().atMost(Duration.ofSeconds(10)).until(() -> fixture.completed() > completedBefore + 200);
                // The batches have passed it: the last one started after it. A leader that had fallen
                // behind the load (a slower server: Testcontainers' was, through Docker's port mapping) would
                // reach it from its position once released, and the batch from the start would prove nothing.
                JobBatches.Position locked = new JobBatches.Position(
                        fixture.dsl()
                                .fetchOne("SELECT due_at FROM jobs WHERE id = " + id)
                                .get(0, java.time.OffsetDateTime.class),
                        id);
                await().atMost(Duration.ofSeconds(10))
                        .until(() -> starts.get(starts.size() - 1).isAfter(locked));
                assertThat(state(id)).as("SKIP LOCKED passed it").isEqualTo("pending");
                c.commit();
            }
        }
        long fromStartBefore = starts.stream().filter(p -> FROM_START.equals(p)).count();

        await().atMost(Duration.ofSeconds(10)).until(() -> state(id).equals("completed"));
        assertThat(starts.stream().filter(p -> FROM_START.equals(p)).count())
                .as("a batch from the start found it")
                .isGreaterThan(fromStartBefore);
    }

    @Test
    @SuppressWarnings("unchecked")
    void notificationsOfJobsTheBatchesAlreadyCompletedSendNoBatchBack() {
        // The load inserts due jobs one statement at a time, 5 ms apart, and most of its
        // notifications arrive after a batch has completed their jobs: each batch that did saw the
        // inserting transaction, so none of them may send the next batch back to the start.
        Dispatcher leader = fixture.leader().orElseThrow();
        // 300 batches from a position, however fast the server makes them (about 7 a second through
        // Testcontainers' port mapping here, several times that embedded): the wait fails only if the batches stop.
        long afterPosition = positioned();
        long[] progress = {afterPosition, System.nanoTime()};
        await().atMost(Duration.ofMinutes(5))
                .pollInterval(Duration.ofMillis(100))
                .until(() -> {
                    long now = positioned();
                    if (now > progress[0]) {
                        progress[0] = now;
                        progress[1] = System.nanoTime();
                    }
                    assertThat(System.nanoTime() - progress[1])
                            .as(() -> "nanoseconds without a batch from a position; the timeline:\n" + timeline())
                            .isLessThan(Duration.ofSeconds(10).toNanos());
                    return now > afterPosition + 300;
                });

        Map<String, Long> sentBack = (Map<String, Long>) leader.status().get("batchesSentBack");
        assertThat(sentBack).as("batches sent back, by reason").doesNotContainKey("notification");
        assertThat(leader.status().get("token")).as("one tenure all along").isEqualTo(tokenAtStart);
    }

    private long positioned() {
        return starts.stream().filter(p -> !FROM_START.equals(p)).count();
    }

    private String state(long id) {
        return fixture.dsl()
                .select(JOBS.STATE)
                .from(JOBS)
                .where(JOBS.ID.eq(id))
                .fetchSingle()
                .value1();
    }
}
