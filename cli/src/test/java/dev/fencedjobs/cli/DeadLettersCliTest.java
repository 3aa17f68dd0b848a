package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@code fenced-jobs dead-letters} on a real database holding letters as the consumer writes them:
 * filters, show, replay requests and discards with who and when, and nothing deleted. (The replay
 * itself, by a running consumer, is DeadLetterReplayTest's.)
 */
class DeadLettersCliTest {

    @RegisterExtension
    static final PostgresExtension postgres = new PostgresExtension();

    @BeforeAll
    static void lettersAsTheConsumerWritesThem() throws Exception {
        assertThat(cli("migrate").code()).isZero();
        TestDatabase db = postgres.database();
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement()) {
            s.execute(
                    "INSERT INTO consumer_dead_letter (topic, kafka_partition, kafka_offset, record_key, record_value, job_id, reason, dead_lettered_at) VALUES "
                            + "('jobs', 0, 10, 'acct-1', convert_to('not json', 'UTF8'), NULL, 'not JSON: Unrecognized token', clock_timestamp() - interval '3 hours'), "
                            + "('jobs', 1, 20, 'acct-2', convert_to('{\"jobId\":7}', 'UTF8'), 7, 'effect failed 3 times: IllegalStateException: gateway down', "
                            + "clock_timestamp() - interval '30 minutes'), "
                            + "('jobs', 1, 21, 'acct-2', convert_to('{\"jobId\":8}', 'UTF8'), 8, 'effect failed 3 times: IllegalStateException: gateway down', "
                            + "clock_timestamp() - interval '20 minutes'), "
                            + "('jobs', 2, 5, 'acct-3', decode('c328ff', 'hex'), NULL, 'not JSON: Invalid UTF-8', clock_timestamp())");
        }
    }

    static CliTest.Run cli(String... args) {
        return CliTest.cli(postgres.database(), Map.of(), args);
    }

    private static String status(long id) throws Exception {
        TestDatabase db = postgres.database();
        try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(
                        "SELECT status || ' ' || coalesce(status_by, '-') FROM consumer_dead_letter WHERE id = "
                                + id)) {
            rs.next();
            return rs.getString(1);
        }
    }

    @Test
    void listFiltersShowReplayAndDiscard() throws Exception {
        CliTest.Run all = cli("dead-letters", "list");
        assertThat(all.code()).as(all.err()).isZero();
        assertThat(all.out())
                .contains("jobs-0@10", "jobs-1@20", "jobs-1@21", "jobs-2@5")
                .endsWith("4 of 4 dead letter(s)\n");
        assertThat(cli("dead-letters", "list", "--reason", "gateway").out())
                .contains("jobs-1@20", "jobs-1@21")
                .doesNotContain("jobs-0@10")
                .endsWith("2 of 2 dead letter(s)\n");
        assertThat(cli("dead-letters", "list", "--resource", "acct-3").out())
                .contains("jobs-2@5")
                .endsWith("1 of 1 dead letter(s)\n");
        assertThat(cli("dead-letters", "list", "--since", "1h").out())
                .doesNotContain("jobs-0@10")
                .endsWith("3 of 3 dead letter(s)\n");
        assertThat(cli("dead-letters", "list", "--until", "1h").out())
                .contains("jobs-0@10")
                .endsWith("1 of 1 dead letter(s)\n");
        assertThat(cli("dead-letters", "list", "--job", "8", "--limit", "1").out())
                .contains("jobs-1@21")
                .endsWith("1 of 1 dead letter(s)\n");
        assertThat(cli("dead-letters", "list", "--reason", "nothing like it").out())
                .isEqualTo("No dead letters match.\n");

        CliTest.Run show = cli("dead-letters", "show", "2");
        assertThat(show.out())
                .contains(
                        "Dead letter 2: dead",
                        "jobs-1@20",
                        "job 7, key (resource) acct-2",
                        "reason: effect failed 3 times: IllegalStateException: gateway down",
                        "value: {\"jobId\":7}");
        assertThat(cli("dead-letters", "show", "4").out()).contains("value: (3 bytes, not UTF-8) c328ff");
        assertThat(cli("dead-letters", "show", "99").err())
                .startsWith("fenced-jobs: dead-letters show: no dead letter 99");

        CliTest.Run replay = cli("dead-letters", "replay", "--reason", "gateway", "--by", "ops");
        assertThat(replay.code()).as(replay.err()).isZero();
        assertThat(replay.out())
                .startsWith(
                        "Asked a consumer to replay 2 dead letter(s): [2, 3]; a running consumer replays them within 10 s");
        String owner = postgres.database().user();
        assertThat(status(2)).isEqualTo("replay_requested ops as " + owner);

        CliTest.Run none = cli("dead-letters", "discard");
        assertThat(none.code()).isEqualTo(2);
        assertThat(none.err()).startsWith("fenced-jobs: dead-letters discard: name dead letter ids or filters");
        CliTest.Run discard = cli("dead-letters", "discard", "1", "--by", "ops");
        assertThat(discard.out()).startsWith("Discarded 1 dead letter(s): [1]");
        assertThat(status(1)).isEqualTo("discarded ops as " + owner);
        CliTest.Run again = cli("dead-letters", "discard", "1", "2");
        assertThat(again.code())
                .as("a discarded or requested letter is left as it is")
                .isEqualTo(1);
        assertThat(again.out()).startsWith("No dead letter matched that is still dead");
        assertThat(cli("dead-letters", "list", "--status", "discarded").out())
                .contains("jobs-0@10", "(by ops as " + owner + ")");
        assertThat(cli("dead-letters", "list", "--status", "buried").err())
                .contains("--status")
                .contains("expected one of [dead, replay_requested, replayed, discarded]");

        assertThat(cli("status").out())
                .contains("Consumer: 0 applied (0 ledger rows), 0 duplicates absorbed, 0 stale rejected; "
                        + "3 dead letters to act on (0 replayed, 1 discarded: fenced-jobs dead-letters list)");
        assertThat(cli("dead-letters", "list").out()).as("nothing was deleted").endsWith("4 of 4 dead letter(s)\n");
    }
}
