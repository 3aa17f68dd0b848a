package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.Settings;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.Lease;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.jooq.DSLContext;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Every subcommand against a real database, and the errors a person gets for bad input. */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class CliTest {

    @RegisterExtension
    static final PostgresExtension postgres = new PostgresExtension();

    record Run(int code, String out, String err) {}

    static Run cli(Map<String, String> extraEnv, String... args) {
        return cli(postgres.database(), extraEnv, args);
    }

    /** The CLI on the given database, with {@code extraEnv} over its URL, user and password. */
    static Run cli(TestDatabase db, Map<String, String> extraEnv, String... args) {
        Map<String, String> env = new HashMap<>(
                Map.of("DATABASE_URL", db.url(), "DATABASE_USER", db.user(), "DATABASE_PASSWORD", db.password()));
        env.putAll(extraEnv);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int code = new Cli(
                        Settings.of(env),
                        new PrintStream(out, true, StandardCharsets.UTF_8),
                        new PrintStream(err, true, StandardCharsets.UTF_8))
                .run(args);
        return new Run(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    static Run cli(String... args) {
        return cli(Map.of(), args);
    }

    /** A multi-host URL whose first server does not answer, as after a failover: the CLI finds the primary behind it. */
    @Test
    @Order(50)
    void aMultiHostUrlReachesThePrimaryWhateverComesFirst() throws Exception {
        TestDatabase db = postgres.database();
        String url = db.url();
        int hostStart = url.indexOf("//") + 2;
        String multi = url.substring(0, hostStart) + "127.0.0.1:" + dev.fencedjobs.testing.KafkaProcess.freePort() + ","
                + url.substring(hostStart) + (url.contains("?") ? "&" : "?") + "targetServerType=primary";
        Run status = cli(Map.of("DATABASE_URL", multi), "status");
        assertThat(status.code()).as(status.err()).isZero();
        assertThat(status.out()).contains("Leases:");
        Run submit = cli(Map.of("DATABASE_URL", multi), "submit", "--due", "now", "--key", "multi-host-1");
        assertThat(submit.code()).as(submit.err()).isZero();
        assertThat(count("SELECT count(*) FROM jobs WHERE unique_key = 'multi-host-1'"))
                .isEqualTo(1);
    }

    static long count(String sql) throws Exception {
        try (Connection c = postgres.database().connect();
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(sql)) {
            rs.next();
            return rs.getLong(1);
        }
    }

    static boolean liveScheduler() throws Exception {
        try (Connection c = postgres.database().connect()) {
            return dev.fencedjobs.lease.LeaseRow.live(c, "scheduler").isPresent();
        }
    }

    @Test
    @Order(1)
    void migrateCreatesBothSchemasAndIsRepeatable() throws Exception {
        Run first = cli("migrate");
        assertThat(first.code()).as(first.err()).isZero();
        assertThat(first.out()).contains("Schema up to date");
        assertThat(cli("migrate").code()).isZero();
        assertThat(
                        count(
                                "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('jobs', 'outbox', 'leader_lease', 'ledger', 'consumer_processed')"))
                .isEqualTo(5);
    }

    @Test
    @Order(2)
    void submitTakesNowOffsetsAndAbsoluteTimesAndAKeyOnlyOnce() throws Exception {
        Run now = cli("submit", "--due", "now", "--resource", "account-1", "--payload", "{\"cents\": 12}");
        assertThat(now.code()).as(now.err()).isZero();
        assertThat(now.out()).startsWith("Submitted job ").contains("for resource account-1");
        assertThat(cli("submit", "--due", "+30s").code()).isZero();
        assertThat(cli("submit", "--due=2030-01-01T09:00:00Z", "--key", "daily/2030-01-01")
                        .code())
                .isZero();
        Run again = cli("submit", "--due", "2030-01-01T09:00:00Z", "--key", "daily/2030-01-01");
        assertThat(again.code()).isZero();
        assertThat(again.out()).startsWith("Already submitted: job ").contains("nothing inserted");
        assertThat(count("SELECT count(*) FROM jobs")).isEqualTo(3);
        assertThat(
                        count(
                                "SELECT count(*) FROM jobs WHERE due_at BETWEEN clock_timestamp() + interval '20 seconds' AND clock_timestamp() + interval '31 seconds'"))
                .as("+30s is thirty seconds of database time")
                .isEqualTo(1);
        assertThat(count("SELECT count(*) FROM jobs WHERE payload = '{\"cents\": 12}'::jsonb"))
                .isEqualTo(1);
    }

    @Test
    @Order(3)
    void statusShowsLeasesHistoryJobsOutboxAndConsumer() {
        DSLContext dsl = Database.dsl(postgres.database().dataSource());
        assertThat(new Lease(dsl, "scheduler", "holder-status", Duration.ofMinutes(5), Ticker.system())
                        .acquireOrRenew())
                .isPresent();
        Run status = cli("status");
        assertThat(status.code()).as(status.err()).isZero();
        assertThat(status.out())
                .contains("Leases:")
                .containsPattern("scheduler +token 1 +holder holder-status +live")
                .contains("Token history")
                .contains("Jobs: 3 pending")
                .contains("Outbox: 0 unpublished")
                .contains("Consumer: 0 applied");
    }

    @Test
    @Order(4)
    void releaseEndsOnlyTheCurrentLeaseByTheConditionalRule() throws Exception {
        Run wrongToken = cli("release", "--role", "scheduler", "--holder", "holder-status", "--token", "99");
        assertThat(wrongToken.code()).isEqualTo(1);
        assertThat(wrongToken.err()).contains("nothing released");
        assertThat(liveScheduler()).isTrue();

        Run release = cli("release", "--role", "scheduler");
        assertThat(release.code()).as(release.err()).isZero();
        assertThat(release.out()).contains("Released scheduler (holder holder-status, token 1)");
        assertThat(liveScheduler()).isFalse();
        assertThat(cli("release", "--role", "scheduler").code())
                .as("nothing left to release")
                .isEqualTo(1);
        assertThat(cli("release", "--role", "nobody").err()).contains("no lease for role nobody");
    }

    @Test
    void badInputGetsOneLineAndAHintNeverAStackTrace() {
        assertBadUsage(cli("frobnicate"), "fenced-jobs: unknown command 'frobnicate'", "Try 'fenced-jobs --help'.");
        assertBadUsage(
                cli("submt"),
                "fenced-jobs: unknown command 'submt' (did you mean submit or resume?)",
                "Try 'fenced-jobs --help'.");
        assertBadUsage(
                cli("schedule"),
                "fenced-jobs: schedule: say add, list, pause, resume, remove",
                "Try 'fenced-jobs schedule --help'.");
        assertBadUsage(
                cli("schedule", "pasue", "x"),
                "fenced-jobs: schedule: unknown command 'pasue' (did you mean pause",
                "Try 'fenced-jobs schedule --help'.");
        assertBadUsage(
                cli("schedule", "pause"),
                "fenced-jobs: schedule pause: Missing required parameter: '<name>'",
                "Try 'fenced-jobs schedule pause --help'.");
        assertBadUsage(
                cli("dead-letters", "show", "x"),
                "fenced-jobs: dead-letters show: Invalid value for positional parameter",
                "'x' is not a dead letter id");
        assertBadUsage(
                cli("dead-letters", "replay", "1", "y"),
                "fenced-jobs: dead-letters replay: Invalid value for positional parameter",
                "'y' is not a dead letter id");
        assertBadUsage(
                cli("submit"),
                "fenced-jobs: submit: Missing required option: '--due=<when>'",
                "Try 'fenced-jobs submit --help'.");
        assertBadUsage(
                cli("submit", "--due", "tomorrow"),
                "fenced-jobs: submit: Invalid value for option '--due'",
                "'tomorrow' is neither now");
        assertBadUsage(
                cli("submit", "--due", "+soon"),
                "fenced-jobs: submit: Invalid value for option '--due'",
                "'+soon' is not an offset");
        assertBadUsage(
                cli("submit", "--due", "now", "--payload", "{oops"),
                "fenced-jobs: submit: Invalid value for option '--payload'",
                "'{oops' is not valid JSON");
        assertBadUsage(
                cli("submit", "--due"),
                "fenced-jobs: submit: Missing required parameter for option '--due' (<when>)",
                null);
        assertBadUsage(
                cli("status", "--verbose"),
                "fenced-jobs: status: Unknown option: '--verbose'",
                "Try 'fenced-jobs status --help'.");
        assertBadUsage(
                cli("submit", "--du", "now"),
                "fenced-jobs: submit: Unknown option: '--du' (did you mean --due?)",
                null);
        assertBadUsage(
                cli("submit", "--due", "now", "--ky", "k"), "fenced-jobs: submit: Unknown options: '--ky', 'k'", null);
        assertBadUsage(cli("release"), "fenced-jobs: release: Missing required option: '--role=<role>'", null);
        assertBadUsage(
                cli("release", "--role", "relay", "--holder", "h"),
                "fenced-jobs: release: Missing required argument(s): --token=<n>",
                null);
        assertBadUsage(
                cli("release", "--role", "relay", "--holder", "h", "--token", "x"),
                "fenced-jobs: release: Invalid value for option '--token'",
                "a fencing token is a whole number of at least 1, got 'x'");
        assertBadUsage(
                cli("release", "--role", "relay", "--holder", "h", "--token", "0"),
                "fenced-jobs: release: Invalid value for option '--token'",
                "a fencing token is a whole number of at least 1, got '0'");
        assertBadUsage(
                cli("cancel"),
                "fenced-jobs: cancel: Missing required argument (specify one of these): (--id=<job id> | --key=<unique key>)",
                null);
        assertBadUsage(
                cli("cancel", "--id", "1", "--key", "k"),
                "fenced-jobs: cancel: --id=<job id>, --key=<unique key> are mutually exclusive",
                null);
        assertBadUsage(
                cli("cancel", "--id", "one"),
                "fenced-jobs: cancel: Invalid value for option '--id'",
                "'one' is not a long");
        assertBadUsage(
                cli("schedule", "add", "s", "--cron", "* * * * *", "--every", "5m"),
                "fenced-jobs: schedule add: --cron=<cron>, --every=<duration> are mutually exclusive",
                null);
        assertBadUsage(
                cli("schedule", "add", "s", "--every", "5m", "--zone", "Europe/Berlin"),
                "fenced-jobs: schedule add: --zone applies to --cron only",
                null);
        assertBadUsage(
                cli("schedule", "add", "s", "--every", "soon"),
                "fenced-jobs: schedule add: Invalid value for option '--every'",
                null);
        assertBadUsage(
                cli("schedule", "add", "s", "--every", "5m", "--misfire", "never"),
                "fenced-jobs: schedule add: Invalid value for option '--misfire'",
                "expected one of [all, latest, skip]");
        assertBadUsage(
                cli("dead-letters", "list", "--limit", "ten"),
                "fenced-jobs: dead-letters list: Invalid value for option '--limit'",
                null);
        assertBadUsage(
                cli(Map.of("DATABASE_URL", "postgres://nope"), "status"),
                "fenced-jobs: DATABASE_URL: must be a PostgreSQL JDBC URL",
                null);
        assertBadUsage(cli("migrate", "--roles"), "fenced-jobs: migrate --roles: set at least one of", null);
        assertThat(cli().code()).isEqualTo(2);
    }

    @Test
    void anUnreachableDatabaseIsOneLineAndExitCodeOne() {
        Run r = cli(
                Map.of("DATABASE_URL", "jdbc:postgresql://127.0.0.1:1/none", "DATABASE_CONNECT_TIMEOUT", "1s"),
                "status");
        assertThat(r.code()).isEqualTo(1);
        assertThat(r.err().lines().count()).isEqualTo(1);
        assertThat(r.err()).startsWith("fenced-jobs status: ").doesNotContain("\tat ");
    }

    @Test
    void everyCommandHasHelp() {
        String[] commands = {
            "migrate",
            "submit",
            "cancel",
            "reschedule",
            "schedule",
            "schedule add",
            "schedule list",
            "schedule pause",
            "schedule resume",
            "schedule remove",
            "dead-letters",
            "dead-letters list",
            "dead-letters show",
            "dead-letters replay",
            "dead-letters discard",
            "status",
            "release"
        };
        for (String command : commands) {
            List<String> args = new java.util.ArrayList<>(List.of(command.split(" ")));
            args.add("--help");
            Run help = cli(args.toArray(String[]::new));
            assertThat(help.code()).as(command).isZero();
            assertThat(help.out())
                    .as(command)
                    .startsWith("usage: fenced-jobs " + command)
                    .contains("-h, --help");
            assertThat(help.err()).isEmpty();
        }
        Run top = cli("--help");
        assertThat(top.code()).isZero();
        for (String command : commands) {
            if (!command.contains(" ")) {
                assertThat(top.out()).as("the command list").containsPattern("(?m)^  " + command + " +\\S");
            }
        }
    }

    private static void assertBadUsage(Run run, String firstLine, String hint) {
        assertThat(run.code()).as(run.err()).isEqualTo(2);
        assertThat(run.err().lines().findFirst().orElse("")).startsWith(firstLine);
        assertThat(run.err().lines().count()).isEqualTo(2);
        assertThat(run.err().lines().skip(1).findFirst().orElse("")).startsWith("Try 'fenced-jobs");
        if (hint != null) {
            assertThat(run.err()).contains(hint);
        }
        assertThat(run.err()).doesNotContain("\tat ").doesNotContain("Exception");
    }
}
