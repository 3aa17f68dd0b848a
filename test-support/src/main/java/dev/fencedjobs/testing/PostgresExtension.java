package dev.fencedjobs.testing;

import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.AfterTestExecutionCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Gives tests a database of their own on the shared test server. On a static field, one database
 * per test class; on an instance field, one per test method:
 *
 * <p>A test that fails leaves in its output what the server's sessions were doing (and waiting for)
 * right then, before any {@code @AfterEach} method runs: see {@link TestPostgres#describeActivity()}.
 *
 * <pre>{@code @RegisterExtension static final PostgresExtension postgres = new PostgresExtension();}</pre>
 */
public final class PostgresExtension
        implements BeforeAllCallback,
                AfterAllCallback,
                BeforeEachCallback,
                AfterEachCallback,
                AfterTestExecutionCallback {

    private TestDatabase database;
    private boolean perMethod;

    @Override
    public void beforeAll(ExtensionContext context) {
        database = TestPostgres.shared()
                .createDatabase(context.getRequiredTestClass().getSimpleName());
    }

    @Override
    public void afterAll(ExtensionContext context) {
        drop();
    }

    @Override
    public void beforeEach(ExtensionContext context) {
        if (database == null) {
            perMethod = true;
            database = TestPostgres.shared()
                    .createDatabase(context.getRequiredTestMethod().getName());
        }
    }

    @Override
    public void afterTestExecution(ExtensionContext context) {
        if (context.getExecutionException().isPresent()) {
            System.err.println(context.getDisplayName() + " failed; "
                    + TestPostgres.shared().describeActivity());
        }
    }

    @Override
    public void afterEach(ExtensionContext context) {
        if (perMethod) {
            drop();
        }
    }

    private void drop() {
        if (database != null) {
            database.close();
            database = null;
        }
    }

    public TestDatabase database() {
        if (database == null) {
            throw new IllegalStateException("no database outside the tests of the class that registers this extension");
        }
        return database;
    }
}
