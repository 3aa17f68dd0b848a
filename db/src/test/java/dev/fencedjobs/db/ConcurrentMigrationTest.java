package dev.fencedjobs.db;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Replicas that start together all migrate. Flyway waits for its advisory lock inside an open
 * transaction; on the services' pooled connections the idle-in-transaction timeout ended that
 * wait and the replica failed to start (seen in DispatcherProcessIT). Migrations therefore run
 * on connections of their own.
 */
class ConcurrentMigrationTest {

    @RegisterExtension
    static final PostgresExtension postgres = new PostgresExtension();

    @Test
    void replicasStartingTogetherAllMigrateEvenWithShortSessionTimeouts() throws Exception {
        TestDatabase db = postgres.database();
        DatabaseConfig strict = DatabaseConfig.of(db.url(), db.user(), db.password())
                .withPoolSize(2)
                .withServerTimeouts(Duration.ofMillis(300), Duration.ofMillis(300), Duration.ofMillis(300));
        int replicas = 6;
        ExecutorService pool = Executors.newFixedThreadPool(replicas);
        CyclicBarrier start = new CyclicBarrier(replicas);
        List<Future<?>> results = new ArrayList<>();
        try {
            for (int i = 0; i < replicas; i++) {
                results.add(pool.submit(() -> {
                    start.await(10, TimeUnit.SECONDS);
                    Database.migrate(strict, Database.MIGRATIONS, Database.HISTORY_TABLE, 0);
                    return null;
                }));
            }
            for (Future<?> result : results) {
                result.get(60, TimeUnit.SECONDS);
            }
        } finally {
            pool.shutdownNow();
        }
        // The dispatcher's location and the lease's, which it migrates first: each versioned (V<n>__)
        // and repeatable (R__) migration is one success row of a fresh database. (The dispatcher's
        // history starts with a baseline at 0: the lease's tables were there before it.)
        assertAppliedOnce(db, "/db/migration", Database.HISTORY_TABLE);
        assertAppliedOnce(db, "/db/lease", Database.LEASE_HISTORY_TABLE);
    }

    private static void assertAppliedOnce(TestDatabase db, String location, String historyTable) throws Exception {
        long migrations;
        try (var files = java.nio.file.Files.list(
                java.nio.file.Path.of(Database.class.getResource(location).toURI()))) {
            migrations = files.filter(f -> f.getFileName().toString().matches("(V\\d+|R)__.*\\.sql"))
                    .count();
        }
        try (var c = db.connect();
                var s = c.createStatement();
                var rs = s.executeQuery("SELECT count(*), count(DISTINCT coalesce(version, script)) FROM "
                        + historyTable + " WHERE success AND type <> 'BASELINE'")) {
            rs.next();
            assertThat(rs.getLong(1))
                    .as("each migration of %s applied once", location)
                    .isEqualTo(migrations)
                    .isEqualTo(rs.getLong(2));
        }
    }
}
