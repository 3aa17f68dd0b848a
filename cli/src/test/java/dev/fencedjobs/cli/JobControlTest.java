package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.dispatcher.DispatcherConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Producers' control over the jobs they submitted, within least privilege: each application logs
 * in as its own role, a member of fj_producer; it learns its jobs' ids, reads their state, and
 * cancels or reschedules them, and can do none of that to another application's jobs. Against a
 * real PostgreSQL and a real dispatcher.
 */
class JobControlTest {

    @RegisterExtension
    static final PostgresExtension postgres = new PostgresExtension();

    @BeforeAll
    static void rolesAndTwoApplications() throws Exception {
        CliTest.Run run = cli(
                Map.of("FJ_PRODUCER_PASSWORD", "p-secret", "FJ_DISPATCHER_PASSWORD", "d-secret"), "migrate", "--roles");
        assertThat(run.code()).as(run.err()).isZero();
        TestDatabase db = postgres.database();
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement()) {
            s.execute("CREATE ROLE billing LOGIN PASSWORD 'b-secret' IN ROLE fj_producer");
            s.execute("CREATE ROLE shipping LOGIN PASSWORD 's-secret' IN ROLE fj_producer");
        }
    }

    static CliTest.Run cli(Map<String, String> extraEnv, String... args) {
        return CliTest.cli(postgres.database(), extraEnv, args);
    }

    private static Connection as(String role, String password) throws SQLException {
        return DriverManager.getConnection(postgres.database().url(), role, password);
    }

    private static long submit(Connection c, String due, String key) throws SQLException {
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("INSERT INTO jobs (due_at, resource, payload, unique_key) VALUES (" + due
                        + ", 'acct-1', '{\"x\": 1}', " + (key == null ? "NULL" : "'" + key + "'") + ") RETURNING id")) {
            assertThat(rs.next())
                    .as("INSERT ... RETURNING id tells the producer its job's id")
                    .isTrue();
            return rs.getLong(1);
        }
    }

    private static String state(Connection c, long id) throws SQLException {
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT state FROM my_jobs WHERE id = " + id)) {
            return rs.next() ? rs.getString(1) : null;
        }
    }

    private static long call(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(sql)) {
            rs.next();
            return rs.getLong(1);
        }
    }

    @Test
    void aProducerSeesCancelsAndReschedulesItsOwnJobsAndNoOneElses() throws Exception {
        try (Connection billing = as("billing", "b-secret");
                Connection shipping = as("shipping", "s-secret")) {
            long id = submit(billing, "clock_timestamp() + interval '1 hour'", "invoice-7");
            assertThat(state(billing, id)).isEqualTo("pending");
            try (Statement s = billing.createStatement();
                    ResultSet rs = s.executeQuery(
                            "SELECT unique_key, resource, payload::text, submitted_by FROM my_jobs WHERE id = " + id)) {
                assertThat(rs.next()).isTrue();
                assertThat(rs.getString(1)).isEqualTo("invoice-7");
                assertThat(rs.getString(3)).isEqualTo("{\"x\": 1}");
                assertThat(rs.getString(4)).isEqualTo("billing");
            }
            // Another application sees nothing of it and can change nothing of it.
            assertThat(state(shipping, id)).isNull();
            assertThatThrownBy(() -> call(shipping, "SELECT cancel_job(" + id + ")"))
                    .hasMessageContaining("no job " + id + " submitted by shipping");
            assertThatThrownBy(() -> call(shipping, "SELECT reschedule_job_by_key('invoice-7', clock_timestamp())"))
                    .hasMessageContaining("no job with key invoice-7 submitted by shipping");
            assertThatThrownBy(() -> call(shipping, "SELECT state FROM jobs"))
                    .hasMessageContaining("permission denied");

            // Reschedule by key, then cancel by id; a second cancel changes nothing.
            assertThat(call(
                            billing,
                            "SELECT reschedule_job_by_key('invoice-7', clock_timestamp() + interval '2 hours')"))
                    .isEqualTo(id);
            assertThat(call(
                            billing,
                            "SELECT count(*) FROM my_jobs WHERE id = " + id
                                    + " AND due_at > clock_timestamp() + interval '90 minutes'"))
                    .isEqualTo(1);
            assertThat(call(billing, "SELECT cancel_job(" + id + ")")).isEqualTo(id);
            assertThat(state(billing, id)).isEqualTo("cancelled");
            assertThat(call(billing, "SELECT cancel_job_by_key('invoice-7')")).isEqualTo(id);
            assertThatThrownBy(() -> call(billing, "SELECT reschedule_job(" + id + ", clock_timestamp())"))
                    .hasMessageContaining("job " + id + " was cancelled at")
                    .hasMessageContaining("cannot be rescheduled");
            // The state machine holds for the owner too: a cancelled job is final.
            TestDatabase db = postgres.database();
            try (Connection owner = DriverManager.getConnection(db.url(), db.user(), db.password())) {
                assertThatThrownBy(() -> owner.createStatement()
                                .execute("UPDATE jobs SET state = 'pending', cancelled_at = NULL WHERE id = " + id))
                        .hasMessageContaining("a cancelled job is never changed");
            }
            // The roles the services use cannot cancel anything.
            assertThatThrownBy(() -> {
                        try (Connection d = as("fj_dispatcher", "d-secret")) {
                            call(d, "SELECT cancel_job(" + id + ")");
                        }
                    })
                    .hasMessageContaining("permission denied");
        }
    }

    @Test
    void aCancelledJobIsNeverCompletedAndCancellingACompletedOneSaysSo() throws Exception {
        TestDatabase db = postgres.database();
        DatabaseConfig dispatcherDb = DatabaseConfig.of(db.url(), "fj_dispatcher", "d-secret")
                .withConnectTimeout(Duration.ofSeconds(1))
                .withServerTimeouts(Duration.ofMillis(500), Duration.ofMillis(500), Duration.ofSeconds(1));
        try (Connection billing = as("billing", "b-secret");
                Connection owner = DriverManager.getConnection(db.url(), db.user(), db.password())) {
            // Due now and cancelled before any dispatcher runs: the first batch would complete it, were it pending.
            long cancelled = submit(billing, "clock_timestamp()", null);
            assertThat(call(billing, "SELECT cancel_job(" + cancelled + ")")).isEqualTo(cancelled);
            try (Dispatcher dispatcher = Dispatcher.builder(new DispatcherConfig(
                            new ServiceConfig(dispatcherDb, 0, Duration.ofSeconds(10), false),
                            new LeaseConfig(Duration.ofSeconds(2), Duration.ofMillis(500)),
                            100))
                    .start()) {
                long now = submit(billing, "clock_timestamp()", null);
                await().atMost(Duration.ofSeconds(30)).until(() -> "completed".equals(state(billing, now)));
                assertThat(state(billing, cancelled)).isEqualTo("cancelled");
                assertThat(call(owner, "SELECT count(*) FROM outbox WHERE job_id = " + cancelled))
                        .isZero();
                assertThatThrownBy(() -> call(billing, "SELECT cancel_job(" + now + ")"))
                        .hasMessageContaining("job " + now + " was already completed at")
                        .hasMessageContaining("it cannot be cancelled");

                // Moving a job far ahead to now: the dispatcher is woken and completes it.
                long ahead = submit(billing, "clock_timestamp() + interval '1 day'", "ahead-1");
                assertThat(call(billing, "SELECT reschedule_job_by_key('ahead-1', clock_timestamp())"))
                        .isEqualTo(ahead);
                await().atMost(Duration.ofSeconds(30)).until(() -> "completed".equals(state(billing, ahead)));
            }
        }
    }

    @Test
    void theDispatchersRoleFiresSchedulesAndCanInsertNoOtherJob() throws Exception {
        TestDatabase db = postgres.database();
        DatabaseConfig dispatcherDb = DatabaseConfig.of(db.url(), "fj_dispatcher", "d-secret")
                .withConnectTimeout(Duration.ofSeconds(1))
                .withServerTimeouts(Duration.ofMillis(500), Duration.ofMillis(500), Duration.ofSeconds(1));
        try (Connection owner = DriverManager.getConnection(db.url(), db.user(), db.password());
                Dispatcher dispatcher = Dispatcher.builder(new DispatcherConfig(
                                new ServiceConfig(dispatcherDb, 0, Duration.ofSeconds(10), false),
                                new LeaseConfig(Duration.ofSeconds(2), Duration.ofMillis(500)),
                                100))
                        .start()) {
            owner.createStatement()
                    .execute(
                            "INSERT INTO schedules (name, every, resource, payload) VALUES ('lp', interval '100 milliseconds', 'r', '{\"a\": 1}')");
            await().atMost(Duration.ofSeconds(30))
                    .until(() -> call(
                                    owner,
                                    "SELECT count(*) FROM jobs WHERE unique_key LIKE 'schedule:lp@%' AND state = 'completed'")
                            >= 5);
            owner.createStatement().execute("DELETE FROM schedules WHERE name = 'lp'");
            try (Connection d = as("fj_dispatcher", "d-secret");
                    Statement s = d.createStatement()) {
                assertThatThrownBy(
                                () -> s.execute(
                                        "INSERT INTO jobs (due_at, resource, payload, unique_key, submitted_by) "
                                                + "VALUES (clock_timestamp(), 'r', '{\"a\": 1}', 'schedule:lp@2030-01-01T00:00:00Z', 'schedule:lp')"))
                        .as("the schedule is gone")
                        .hasMessageContaining(
                                "permission denied: fj_dispatcher may complete jobs, so it inserts only the occurrences");
                owner.createStatement()
                        .execute(
                                "INSERT INTO schedules (name, every, paused) VALUES ('other', interval '1 hour', true)");
                assertThatThrownBy(
                                () -> s.execute(
                                        "INSERT INTO jobs (due_at, resource, payload, unique_key, submitted_by) "
                                                + "VALUES (clock_timestamp(), 'default', '{\"forged\": true}', 'schedule:other@2030-01-01T00:00:00Z', 'schedule:other')"))
                        .as("not the schedule's payload")
                        .hasMessageContaining("permission denied");
            } finally {
                owner.createStatement().execute("DELETE FROM schedules WHERE name = 'other'");
            }
        }
    }

    @Test
    void theCliCancelsAndReschedulesAndSaysWhyWhenItCannot() throws Exception {
        Map<String, String> asBilling = Map.of("DATABASE_USER", "billing", "DATABASE_PASSWORD", "b-secret");
        long id;
        try (Connection billing = as("billing", "b-secret")) {
            id = submit(billing, "clock_timestamp() + interval '1 day'", "cli-1");
        }
        CliTest.Run moved = cli(asBilling, "reschedule", "--key", "cli-1", "--due", "+2h");
        assertThat(moved.code()).as(moved.err()).isZero();
        assertThat(moved.out()).startsWith("Job " + id + " is now due ");
        CliTest.Run cancelled = cli(asBilling, "cancel", "--id", String.valueOf(id));
        assertThat(cancelled.code()).as(cancelled.err()).isZero();
        assertThat(cancelled.out()).startsWith("Job " + id + " is cancelled (since ");

        CliTest.Run again = cli(asBilling, "reschedule", "--id", String.valueOf(id), "--due", "now");
        assertThat(again.code()).isEqualTo(1);
        assertThat(again.err())
                .isEqualTo("fenced-jobs reschedule: job " + id + " was cancelled at "
                        + again.err()
                                .substring(
                                        again.err().indexOf(" at ") + 4,
                                        again.err().indexOf("; ")) + "; it cannot be rescheduled\n");
        CliTest.Run other =
                cli(Map.of("DATABASE_USER", "shipping", "DATABASE_PASSWORD", "s-secret"), "cancel", "--key", "cli-1");
        assertThat(other.code()).isEqualTo(1);
        assertThat(other.err()).isEqualTo("fenced-jobs cancel: no job with key cli-1 submitted by shipping\n");
        // The owner (an operator) may cancel anyone's job.
        long shippingJob;
        try (Connection shipping = as("shipping", "s-secret")) {
            shippingJob = submit(shipping, "clock_timestamp() + interval '1 day'", null);
        }
        CliTest.Run operator = cli(Map.of(), "cancel", "--id", String.valueOf(shippingJob));
        assertThat(operator.code()).as(operator.err()).isZero();

        CliTest.Run neither = cli(Map.of(), "cancel");
        assertThat(neither.code()).isEqualTo(2);
        assertThat(neither.err())
                .startsWith(
                        "fenced-jobs: cancel: Missing required argument (specify one of these): (--id=<job id> | --key=<unique key>)");

        // The journey of each, as the owner: a cancelled job has no outbox row.
        CliTest.Run journey = cli(Map.of(), "journey", "--key", "cli-1");
        assertThat(journey.code()).as(journey.err()).isZero();
        assertThat(journey.out())
                .startsWith("Job " + id + " (key cli-1), resource acct-1: cancelled\n  created    ")
                .contains("\n  cancelled  ")
                .contains("\n  outbox     none: the job was cancelled\n");
        assertThat(cli(Map.of(), "journey", "--id", String.valueOf(shippingJob)).out())
                .startsWith("Job " + shippingJob + ", resource acct-1: cancelled");
        CliTest.Run missing = cli(Map.of(), "journey", "--key", "no-such-key");
        assertThat(missing.code()).isEqualTo(1);
        assertThat(missing.err()).isEqualTo("No job with key no-such-key\n");
        CliTest.Run producer = cli(asBilling, "journey", "--id", String.valueOf(id));
        assertThat(producer.code()).isNotZero();
        assertThat(producer.err()).contains("this login may not read the table jobs");
    }

    @Test
    void theCliSubmitsAJobInATraceAndTheJourneyShowsItsTraceId() throws Exception {
        Map<String, String> asBilling = Map.of("DATABASE_USER", "billing", "DATABASE_PASSWORD", "b-secret");
        String parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        CliTest.Run submitted = cli(
                asBilling,
                "submit",
                "--due",
                "+1h",
                "--key",
                "traced-1",
                "--traceparent",
                parent,
                "--tracestate",
                "congo=t61rcWkgMzE");
        assertThat(submitted.code()).as(submitted.err()).isZero();
        CliTest.Run journey = cli(Map.of(), "journey", "--key", "traced-1");
        assertThat(journey.out())
                .contains("\n  trace      4bf92f3577b34da6a3ce929d0e0e4736 (traceparent " + parent + ")\n");
        CliTest.Run untraced = cli(asBilling, "submit", "--due", "+1h", "--key", "untraced-1");
        assertThat(untraced.code()).as(untraced.err()).isZero();
        assertThat(cli(Map.of(), "journey", "--key", "untraced-1").out()).doesNotContain("trace ");

        CliTest.Run bad = cli(
                asBilling,
                "submit",
                "--due",
                "+1h",
                "--traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7");
        assertThat(bad.code()).isNotZero();
        assertThat(bad.err()).contains("jobs_traceparent");
        CliTest.Run alone = cli(asBilling, "submit", "--due", "+1h", "--tracestate", "congo=t61rcWkgMzE");
        assertThat(alone.code()).isEqualTo(2);
        assertThat(alone.err()).isEqualTo("fenced-jobs submit: --tracestate needs --traceparent\n");
    }

    @Test
    void aProducerGivesItsJobsAPriorityAndAKeyButOnlyAnOperatorLimitsAKey() throws Exception {
        Map<String, String> asBilling = Map.of("DATABASE_USER", "billing", "DATABASE_PASSWORD", "b-secret");
        CliTest.Run submitted = cli(
                asBilling,
                "submit",
                "--due",
                "+1h",
                "--resource",
                "acct-9",
                "--priority",
                "300",
                "--dispatch-key",
                "tenant-9",
                "--key",
                "policy-1");
        assertThat(submitted.code()).as(submitted.err()).isZero();
        CliTest.Run raised = cli(asBilling, "reschedule", "--key", "policy-1", "--priority", "3600");
        assertThat(raised.code()).as(raised.err()).isZero();
        assertThat(raised.out()).endsWith(", priority 3600 s\n");
        assertThat(cli(asBilling, "reschedule", "--key", "policy-1").err())
                .startsWith("fenced-jobs: reschedule: Missing required argument");
        try (Connection billing = as("billing", "b-secret");
                Statement s = billing.createStatement()) {
            try (ResultSet rs =
                    s.executeQuery("SELECT priority, dispatch_key FROM my_jobs WHERE unique_key = 'policy-1'")) {
                assertThat(rs.next()).isTrue();
                assertThat(rs.getInt(1)).isEqualTo(3600);
                assertThat(rs.getString(2)).isEqualTo("tenant-9");
            }
            assertThatThrownBy(
                            () -> s.execute(
                                    "INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES ('tenant-1', 0.001, 1)"))
                    .as("one tenant may not throttle another")
                    .hasMessageContaining("permission denied");
            assertThatThrownBy(
                            () -> s.execute("INSERT INTO jobs (due_at, priority) VALUES (clock_timestamp(), 100000)"))
                    .hasMessageContaining("jobs_priority");
        }

        CliTest.Run set = cli(Map.of(), "limit", "set", "tenant-9", "--per-second", "0.5");
        assertThat(set.code()).as(set.err()).isZero();
        assertThat(set.out()).isEqualTo("Limited tenant-9: at most 0.5 jobs a second, bursts of 1\n");
        assertThat(cli(Map.of(), "limit", "set", "tenant-9", "--per-second", "20", "--burst", "40")
                        .out())
                .isEqualTo("Changed the limit of tenant-9: at most 20.0 jobs a second, bursts of 40\n");
        assertThat(cli(Map.of(), "limit", "set", "tenant-9", "--per-second", "0")
                        .err())
                .contains("--per-second must be more than 0");
        assertThat(cli(Map.of(), "limit", "list").out())
                .containsPattern("tenant-9 +20.0/s  burst 40 +tokens +40.00  due jobs waiting 0");
        assertThat(cli(Map.of(), "status").out())
                .contains("Rate limits: 1, fewest tokens first (due jobs counted up to 10,000):\n")
                .containsPattern("\n  tenant-9 +20.0/s burst 40 +tokens +40.00  due jobs waiting 0\n");
        assertThat(cli(Map.of(), "limit", "remove", "tenant-9").out()).startsWith("Removed the limit of tenant-9");
        assertThat(cli(Map.of(), "limit", "remove", "tenant-9").err())
                .startsWith("fenced-jobs: limit remove: no limit for key tenant-9");
        assertThat(cli(Map.of(), "limit", "list").out()).isEqualTo("No limits.\n");
        assertThat(cli(Map.of(), "status").out()).contains("Rate limits: none");
    }

    @Test
    void anOperatorPausesAndResumesAKeyOrEverything_andNeitherAProducerNorADispatcherMay() throws Exception {
        TestDatabase db = postgres.database();
        try (Connection owner = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = owner.createStatement()) {
            s.execute("INSERT INTO jobs (due_at, resource, dispatch_key) SELECT clock_timestamp() + interval '1 hour', "
                    + "'r-' || g, 'pause-tenant' FROM generate_series(1, 2) g");
            s.execute(
                    "INSERT INTO jobs (due_at, resource, dispatch_key) VALUES (clock_timestamp() - interval '1 minute', 'r-3', 'pause-tenant')");
        }
        CliTest.Run paused = cli(Map.of(), "pause", "pause-tenant", "--reason", "downstream maintenance");
        assertThat(paused.code()).as(paused.err()).isZero();
        assertThat(paused.out())
                .isEqualTo(
                        "Paused pause-tenant: its jobs stay pending until `fenced-jobs resume pause-tenant`; 1 job(s) due now\n");
        assertThat(cli(Map.of(), "pause", "pause-tenant").out())
                .startsWith("pause-tenant was already paused, by " + db.user() + " since ");
        assertThat(cli(Map.of(), "pause", "--all").out())
                .isEqualTo("Paused everything: no job completes until `fenced-jobs resume --all`\n");
        CliTest.Run neither = cli(Map.of(), "pause");
        assertThat(neither.code()).isEqualTo(2);
        assertThat(neither.err()).startsWith("fenced-jobs: pause: Missing required argument");
        assertThat(cli(Map.of(), "pause", "k", "--all").code())
                .as("a key or --all")
                .isEqualTo(2);
        assertThat(cli(Map.of(), "status").out())
                .contains("Paused: 2, longest first:\n")
                .containsPattern("\n  pause-tenant +by " + db.user()
                        + " for [0-9]+ s, due jobs waiting 1: downstream maintenance\n")
                .containsPattern("\n  EVERYTHING +by " + db.user() + " for [0-9]+ s\n");

        for (String[] login : new String[][] {{"billing", "b-secret"}, {"fj_dispatcher", "d-secret"}}) {
            try (Connection c = as(login[0], login[1]);
                    Statement s = c.createStatement()) {
                assertThatThrownBy(() -> s.execute("DELETE FROM dispatch_pauses"))
                        .as("%s may not resume", login[0])
                        .hasMessageContaining("permission denied");
                assertThatThrownBy(() -> s.execute("INSERT INTO dispatch_pauses (dispatch_key) VALUES ('shipping')"))
                        .as("%s may not pause", login[0])
                        .hasMessageContaining("permission denied");
                try (ResultSet rs = s.executeQuery("SELECT count(*) FROM dispatch_pauses")) {
                    rs.next();
                    assertThat(rs.getLong(1)).as("%s sees the pauses", login[0]).isEqualTo(2);
                }
            }
        }

        assertThat(cli(Map.of(), "resume", "pause-tenant").out())
                .startsWith("Resumed pause-tenant (paused by " + db.user() + " since ")
                .endsWith("; 1 job(s) due now\n");
        assertThat(cli(Map.of(), "resume", "pause-tenant").err())
                .startsWith("fenced-jobs: resume: pause-tenant is not paused");
        assertThat(cli(Map.of(), "resume", "--all").out()).startsWith("Resumed everything (paused by ");
        assertThat(cli(Map.of(), "status").out()).contains("Paused: nothing");
    }

    @Test
    void theCliAddsListsPausesResumesAndRemovesSchedules() {
        CliTest.Run bad = cli(Map.of(), "schedule", "add", "nightly", "--cron", "0 25 * * *");
        assertThat(bad.code()).isEqualTo(2);
        assertThat(bad.err())
                .startsWith("fenced-jobs: schedule add: cron '0 25 * * *' is not a five-field Unix cron expression");
        CliTest.Run zone =
                cli(Map.of(), "schedule", "add", "nightly", "--cron", "0 2 * * *", "--zone", "Europe/Atlantis");
        assertThat(zone.code()).isEqualTo(2);
        assertThat(zone.err()).startsWith("fenced-jobs: schedule add: time zone 'Europe/Atlantis' is not a zone id");
        assertThat(cli(Map.of(), "schedule", "add", "both", "--cron", "* * * * *", "--every", "5m")
                        .err())
                .startsWith("fenced-jobs: schedule add: --cron=<cron>, --every=<duration> are mutually exclusive");
        assertThat(cli(Map.of(), "schedule", "add", "neither").err())
                .startsWith("fenced-jobs: schedule add: Missing required argument")
                .contains("--every");
        assertThat(cli(Map.of(), "schedule", "add", "x", "--every", "5m", "--misfire", "sometimes")
                        .err())
                .startsWith("fenced-jobs: schedule add: Invalid value for option '--misfire'")
                .contains("expected one of [all, latest, skip]")
                .contains("'sometimes'");

        CliTest.Run nightly = cli(
                Map.of(),
                "schedule",
                "add",
                "nightly",
                "--cron",
                "30 2 * * *",
                "--zone",
                "Europe/Berlin",
                "--resource",
                "reports",
                "--payload",
                "{\"report\": \"daily\"}",
                "--misfire",
                "all");
        assertThat(nightly.code()).as(nightly.err()).isZero();
        assertThat(nightly.out())
                .startsWith("Added schedule nightly (cron '30 2 * * *' in Europe/Berlin, misfire all), starting ");
        CliTest.Run often = cli(Map.of(), "schedule", "add", "often", "--every", "90s", "--starts", "+1h");
        assertThat(often.code()).as(often.err()).isZero();
        assertThat(often.out()).contains("every PT1M30S");
        assertThat(cli(Map.of(), "schedule", "add", "often", "--every", "1m").err())
                .contains("a schedule named often exists");

        assertThat(cli(Map.of(), "schedule", "pause", "often").out()).startsWith("Paused schedule often");
        CliTest.Run list = cli(Map.of(), "schedule", "list");
        assertThat(list.out())
                .containsPattern("nightly +cron 30 2 \\* \\* \\* Europe/Berlin +misfire all +active")
                .containsPattern("often +every 00:01:30 +misfire latest +paused");
        assertThat(cli(Map.of(), "schedule", "resume", "often").out()).startsWith("Resumed schedule often");
        assertThat(cli(Map.of(), "schedule", "remove", "often").out())
                .startsWith("Removed schedule often (0 occurrences fired");
        assertThat(cli(Map.of(), "schedule", "remove", "often").err())
                .startsWith("fenced-jobs: schedule remove: no schedule named often");
        assertThat(cli(Map.of(), "schedule", "list").out()).doesNotContain("often");
        assertThat(cli(Map.of(), "schedule").code()).isEqualTo(2);
        assertThat(cli(Map.of(), "status").out()).containsPattern("Schedules: 1 \\(0 paused, 0 with an error\\)");
    }
}
