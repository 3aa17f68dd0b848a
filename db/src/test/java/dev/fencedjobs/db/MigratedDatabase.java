package dev.fencedjobs.db;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.time.Duration;
import org.jooq.DSLContext;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/** A test class's own database, migrated, with a pool and a jOOQ context over it (the db module's test jar: the lease's tests use it too). */
public final class MigratedDatabase implements BeforeAllCallback, AfterAllCallback {

    private final PostgresExtension postgres = new PostgresExtension();
    private HikariDataSource pool;
    private DSLContext dsl;

    @Override
    public void beforeAll(ExtensionContext context) {
        postgres.beforeAll(context);
        TestDatabase db = postgres.database();
        pool = Database.pool(
                config(db), "test-" + context.getRequiredTestClass().getSimpleName());
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

    public static DatabaseConfig config(TestDatabase db) {
        return DatabaseConfig.of(db.url(), db.user(), db.password())
                .withPoolSize(16)
                .withConnectTimeout(Duration.ofSeconds(5))
                .withServerTimeouts(Duration.ofSeconds(30), Duration.ofSeconds(30), Duration.ofSeconds(30));
    }

    public DSLContext dsl() {
        return dsl;
    }

    public HikariDataSource pool() {
        return pool;
    }

    public TestDatabase database() {
        return postgres.database();
    }

    /** Moves a role's expiry into the past, as if its lease had run out; the token is untouched. */
    public void expire(String role) {
        dsl.execute(
                "UPDATE leader_lease SET expires_at = clock_timestamp() - interval '1 second' WHERE role = ?", role);
    }
}
