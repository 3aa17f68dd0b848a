package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.sql.Connection;
import java.sql.Statement;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * {@code fenced-jobs shards show|set} against a real database: the map and each shard's leases,
 * a change put in force at once when nothing is left to publish, a drain that waits for the relays
 * and says so, a drain cancelled by the count in force, and a count out of range refused.
 */
class ShardCommandsTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void showSetDrainAndCancel() throws Exception {
        TestDatabase db = postgres.database();
        CliTest.Run migrate = CliTest.cli(db, Map.of(), "migrate");
        assertThat(migrate.code()).as(migrate.err()).isZero();
        CliTest.Run shown = CliTest.cli(db, Map.of(), "shards", "show");
        assertThat(shown.code()).as(shown.err()).isZero();
        assertThat(shown.out())
                .as("a new database made by `migrate` has the default count")
                .contains("shard map generation 1: 2 shards")
                .contains("(never held)");

        CliTest.Run four = CliTest.cli(db, Map.of(), "shards", "set", "4");
        assertThat(four.code()).as(four.err()).isZero();
        assertThat(four.out()).contains("Switched to 4 shards (generation 2)");
        assertThat(CliTest.cli(db, Map.of(), "shards", "set", "4").out()).contains("The map has 4 shards already");
        assertThat(CliTest.cli(db, Map.of(), "status").out()).contains("Shards: 4 (map generation 2)");

        // A record of shard 0 not yet published: the drain waits for the relays and says so.
        try (Connection c = db.connect();
                Statement s = c.createStatement()) {
            dev.fencedjobs.testing.CompletedJobs.insert(c, 1, "'r-1'", "'{}'");
        }
        CliTest.Run waiting = CliTest.cli(db, Map.of(), "shards", "set", "3", "--wait", "PT0.5S");
        assertThat(waiting.code()).isEqualTo(1);
        assertThat(waiting.out())
                .contains("Draining")
                .contains("Still draining after PT0.5S: 1 shard(s) of the old map have records to publish")
                .contains("`fenced-jobs shards set 4` cancels the drain");
        assertThat(CliTest.cli(db, Map.of(), "shards", "show").out()).contains("draining to 3");
        CliTest.Run cancelled = CliTest.cli(db, Map.of(), "shards", "set", "4");
        assertThat(cancelled.code()).as(cancelled.err()).isZero();
        assertThat(cancelled.out()).contains("Cancelled the drain to 3: 4 shards stay in force");

        CliTest.Run zero = CliTest.cli(db, Map.of(), "shards", "set", "0");
        assertThat(zero.code()).isEqualTo(2);
        assertThat(zero.err()).contains("a shard count is between 1 and 256, not 0");
    }

    @Test
    void aDatabaseMigratedByTheLibraryKeepsOneShard() throws Exception {
        TestDatabase db = postgres.database();
        Database.migrate(db.dataSource());
        assertThat(CliTest.cli(db, Map.of(), "shards", "show").out()).contains("shard map generation 1: 1 shard\n");
    }
}
