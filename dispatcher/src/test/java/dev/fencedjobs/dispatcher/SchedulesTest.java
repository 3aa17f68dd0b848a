package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.PostgresExtension;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import org.jooq.Record;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Recurring schedules against a real PostgreSQL and real dispatcher replicas: every occurrence
 * becomes exactly one job or one recorded skip, through takeovers, pauses and time without a leader.
 */
class SchedulesTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void everyOccurrenceBecomesOneJobThroughTakeovers() throws Exception {
        var db = postgres.database();
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            fixture.start();
            fixture.start();
            fixture.dsl()
                    .execute(
                            "INSERT INTO schedules (name, every, resource, payload) VALUES ('tick', interval '100 milliseconds', 'r-1', '{\"n\": 1}')");
            for (int handoff = 0; handoff < 2; handoff++) {
                long before = fired(fixture, "tick");
                await().atMost(Duration.ofSeconds(30)).until(() -> fired(fixture, "tick") >= before + 10);
                Dispatcher leader = fixture.leader().orElseThrow();
                leader.close();
                fixture.start();
            }
            long settled = fired(fixture, "tick");
            await().atMost(Duration.ofSeconds(30)).until(() -> fired(fixture, "tick") >= settled + 10);

            assertCoveredExactlyOnce(fixture, "tick", Duration.ofMillis(100));
            assertThat(fixture.dsl().fetchCount(fixture.dsl().selectFrom("schedule_skips")))
                    .as("no occurrence skipped: no leader was away a minute")
                    .isZero();
            Record job = fixture.dsl()
                    .fetchOne(
                            "SELECT resource, payload::text AS payload, submitted_by FROM jobs WHERE unique_key LIKE 'schedule:tick@%' LIMIT 1");
            assertThat(job.get("resource", String.class)).isEqualTo("r-1");
            assertThat(job.get("payload", String.class)).isEqualTo("{\"n\": 1}");
            assertThat(job.get("submitted_by", String.class)).isEqualTo("schedule:tick");
            // The dispatcher completes them as any other job.
            await().atMost(Duration.ofSeconds(30))
                    .until(() -> num(
                                    fixture,
                                    "SELECT count(*) FILTER (WHERE state = 'pending' AND due_at < clock_timestamp() - interval '2 seconds') FROM jobs")
                            == 0);
        }
    }

    @Test
    void occurrencesMissedWhileNobodyLedFollowEachSchedulesPolicyAndAreRecorded() throws Exception {
        var db = postgres.database();
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            // Ninety minutes of a ten-minute schedule with no dispatcher running: occurrences 90:30, 80:30 …
            // 0:30 minutes ago. With a grace of five minutes all but the last were missed; the next one is
            // 9:30 minutes away, so however slow the machine, the test decides exactly these ten.
            for (String policy : List.of("all", "latest", "skip")) {
                fixture.dsl()
                        .execute(
                                "INSERT INTO schedules (name, every, misfire, starts_at) VALUES (?, interval '10 minutes', ?, "
                                        + "date_trunc('second', clock_timestamp()) - interval '90 minutes 30 seconds')",
                                "missed-" + policy,
                                policy);
            }
            DispatcherConfig base = fixture.config(
                    new dev.fencedjobs.lease.LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW), 500);
            fixture.start(
                    new DispatcherConfig(
                            base.service(),
                            base.lease(),
                            base.batchSize(),
                            base.jobsRetention(),
                            Duration.ofMinutes(5)),
                    java.util.function.UnaryOperator.identity(),
                    java.util.function.UnaryOperator.identity());
            for (String policy : List.of("all", "latest", "skip")) {
                await().atMost(Duration.ofSeconds(30)).until(() -> decided(fixture, "missed-" + policy) >= 10);
            }
            // 10 occurrences are past; the last within the grace.
            assertThat(fired(fixture, "missed-all")).isEqualTo(10);
            assertThat(skipped(fixture, "missed-all")).isZero();
            assertThat(fired(fixture, "missed-latest"))
                    .as("the latest missed one and the one within the grace")
                    .isEqualTo(2);
            assertThat(skipped(fixture, "missed-latest")).isEqualTo(8);
            assertThat(fired(fixture, "missed-skip"))
                    .as("only the one within the grace")
                    .isEqualTo(1);
            assertThat(skipped(fixture, "missed-skip")).isEqualTo(9);
            assertThat(str(fixture, "SELECT string_agg(DISTINCT reason, ',') FROM schedule_skips"))
                    .isEqualTo("misfire");
            for (String policy : List.of("all", "latest", "skip")) {
                assertCoveredExactlyOnce(fixture, "missed-" + policy, Duration.ofMinutes(10));
            }
        }
    }

    @Test
    void aPausedScheduleFiresNothingAndItsOccurrencesAreRecordedAsSkippedOnResume() throws Exception {
        var db = postgres.database();
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            fixture.start();
            fixture.dsl().execute("INSERT INTO schedules (name, every) VALUES ('p', interval '100 milliseconds')");
            await().atMost(Duration.ofSeconds(30)).until(() -> fired(fixture, "p") >= 5);
            fixture.dsl()
                    .execute("INSERT INTO schedules (name, every) VALUES ('control', interval '100 milliseconds')");
            await().atMost(Duration.ofSeconds(30)).until(() -> fired(fixture, "control") >= 1);
            fixture.dsl().execute("UPDATE schedules SET paused = true WHERE name = 'p'");
            long atPause = fired(fixture, "p");
            long controlAtPause = fired(fixture, "control");
            // The firer is at work meanwhile: a schedule beside it, not paused, fires ten times (a
            // second of occurrences of both passes).
            await().atMost(Duration.ofSeconds(30)).until(() -> fired(fixture, "control") >= controlAtPause + 10);
            assertThat(fired(fixture, "p")).as("nothing fires while paused").isEqualTo(atPause);
            fixture.dsl().execute("UPDATE schedules SET paused = false WHERE name = 'p'");
            await().atMost(Duration.ofSeconds(30)).until(() -> skipped(fixture, "p") >= 8);
            long afterResume = fired(fixture, "p");
            await().atMost(Duration.ofSeconds(30)).until(() -> fired(fixture, "p") >= afterResume + 5);
            assertThat(str(fixture, "SELECT string_agg(reason, ',') FROM schedule_skips WHERE schedule_name = 'p'"))
                    .isEqualTo("paused");
            assertCoveredExactlyOnce(fixture, "p", Duration.ofMillis(100));
        }
    }

    @Test
    void aRuleTheDispatcherCannotReadStopsOnlyThatScheduleAndSaysWhy() throws Exception {
        var db = postgres.database();
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            fixture.start();
            fixture.dsl().execute("INSERT INTO schedules (name, cron) VALUES ('bad', '61 * * * *')");
            fixture.dsl()
                    .execute(
                            "INSERT INTO schedules (name, cron, time_zone) VALUES ('nowhere', '* * * * *', 'Mars/Olympus')");
            fixture.dsl().execute("INSERT INTO schedules (name, every) VALUES ('good', interval '100 milliseconds')");
            await().atMost(Duration.ofSeconds(30)).until(() -> fired(fixture, "good") >= 3);
            await().atMost(Duration.ofSeconds(30)).until(() -> num(fixture, "SELECT count(error) FROM schedules") == 2);
            assertThat(str(fixture, "SELECT error FROM schedules WHERE name = 'bad'"))
                    .contains("cron '61 * * * *' is not a five-field Unix cron expression");
            assertThat(str(fixture, "SELECT error FROM schedules WHERE name = 'nowhere'"))
                    .contains("Mars/Olympus");
            // Correcting the rule clears the error, and the schedule starts.
            fixture.dsl().execute("UPDATE schedules SET cron = '* * * * *' WHERE name = 'bad'");
            assertThat(str(fixture, "SELECT error FROM schedules WHERE name = 'bad'"))
                    .isNull();
            await().atMost(Duration.ofSeconds(30))
                    .until(() ->
                            fixture.dsl().fetchValue("SELECT next_fire_at FROM schedules WHERE name = 'bad'") != null);
        }
    }

    private static long fired(DispatcherFixture fixture, String name) {
        return num(fixture, "SELECT count(*) FROM jobs WHERE unique_key LIKE ?", "schedule:" + name + "@%");
    }

    private static long skipped(DispatcherFixture fixture, String name) {
        return num(fixture, "SELECT coalesce(sum(occurrences), 0) FROM schedule_skips WHERE schedule_name = ?", name);
    }

    private static long num(DispatcherFixture fixture, String sql, Object... binds) {
        return fixture.dsl().fetchOne(sql, binds).get(0, Long.class);
    }

    private static String str(DispatcherFixture fixture, String sql, Object... binds) {
        return fixture.dsl().fetchOne(sql, binds).get(0, String.class);
    }

    private static long decided(DispatcherFixture fixture, String name) {
        return fired(fixture, name) + skipped(fixture, name);
    }

    /**
     * From the schedule's start to its next_fire_at, each occurrence of a fixed interval is one job
     * (key and due time) or inside one skip row, never both, never neither; and the schedule's
     * counters agree.
     */
    static void assertCoveredExactlyOnce(DispatcherFixture fixture, String name, Duration every) {
        // One snapshot for the schedule and its jobs and skips: the leader may still be firing, and it
        // commits each job with the position that says it exists, so in any snapshot they agree.
        fixture.dsl().transaction(c -> {
            org.jooq.DSLContext tx = c.dsl();
            tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
            assertCoveredExactlyOnce(tx, name, every);
        });
    }

    private static void assertCoveredExactlyOnce(org.jooq.DSLContext dsl, String name, Duration every) {
        Record s = dsl.fetchOne("SELECT starts_at, next_fire_at, fired, skipped FROM schedules WHERE name = ?", name);
        Instant start = s.get("starts_at", OffsetDateTime.class).toInstant();
        Instant next = s.get("next_fire_at", OffsetDateTime.class).toInstant();
        List<Instant> jobs = new ArrayList<>();
        for (Record r : dsl.fetch(
                "SELECT due_at, unique_key FROM jobs WHERE unique_key LIKE ? ORDER BY due_at",
                "schedule:" + name + "@%")) {
            Instant due = r.get("due_at", OffsetDateTime.class).toInstant();
            assertThat(r.get("unique_key", String.class)).isEqualTo(ScheduleFirer.key(name, due));
            jobs.add(due);
        }
        List<Instant[]> skips = new ArrayList<>();
        long skippedCount = 0;
        for (Record r : dsl.fetch(
                "SELECT first_fire_at, last_fire_at, occurrences FROM schedule_skips WHERE schedule_name = ?", name)) {
            skips.add(new Instant[] {
                r.get("first_fire_at", OffsetDateTime.class).toInstant(),
                r.get("last_fire_at", OffsetDateTime.class).toInstant()
            });
            skippedCount += r.get("occurrences", Long.class);
        }
        long n = 0;
        int j = 0;
        for (Instant t = start; t.isBefore(next); t = t.plus(every), n++) {
            boolean isJob = j < jobs.size() && jobs.get(j).equals(t);
            if (isJob) {
                j++;
            }
            Instant at = t;
            long inSkips = skips.stream()
                    .filter(r -> !at.isBefore(r[0]) && !at.isAfter(r[1]))
                    .count();
            assertThat((isJob ? 1 : 0) + inSkips)
                    .as("decisions for the occurrence at " + t)
                    .isEqualTo(1);
        }
        assertThat(j).as("jobs outside the schedule's occurrences").isEqualTo(jobs.size());
        assertThat(jobs.size() + skippedCount).isEqualTo(n);
        assertThat(s.get("fired", Long.class)).isEqualTo(jobs.size());
        assertThat(s.get("skipped", Long.class)).isEqualTo(skippedCount);
    }
}
