package dev.fencedjobs.relay;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.testing.CompletedJobs;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.SequentialReads;
import dev.fencedjobs.testing.TestDatabase;
import org.jooq.DSLContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The relay's lag (its {@code fencedjobs_outbox_unpublished} gauges and {@code /status}) reads the
 * rows after its position, not the whole outbox, which keeps an hour of published rows by default.
 */
class OutboxLagTest {

    @RegisterExtension
    static final PostgresExtension postgres = new PostgresExtension();

    @Test
    void theLagReadsTheUnpublishedRowsNotTheWholeOutbox() throws Exception {
        DatabaseConfig config = agedOutbox();
        // One connection, so that the lag's statistics are flushed from the session that made them.
        try (HikariDataSource one = Database.pool(config.withPoolSize(1), "outbox-lag-one")) {
            DSLContext dsl = Database.dsl(one);
            long before = outboxReadSequentially(dsl);

            OutboxStore.Lag lag = new JooqOutboxStore(dsl, null).lag();

            long read = outboxReadSequentially(dsl) - before;
            assertThat(lag.rows()).isEqualTo(10);
            assertThat(lag.oldestSeconds()).isBetween(0.0, 60.0);
            assertThat(read)
                    .as("outbox rows read sequentially for the lag, in an outbox of 20,010")
                    .isLessThan(1_000);
        }
    }

    @Test
    void theUnpublishedViewReadsTheRowsAfterEachShardsPositionNotTheWholeOutbox() throws Exception {
        DatabaseConfig config = agedOutbox();
        try (HikariDataSource one = Database.pool(config.withPoolSize(1), "outbox-view-one")) {
            DSLContext dsl = Database.dsl(one);
            assertThat(dsl.fetchValue("SELECT shard_count FROM shard_map"))
                    .as("one shard: every row in shard 0, as the statistics say")
                    .isEqualTo(1);
            long before = outboxReadSequentially(dsl);
            long entriesBefore = outboxIndexEntriesRead(dsl);

            int rows = dsl.fetchCount(dsl.selectFrom("outbox_unpublished"));

            long read = outboxReadSequentially(dsl) - before;
            long entries = outboxIndexEntriesRead(dsl) - entriesBefore;
            assertThat(rows).isEqualTo(10);
            assertThat(read)
                    .as("outbox rows read sequentially to count outbox_unpublished, in an outbox of 20,010")
                    .isLessThan(1_000);
            // The view's subquery, flattened, let the planner merge-join every entry of (shard, id) with the
            // shards and test each against its shard's position: 1.5 s for an outbox of 460,000 rows under load.
            assertThat(entries)
                    .as("outbox index entries read to count outbox_unpublished, in an outbox of 20,010")
                    .isLessThan(1_000);
        }
    }

    /** A new database whose outbox is as retention leaves it, 10 rows unpublished ({@link CompletedJobs#agedOutbox}). */
    private static DatabaseConfig agedOutbox() {
        TestDatabase db = postgres.database();
        DatabaseConfig config = DatabaseConfig.of(db.url(), db.user(), db.password());
        try (HikariDataSource pool = Database.pool(config, "outbox-aged")) {
            Database.migrate(pool);
            Database.dsl(pool).connection(c -> CompletedJobs.agedOutbox(c, 10));
        }
        return config;
    }

    private static long outboxReadSequentially(DSLContext dsl) {
        return dsl.connectionResult(c -> SequentialReads.flushedOf(c, "outbox"));
    }

    private static long outboxIndexEntriesRead(DSLContext dsl) {
        return dsl.connectionResult(c -> SequentialReads.indexEntriesFlushedOf(c, "outbox"));
    }
}
