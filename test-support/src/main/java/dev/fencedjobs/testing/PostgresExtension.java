package dev.fencedjobs.testing;

import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Gives a test class its own database on the shared test server:
 *
 * <pre>{@code @RegisterExtension static final PostgresExtension postgres = new PostgresExtension();}</pre>
 */
public final class PostgresExtension implements BeforeAllCallback, AfterAllCallback {

    private TestDatabase database;

    @Override
    public void beforeAll(ExtensionContext context) {
        database = TestPostgres.shared().createDatabase(context.getRequiredTestClass().getSimpleName());
    }

    @Override
    public void afterAll(ExtensionContext context) {
        if (database != null) {
            database.close();
            database = null;
        }
    }

    public TestDatabase database() {
        if (database == null) {
            throw new IllegalStateException("the database exists from beforeAll to afterAll of the test class");
        }
        return database;
    }
}
