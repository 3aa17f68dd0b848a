package dev.fencedjobs.cli;

import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.consumer.ConsumerConfig;
import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.consumer.LedgerEffect;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.dispatcher.DispatcherConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.relay.Relay;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TestKafka;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The roles hold: each can do its work and nothing else. */
class LeastPrivilegeTest {

    @RegisterExtension
    static final PostgresExtension postgres = new PostgresExtension();

    static final Map<String, String> PASSWORDS = Map.of(
            "FJ_DISPATCHER_PASSWORD",
            "d-secret",
            "FJ_RELAY_PASSWORD",
            "r-secret",
            "FJ_CONSUMER_PASSWORD",
            "c-secret",
            "FJ_PRODUCER_PASSWORD",
            "p-secret");

    @BeforeAll
    static void migrateWithRoles() {
        CliTest.Run run = runCli(PASSWORDS, "migrate", "--roles");
        assertThat(run.code()).as(run.err()).isZero();
        assertThat(run.out()).contains("Roles ready: fj_consumer, fj_dispatcher, fj_producer, fj_relay");
    }

    private static CliTest.Run runCli(Map<String, String> env, String... args) {
        return runCli(postgres.database(), env, args);
    }

    private static CliTest.Run runCli(TestDatabase db, Map<String, String> env, String... args) {
        java.util.Map<String, String> all = dev.fencedjobs.runtime.internal.ServiceEnvironment.database(
                        db.url(), db.user(), db.password())
                .setAll(env)
                .toMap();
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        java.io.ByteArrayOutputStream err = new java.io.ByteArrayOutputStream();
        int code = new Cli(
                        dev.fencedjobs.db.Settings.of(all),
                        new java.io.PrintStream(out, true),
                        new java.io.PrintStream(err, true))
                .run(args);
        return new CliTest.Run(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    private static Connection as(String role, String password) throws SQLException {
        return DriverManager.getConnection(postgres.database().url(), role, password);
    }

    private static void refused(TestDatabase db, String role, String password, String sql, String reason) {
        assertThatThrownBy(() -> {
                    try (Connection c = DriverManager.getConnection(db.url(), role, password);
                            Statement s = c.createStatement()) {
                        s.execute(sql);
                    }
                })
                .as("%s: %s", role, sql)
                .hasMessageContaining(reason);
    }

    private static void denied(String role, String password, String sql) {
        assertThatThrownBy(() -> {
                    try (Connection c = as(role, password);
                            Statement s = c.createStatement()) {
                        s.execute(sql);
                    }
                })
                .as("%s: %s", role, sql)
                .hasMessageContaining("permission denied");
    }

    @Test
    void theProducerCanOnlyInsertJobs() throws Exception {
        try (Connection c = as(Roles.PRODUCER, "p-secret");
                Statement s = c.createStatement()) {
            assertThat(s.executeUpdate("INSERT INTO jobs (due_at) VALUES (clock_timestamp() + interval '1 hour')"))
                    .isEqualTo(1);
            // The README's idempotent submission: the second copy is absorbed, not refused.
            String idempotent = "INSERT INTO jobs (resource, payload, due_at, unique_key)"
                    + " VALUES ('invoice-42', '{}', '2026-12-01T09:00:00Z', 'invoice-42/2026-12-01')"
                    + " ON CONFLICT (unique_key) DO NOTHING";
            assertThat(s.executeUpdate(idempotent)).isEqualTo(1);
            assertThat(s.executeUpdate(idempotent)).isZero();
        }
        denied(Roles.PRODUCER, "p-secret", "SELECT * FROM jobs");
        denied(Roles.PRODUCER, "p-secret", "SELECT payload FROM jobs");
        denied(Roles.PRODUCER, "p-secret", "UPDATE leader_lease SET expires_at = clock_timestamp()");
        denied(
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO leader_lease VALUES ('scheduler', 'me', 99, clock_timestamp())");
        denied(Roles.PRODUCER, "p-secret", "SELECT * FROM outbox");
        denied(
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO outbox (job_id, resource, fencing_token, payload, due_at, completed_at) "
                        + "VALUES (1, 'r', 1, '{}', now(), now())");
        denied(Roles.PRODUCER, "p-secret", "UPDATE jobs SET state = 'completed'");
        denied(Roles.PRODUCER, "p-secret", "INSERT INTO lease_takeover VALUES ('scheduler', 99, 'me', now(), now())");
    }

    @Test
    void theProducerNamesATraceContextInItsInsertOrInASettingOfItsTransaction() throws Exception {
        String parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        String other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        try (Connection c = as(Roles.PRODUCER, "p-secret");
                Statement s = c.createStatement()) {
            s.execute(
                    "INSERT INTO jobs (due_at, unique_key, traceparent, tracestate) VALUES (clock_timestamp() + interval '1 hour', 'traced-column', '"
                            + parent + "', 'congo=t61rcWkgMzE')");
            // A framework that cannot change its SQL sets the context for its transaction.
            c.setAutoCommit(false);
            s.execute("SET LOCAL fenced_jobs.traceparent = '" + other + "'");
            s.execute(
                    "INSERT INTO jobs (due_at, unique_key) VALUES (clock_timestamp() + interval '1 hour', 'traced-setting')");
            c.commit();
            // The setting was local to that transaction: the next job has no context.
            s.execute(
                    "INSERT INTO jobs (due_at, unique_key) VALUES (clock_timestamp() + interval '1 hour', 'traced-none')");
            c.commit();
            try (ResultSet rs = s.executeQuery(
                    "SELECT unique_key, coalesce(traceparent, '-') || ' ' || coalesce(tracestate, '-') FROM my_jobs "
                            + "WHERE unique_key LIKE 'traced-%' ORDER BY unique_key")) {
                Map<String, String> seen = new TreeMap<>();
                while (rs.next()) {
                    seen.put(rs.getString(1), rs.getString(2));
                }
                assertThat(seen)
                        .containsExactly(
                                Map.entry("traced-column", parent + " congo=t61rcWkgMzE"),
                                Map.entry("traced-none", "- -"),
                                Map.entry("traced-setting", other + " -"));
            }
            c.rollback();
        }
        // What the W3C format does not allow is refused, by the column or by the setting.
        for (String bad : List.of(
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")) {
            refused(
                    postgres.database(),
                    Roles.PRODUCER,
                    "p-secret",
                    "INSERT INTO jobs (due_at, traceparent) VALUES (clock_timestamp(), '" + bad + "')",
                    "jobs_traceparent");
            refused(
                    postgres.database(),
                    Roles.PRODUCER,
                    "p-secret",
                    "BEGIN; SET LOCAL fenced_jobs.traceparent = '" + bad
                            + "'; INSERT INTO jobs (due_at) VALUES (clock_timestamp()); COMMIT",
                    "jobs_traceparent");
        }
        refused(
                postgres.database(),
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO jobs (due_at, traceparent, tracestate) VALUES (clock_timestamp(), '" + parent
                        + "', E'a=b\\nc=d')",
                "jobs_tracestate");
        refused(
                postgres.database(),
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO jobs (due_at, traceparent, tracestate) VALUES (clock_timestamp(), '" + parent
                        + "', repeat('a', 513))",
                "jobs_tracestate");
    }

    @Test
    void theProducerCanNameOnlyWhatAJobIsAndNotItsIdStateTokenOrTimes() throws Exception {
        try (Connection c = as(Roles.PRODUCER, "p-secret");
                Statement s = c.createStatement()) {
            // Every form the README gives still works.
            assertThat(s.executeUpdate("INSERT INTO jobs (due_at) VALUES (clock_timestamp())"))
                    .isEqualTo(1);
            assertThat(
                            s.executeUpdate(
                                    "INSERT INTO jobs (resource, payload, due_at) VALUES ('account-17', "
                                            + "'{\"action\": \"charge\", \"cents\": 1200}', clock_timestamp() + interval '30 seconds')"))
                    .isEqualTo(1);
        }
        // A completed job with a token never issued and no outbox row.
        denied(
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO jobs (due_at, state, completed_by_token, completed_at) "
                        + "VALUES (clock_timestamp(), 'completed', 999, clock_timestamp())");
        denied(
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO jobs (due_at, completed_by_token) VALUES (clock_timestamp(), 999)");
        // An id of the producer's choosing, which would collide later or reuse a purged one.
        denied(
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO jobs (id, due_at) OVERRIDING SYSTEM VALUE VALUES (424242, clock_timestamp())");
        // A made-up creation time.
        denied(
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO jobs (due_at, created_at) VALUES (clock_timestamp(), '2000-01-01')");
        denied(
                Roles.PRODUCER,
                "p-secret",
                "INSERT INTO jobs (due_at, completed_at) VALUES (clock_timestamp(), clock_timestamp())");
    }

    @Test
    void theDispatcherAndTheRelayWriteOnlyTheColumnsTheirWorkNeeds() {
        denied(Roles.DISPATCHER, "d-secret", "UPDATE jobs SET resource = 'elsewhere'");
        denied(Roles.DISPATCHER, "d-secret", "UPDATE jobs SET payload = '{}'");
        denied(Roles.DISPATCHER, "d-secret", "UPDATE jobs SET due_at = clock_timestamp()");
        denied(Roles.DISPATCHER, "d-secret", "INSERT INTO jobs (due_at) VALUES (clock_timestamp())");
        denied(
                Roles.DISPATCHER,
                "d-secret",
                "INSERT INTO outbox (job_id, resource, fencing_token, payload, due_at, completed_at, publish_error) "
                        + "VALUES (1, 'r', 1, '{}', now(), now(), 'x')");
        denied(Roles.DISPATCHER, "d-secret", "UPDATE outbox_position SET published_through = published_through + 1");
        denied(Roles.DISPATCHER, "d-secret", "UPDATE outbox SET fencing_token = 99");
        denied(
                Roles.RELAY,
                "r-secret",
                "INSERT INTO outbox (job_id, resource, fencing_token, payload, due_at, completed_at) "
                        + "VALUES (1, 'r', 1, '{}', now(), now())");
        denied(Roles.RELAY, "r-secret", "UPDATE outbox SET job_id = 1");
        denied(Roles.RELAY, "r-secret", "SELECT * FROM jobs");
    }

    /** A login for the dispatcher's and one for the relay's work, with a password each. */
    private record Logins(String dispatcher, String dispatcherPassword, String relay, String relayPassword) {}

    /**
     * The services' own roles; an application's logins that are members of them; and an
     * application's logins simply granted the same rights ({@link Roles#grantRightsOf}).
     */
    private static Logins logins(String kind, TestDatabase db) throws SQLException {
        if (kind.equals("role")) {
            return new Logins(Roles.DISPATCHER, "d-secret", Roles.RELAY, "r-secret");
        }
        String d = "app_" + kind + "_dispatcher";
        String r = "app_" + kind + "_relay";
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement()) {
            for (String login : List.of(d, r)) {
                s.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + login
                        + "') THEN CREATE ROLE " + login + " LOGIN PASSWORD 'app-secret'; END IF; END $$");
            }
            if (kind.equals("member")) {
                s.execute("GRANT " + Roles.DISPATCHER + " TO " + d);
                s.execute("GRANT " + Roles.RELAY + " TO " + r);
            } else {
                Roles.grantRightsOf(c, Roles.DISPATCHER, d);
                Roles.grantRightsOf(c, Roles.RELAY, r);
            }
        }
        return new Logins(d, "app-secret", r, "app-secret");
    }

    /**
     * What column grants cannot say, the schema's triggers refuse, on a database of its own holding a
     * live scheduler lease, completed jobs (published and not), a pending job and the relay's lease.
     */
    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"role", "member", "rights"})
    void theTriggersRefuseWhatTheGrantsCannotExpressForEveryLogin(String kind) throws Exception {
        try (TestDatabase db = dev.fencedjobs.testing.TestPostgres.shared().createDatabase("lp_forge_" + kind)) {
            CliTest.Run run = runCli(db, PASSWORDS, "migrate", "--roles");
            assertThat(run.code()).as(run.err()).isZero();
            Logins l = logins(kind, db);
            String dispatcher = l.dispatcher();
            String dPassword = l.dispatcherPassword();
            String relay = l.relay();
            String rPassword = l.relayPassword();
            try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                    Statement s = c.createStatement()) {
                // One shard, whose lease's tokens this test names (each shard's guards: ShardSchemaTest).
                s.execute("SELECT shards_set(1)");
                s.execute("SELECT shards_switch()");
                dev.fencedjobs.testing.CompletedJobs.insert(c, 3, "'r'", "'{}'::jsonb");
                s.execute(
                        "UPDATE outbox_position SET published_through = (SELECT min(id) FROM outbox) WHERE role = 'relay'");
                s.execute(
                        "UPDATE leader_lease SET holder_id = 'dispatcher-1', fencing_token = 2, expires_at = 'infinity' WHERE role = 'scheduler'");
                s.execute("INSERT INTO leader_lease VALUES ('relay', 'relay-1', 1, 'infinity')");
                s.execute("INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp(), 'pending-one')");
            }
            String pending = "(SELECT id FROM jobs WHERE resource = 'pending-one')";
            // The dispatcher completes only with the lease's current token (2), and never touches a completed job
            // again.
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "UPDATE jobs SET state = 'completed', completed_by_token = 999, completed_at = clock_timestamp()"
                            + " WHERE id = " + pending,
                    "only the shard's lease holder completes its jobs");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "UPDATE jobs SET state = 'completed', completed_by_token = 1, completed_at = clock_timestamp()"
                            + " WHERE id = " + pending,
                    "the shard's scheduler lease has token 2");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "UPDATE jobs SET state = 'pending', completed_by_token = NULL, completed_at = NULL"
                            + " WHERE state = 'completed'",
                    "a completed job is never changed");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "UPDATE jobs SET completed_by_token = 2 WHERE state = 'completed'",
                    "a completed job is never changed");
            // Outbox rows only for a job completed with their token, which is the lease's.
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "INSERT INTO outbox (job_id, resource, fencing_token, payload, due_at, completed_at)"
                            + " SELECT id, resource, 2, payload, due_at, clock_timestamp() FROM jobs WHERE id = "
                            + pending,
                    "outbox rows are written only");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "INSERT INTO outbox (job_id, resource, fencing_token, payload, due_at, completed_at)"
                            + " VALUES (424242, 'r', 2, '{}', now(), now())",
                    "outbox rows are written only");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "INSERT INTO outbox (job_id, resource, fencing_token, payload, due_at, completed_at)"
                            + " SELECT id, resource, 2, payload, due_at, completed_at FROM jobs WHERE state = 'completed' LIMIT 1",
                    "outbox_job_id"); // a second message for a job
            // Each service writes its own role's lease only, and a new holder always comes with a new token.
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "UPDATE leader_lease SET expires_at = clock_timestamp() WHERE role = 'relay'",
                    dispatcher + " may not write the lease of role relay");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "INSERT INTO leader_lease VALUES ('reports', 'me', 1, 'infinity')",
                    dispatcher + " may not write the lease of role reports");
            refused(
                    db,
                    relay,
                    rPassword,
                    "UPDATE leader_lease SET holder_id = 'relay-2', fencing_token = 3 WHERE role = 'scheduler'",
                    relay + " may not write the lease of role scheduler");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "UPDATE leader_lease SET holder_id = 'dispatcher-2' WHERE role = 'scheduler'",
                    "needs a new fencing token");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "UPDATE leader_lease SET fencing_token = 1 WHERE role = 'scheduler'",
                    "may not decrease");
            // A login that completes jobs submits none of its own: only the occurrences of existing schedules.
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "INSERT INTO jobs (due_at, resource, submitted_by) VALUES (clock_timestamp(), 'mine', 'alice')",
                    "may complete jobs, so it inserts only the occurrences of existing schedules");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "INSERT INTO jobs (due_at, resource, unique_key, submitted_by)"
                            + " VALUES (clock_timestamp(), 'mine', 'schedule:none@2026-01-01T00:00:00Z', 'schedule:none')",
                    "may complete jobs");
            // The relay purges published rows only.
            refused(
                    db,
                    relay,
                    rPassword,
                    "DELETE FROM outbox WHERE id > (SELECT min(id) FROM outbox)",
                    "is not published yet and may not be deleted");
            refused(db, relay, rPassword, "UPDATE outbox_position SET published_through = 0", "may not go back");
            try (Connection c = DriverManager.getConnection(db.url(), relay, rPassword);
                    Statement s = c.createStatement()) {
                assertThat(
                                s.executeUpdate(
                                        "DELETE FROM outbox WHERE id = (SELECT published_through FROM outbox_position WHERE role = 'relay')"))
                        .isEqualTo(1);
            }
            // The dispatcher's retention deletes completed jobs, never pending ones.
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "DELETE FROM jobs WHERE id = " + pending,
                    dispatcher + " deletes completed jobs only");
            // Nor do tables of the login's own, named like the schema's, stand in for them in what the
            // guards read: temporary ones (any login may make them, and an unqualified name finds them
            // first) for the schema's owner, the lease and the completions.
            String publicPending = "(SELECT id FROM public.jobs WHERE resource = 'pending-one')";
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "CREATE TEMP TABLE jobs (id bigint); DELETE FROM public.jobs WHERE id = " + publicPending,
                    dispatcher + " deletes completed jobs only");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "CREATE TEMP TABLE pg_roles (rolname name, rolsuper boolean);"
                            + " INSERT INTO pg_roles VALUES (current_user, true); DELETE FROM public.jobs WHERE id = "
                            + publicPending,
                    dispatcher + " deletes completed jobs only");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "CREATE TEMP TABLE leader_lease (role varchar, fencing_token bigint);"
                            + " INSERT INTO leader_lease VALUES ('scheduler', 999);"
                            + " CREATE TEMP TABLE jobs (id bigint, completed_by_token bigint); INSERT INTO jobs SELECT "
                            + publicPending + ", 999;"
                            + " INSERT INTO public.outbox (job_id, resource, fencing_token, payload, due_at, completed_at)"
                            + " SELECT id, resource, 999, payload, due_at, clock_timestamp() FROM public.jobs WHERE id = "
                            + publicPending,
                    "outbox rows are written only");
            refused(
                    db,
                    dispatcher,
                    dPassword,
                    "CREATE TEMP TABLE leader_lease (role varchar, fencing_token bigint);"
                            + " INSERT INTO leader_lease VALUES ('scheduler', 999);"
                            + " UPDATE public.jobs SET state = 'completed', completed_by_token = 999, completed_at = clock_timestamp()"
                            + " WHERE id = " + publicPending,
                    "only the shard's lease holder completes its jobs");
            try (Connection c = DriverManager.getConnection(db.url(), dispatcher, dPassword);
                    Statement s = c.createStatement()) {
                assertThat(s.executeUpdate(
                                "DELETE FROM jobs WHERE id = (SELECT min(id) FROM jobs WHERE state = 'completed')"))
                        .isEqualTo(1);
            }
            // And what the dispatcher does is still allowed: completing the pending job with the lease's token, with
            // its outbox row.
            try (Connection c = DriverManager.getConnection(db.url(), dispatcher, dPassword);
                    Statement s = c.createStatement()) {
                assertThat(
                                s.executeUpdate(
                                        "WITH done AS (UPDATE jobs SET state = 'completed', completed_by_token = 2,"
                                                + " completed_at = clock_timestamp() WHERE id = " + pending
                                                + " RETURNING *)"
                                                + " INSERT INTO outbox (job_id, resource, fencing_token, payload, due_at, completed_at, job_created_at)"
                                                + " SELECT id, resource, completed_by_token, payload, due_at, completed_at, created_at FROM done"))
                        .isEqualTo(1);
            }
        }
    }

    @Test
    void theConsumerCannotUndoItsOwnDecisions() throws Exception {
        try (Connection c = as(Roles.CONSUMER, "c-secret");
                Statement s = c.createStatement()) {
            s.execute(
                    "INSERT INTO consumer_resource_fence (resource, highest_token, updated_at) VALUES ('lp-fence', 5, now())");
        }
        denied(Roles.CONSUMER, "c-secret", "DELETE FROM consumer_resource_fence");
        denied(Roles.CONSUMER, "c-secret", "DELETE FROM ledger");
        denied(Roles.CONSUMER, "c-secret", "UPDATE ledger SET job_id = 1");
        denied(Roles.CONSUMER, "c-secret", "UPDATE consumer_processed SET job_id = 1");
        refused(
                postgres.database(),
                Roles.CONSUMER,
                "c-secret",
                "UPDATE consumer_resource_fence SET highest_token = 4 WHERE resource = 'lp-fence'",
                "may not decrease");
        // Nor behind temporary tables of its own: an empty pg_roles, in which it would be no role at
        // all, and a consumer_fence_reset to take the audit row (before, the fence went to 4 unaudited).
        refused(
                postgres.database(),
                Roles.CONSUMER,
                "c-secret",
                "CREATE TEMP TABLE pg_roles (rolname name, rolsuper boolean);"
                        + " CREATE TEMP TABLE consumer_fence_reset (resource text, reset_by text, reset_at timestamptz, reason text,"
                        + " from_highest_token bigint, from_token_first_outbox_id bigint, from_highest_outbox_id bigint, from_token_holder text,"
                        + " from_token_acquired_at timestamptz, to_highest_token bigint, to_token_first_outbox_id bigint, to_highest_outbox_id bigint);"
                        + " UPDATE consumer_resource_fence SET highest_token = 4 WHERE resource = 'lp-fence'",
                "may not decrease");
    }

    @Test
    void migrateWithRolesPreparesTheConsumersOwnDatabase() throws Exception {
        try (TestDatabase consumerDb =
                dev.fencedjobs.testing.TestPostgres.shared().createDatabase("lp_consumer")) {
            Map<String, String> env = new java.util.HashMap<>(PASSWORDS);
            env.put("CONSUMER_DATABASE_URL", consumerDb.url());
            env.put("CONSUMER_DATABASE_USER", consumerDb.user());
            env.put("CONSUMER_DATABASE_PASSWORD", consumerDb.password());
            CliTest.Run run = runCli(env, "migrate", "--roles");
            assertThat(run.code()).as(run.err()).isZero();
            assertThat(run.out())
                    .contains("(consumer tables)")
                    .contains("fj_consumer on " + DatabaseConfig.redact(consumerDb.url()));
            try (Connection c = DriverManager.getConnection(consumerDb.url(), Roles.CONSUMER, "c-secret");
                    Statement s = c.createStatement()) {
                assertThat(s.executeUpdate(
                                "INSERT INTO consumer_processed (job_id, resource, fencing_token, outcome, processed_at) "
                                        + "VALUES (1, 'r', 1, 'applied', now())"))
                        .isEqualTo(1);
                assertThat(s.executeUpdate("INSERT INTO ledger (job_id, resource, fencing_token, payload, applied_at) "
                                + "VALUES (1, 'r', 1, '{}', now())"))
                        .isEqualTo(1);
            }
        }
    }

    @Test
    void theConsumerCannotTouchJobsTheLeaseOrTheOutbox() {
        denied(Roles.CONSUMER, "c-secret", "INSERT INTO jobs (due_at) VALUES (clock_timestamp())");
        denied(Roles.CONSUMER, "c-secret", "SELECT * FROM jobs");
        denied(Roles.CONSUMER, "c-secret", "UPDATE leader_lease SET expires_at = clock_timestamp()");
        denied(Roles.CONSUMER, "c-secret", "SELECT * FROM outbox");
        denied(Roles.DISPATCHER, "d-secret", "DELETE FROM outbox");
        denied(Roles.DISPATCHER, "d-secret", "INSERT INTO lease_takeover VALUES ('scheduler', 99, 'me', now(), now())");
        denied(Roles.RELAY, "r-secret", "UPDATE jobs SET state = 'completed'");
        denied(Roles.RELAY, "r-secret", "UPDATE outbox SET fencing_token = 99");
        denied(Roles.DISPATCHER, "d-secret", "SELECT * FROM ledger");
    }

    @Test
    void eachServiceWorksUnderItsOwnRole() throws Exception {
        TestDatabase db = postgres.database();
        String topic = "roles-" + UUID.randomUUID();
        String bootstrap = TestKafka.shared().bootstrapServers();
        LeaseConfig lease = new LeaseConfig(Duration.ofSeconds(2), Duration.ofMillis(500));
        java.util.function.BiFunction<String, String, ServiceConfig> service = (user, password) -> new ServiceConfig(
                DatabaseConfig.of(db.url(), user, password)
                        .withPoolSize(2)
                        .withConnectTimeout(Duration.ofSeconds(1))
                        .withServerTimeouts(Duration.ofMillis(500), Duration.ofMillis(500), Duration.ofSeconds(1)),
                0,
                Duration.ofSeconds(5),
                false);
        List<AutoCloseable> services = new java.util.ArrayList<>();
        KafkaSettings kafka =
                new KafkaSettings(bootstrap, topic).withTrust(dev.fencedjobs.runtime.RecordTrust.generate());
        try {
            services.add(
                    Dispatcher.builder(new DispatcherConfig(service.apply(Roles.DISPATCHER, "d-secret"), lease, 100))
                            .start());
            services.add(Relay.builder(new RelayConfig(
                            service.apply(Roles.RELAY, "r-secret"),
                            lease,
                            kafka,
                            3,
                            (short) 1,
                            100,
                            Duration.ofSeconds(1),
                            100_000,
                            Duration.ofHours(1)))
                    .start());
            services.add(FencedConsumer.builder(
                            new ConsumerConfig(
                                    service.apply(Roles.CONSUMER, "c-secret"),
                                    kafka,
                                    "roles",
                                    100,
                                    3,
                                    Duration.ofMillis(10),
                                    Duration.ofDays(7)),
                            new LedgerEffect())
                    .start());
            try (Connection c = as(Roles.PRODUCER, "p-secret");
                    Statement s = c.createStatement()) {
                s.execute(
                        "INSERT INTO jobs (resource, due_at) SELECT 'r-' || g, clock_timestamp() FROM generate_series(1, 50) g");
            }
            var dsl = Database.dsl(db.dataSource());
            await().atMost(Duration.ofSeconds(30)).until(() -> dsl.fetchCount(LEDGER) >= 50);
            assertThat(dsl.fetchCount(LEDGER)).isEqualTo(50);
            // Each role's takeovers, however many (a lease lost to a slow machine is taken again, and recorded again).
            assertThat(dsl.fetch("SELECT DISTINCT role FROM lease_takeover ORDER BY role")
                            .getValues(0, String.class))
                    .as("takeovers recorded through the owner's trigger: each shard's scheduler and relay lease")
                    .containsExactlyElementsOf(dsl.fetch(
                                    "SELECT r FROM unnest(shard_list()) s,"
                                            + " LATERAL (VALUES (shard_role('relay', s)), (shard_role('scheduler', s))) v(r) ORDER BY r")
                            .getValues(0, String.class));
        } finally {
            for (AutoCloseable s : services) {
                s.close();
            }
        }
    }
}
