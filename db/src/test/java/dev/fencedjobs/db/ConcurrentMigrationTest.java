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
        DatabaseConfig strict = DatabaseConfig.of(db.url(), db.user(), db.password()).withPoolSize(2)
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
        long migrations;
        try (var files = java.nio.file.Files.list(java.nio.file.Path.of(Database.class.getResource("/db/migration").toURI()))) {
            // Versioned (V<n>__) and repeatable (R__) migrations: each is one success row of a fresh database.
            migrations = files.filter(f -> f.getFileName().toString().matches("(V\\d+|R)__.*\\.sql")).count();
        }
        try (var c = db.connect(); var s = c.createStatement();
                var rs = s.executeQuery("SELECT count(*), count(DISTINCT coalesce(version, script)) FROM flyway_schema_history WHERE success")) {
            rs.next();
            assertThat(rs.getLong(1)).as("each migration applied once").isEqualTo(migrations).isEqualTo(rs.getLong(2));
        }
    }
}
