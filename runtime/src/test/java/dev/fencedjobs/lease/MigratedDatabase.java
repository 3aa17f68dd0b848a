package dev.fencedjobs.lease;

import dev.fencedjobs.db.Database;
import dev.fencedjobs.db.DatabaseConfig;
import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.time.Duration;
import org.jooq.DSLContext;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/** A test class's own database, migrated, with a pool and a jOOQ context over it. */
final class MigratedDatabase implements BeforeAllCallback, AfterAllCallback {

    private final PostgresExtension postgres = new PostgresExtension();
    private HikariDataSource pool;
    private DSLContext dsl;

    @Override
    public void beforeAll(ExtensionContext context) {
        postgres.beforeAll(context);
        TestDatabase db = postgres.database();
        pool = Database.pool(config(db), "test-" + context.getRequiredTestClass().getSimpleName());
        Database.migrate(pool);
        dsl = Database.dsl(pool);
    }

    @Override
    public void afterAll(ExtensionContext context) {
        if (pool != null) {
            pool.close();
        }
        postgres.afterAll(context);
    }

    static DatabaseConfig config(TestDatabase db) {
        return DatabaseConfig.of(db.url(), db.user(), db.password()).withPoolSize(16).withConnectTimeout(Duration.ofSeconds(5))
                .withServerTimeouts(Duration.ofSeconds(30), Duration.ofSeconds(30), Duration.ofSeconds(30));
    }

    DSLContext dsl() {
        return dsl;
    }

    HikariDataSource pool() {
        return pool;
    }

    TestDatabase database() {
        return postgres.database();
    }

    /** Moves a role's expiry into the past, as if its lease had run out; the token is untouched. */
    void expire(String role) {
        dsl.execute("UPDATE leader_lease SET expires_at = clock_timestamp() - interval '1 second' WHERE role = ?", role);
    }
}
