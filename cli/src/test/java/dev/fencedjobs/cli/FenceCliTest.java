package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@code fenced-jobs fence show|reset}: a fence a forged record poisoned (token 9,000,000,000,000
 * at outbox id 1, so every real record of the resource is stale) is shown with its history and
 * moved back by an operator, with an audit record; the consumer's own role is refused.
 */
class FenceCliTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private CliTest.Run cli(String... args) {
        return CliTest.cli(postgres.database(), Map.of(), args);
    }

    private void poisoned() throws Exception {
        assertThat(cli("migrate").code()).isZero();
        TestDatabase db = postgres.database();
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement()) {
            s.execute(
                    "INSERT INTO consumer_resource_fence (resource, highest_token, token_first_outbox_id, highest_outbox_id, updated_at)"
                            + " VALUES ('r-1', 9000000000000, 1, 1, clock_timestamp())");
            s.execute("INSERT INTO consumer_processed (job_id, resource, fencing_token, outcome, processed_at) VALUES"
                    + " (20, 'r-1', 3, 'applied', clock_timestamp()), (777777778, 'r-1', 9000000000000, 'applied', clock_timestamp()),"
                    + " (21, 'r-1', 3, 'rejected', clock_timestamp())");
            s.execute(
                    "INSERT INTO consumer_rejected (job_id, resource, fencing_token, highest_token, topic, kafka_partition, kafka_offset, rejected_at)"
                            + " VALUES (21, 'r-1', 3, 9000000000000, 'fenced-jobs', 0, 42, clock_timestamp())");
        }
    }

    private static Object scalar(TestDatabase db, String sql) throws Exception {
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement();
                ResultSet r = s.executeQuery(sql)) {
            r.next();
            return r.getObject(1);
        }
    }

    @Test
    void anOperatorSeesAPoisonedFenceAndMovesItBackWithAnAuditRecord() throws Exception {
        poisoned();
        CliTest.Run show = cli("fence", "show", "r-1");
        assertThat(show.code()).as(show.err()).isZero();
        assertThat(show.out())
                .contains(
                        "Fence of r-1: highest token 9000000000000 (tenure not known), first outbox id with it 1, highest outbox id 1")
                .contains("token 9000000000000: 1 applied")
                .contains("token 3: 1 applied")
                .contains("token 3: 1 rejected")
                .contains("job 21, token 3 below 9000000000000, fenced-jobs-0@42")
                .contains("Resets (newest first):\n  none");

        assertThat(cli("fence", "reset", "r-1", "--token", "3").err())
                .contains("Missing required option: '--reason=<text>'");
        assertThat(cli("fence", "reset", "r-1", "--token", "3", "--reason", " ").err())
                .contains("say why with --reason");
        assertThat(cli("fence", "reset", "r-1", "--token", "9000000000001", "--reason", "x")
                        .err())
                .contains("moves a fence back");
        assertThat(cli("fence", "reset", "r-9", "--token", "1", "--reason", "x").err())
                .contains("resource r-9 has no fence");
        assertThat(cli("fence", "reset", "r-1", "--token", "-1", "--reason", "x")
                        .err())
                .contains("'-1' is not a whole number of 0 or more");
        assertThat(cli("fence", "reset", "r-1", "--token", "3", "--outbox-id", "x", "--reason", "x")
                        .err())
                .contains("'x' is not a whole number of 0 or more");

        CliTest.Run reset =
                cli("fence", "reset", "r-1", "--token", "3", "--reason", "forged record at fenced-jobs-2@17");
        assertThat(reset.code()).as(reset.err()).isZero();
        assertThat(reset.out())
                .startsWith(
                        "Reset the fence of r-1 from token 9000000000000 (outbox id 1) to token 3 (outbox id not known); "
                                + "audit record #1");
        TestDatabase db = postgres.database();
        assertThat(
                        scalar(
                                db,
                                "SELECT highest_token || '/' || token_first_outbox_id || '/' || highest_outbox_id FROM consumer_resource_fence"))
                .isEqualTo("3/0/0");
        assertThat(
                        scalar(
                                db,
                                "SELECT reset_by || ' ' || from_highest_token || '>' || to_highest_token || ' ' || reason FROM consumer_fence_reset"))
                .isEqualTo(db.user() + " 9000000000000>3 forged record at fenced-jobs-2@17");
        assertThat(cli("fence", "show", "r-1").out())
                .containsPattern("#1 by " + db.user() + " at .*: token 9000000000000 \\(outbox id 1\\) to 3");
    }

    @Test
    void theConsumersOwnRoleCannotResetAFenceNorAnyLoginWithoutAnAuditRecord() throws Exception {
        poisoned();
        TestDatabase db = postgres.database();
        CliTest.Run roles = CliTest.cli(db, Map.of("FJ_CONSUMER_PASSWORD", "c-secret"), "migrate", "--roles");
        assertThat(roles.code()).as(roles.err()).isZero();
        CliTest.Run asConsumer = CliTest.cli(
                db,
                Map.of("DATABASE_USER", Roles.CONSUMER, "DATABASE_PASSWORD", "c-secret"),
                "fence",
                "reset",
                "r-1",
                "--token",
                "3",
                "--reason",
                "let me through");
        assertThat(asConsumer.code()).isEqualTo(1);
        assertThat(asConsumer.err()).contains("only an operator resets a fence, never the consumer's role");
        // A plain UPDATE by the owner, outside the CLI, is still recorded.
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement()) {
            s.execute("UPDATE consumer_resource_fence SET highest_token = 5 WHERE resource = 'r-1'");
        }
        assertThat(scalar(
                        db,
                        "SELECT count(*) || ' ' || max(from_highest_token) || '>' || max(to_highest_token) || ' ' || coalesce(max(reason), '-')"
                                + " FROM consumer_fence_reset"))
                .isEqualTo("1 9000000000000>5 -");
        assertThat(scalar(db, "SELECT highest_token FROM consumer_resource_fence"))
                .isEqualTo(5L);
    }

    @Test
    void keygenWritesAKeyPairTheServicesReadAndRefusesToOverwriteIt() throws Exception {
        Path dir = Files.createTempDirectory("fj-keys");
        CliTest.Run run = cli("keygen", "--dir", dir.toString());
        assertThat(run.code()).as(run.err()).isZero();
        assertThat(run.out())
                .startsWith("Key ")
                .contains("RECORD_SIGNING_KEY_FILE=" + dir.resolve("record-signing.key"))
                .contains("RECORD_VERIFY_KEYS_FILE=" + dir.resolve("record-signing.pub"));
        assertThat(Files.getPosixFilePermissions(dir.resolve("record-signing.key")))
                .containsExactlyInAnyOrder(
                        java.nio.file.attribute.PosixFilePermission.OWNER_READ,
                        java.nio.file.attribute.PosixFilePermission.OWNER_WRITE);
        dev.fencedjobs.runtime.RecordTrust trust =
                dev.fencedjobs.runtime.RecordTrust.from(dev.fencedjobs.db.Settings.of(Map.of(
                        "RECORD_SIGNING_KEY_FILE",
                                dir.resolve("record-signing.key").toString(),
                        "RECORD_VERIFY_KEYS_FILE",
                                dir.resolve("record-signing.pub").toString())));
        assertThat(run.out()).startsWith("Key " + trust.signingKeyId().orElseThrow() + ":");
        assertThat(trust.trusted()).containsOnlyKeys(trust.signingKeyId().orElseThrow());
        CliTest.Run again = cli("keygen", "--dir", dir.toString());
        assertThat(again.code()).isEqualTo(2);
        assertThat(again.err()).contains("record-signing.key exists");
        CliTest.Run kept = cli("keygen", "--dir", dir.toString(), "--if-missing");
        assertThat(kept.code()).as(kept.err()).isZero();
        assertThat(kept.out())
                .contains("Keeping the key pair in")
                .contains("(key " + trust.signingKeyId().orElseThrow() + ")");
    }
}
