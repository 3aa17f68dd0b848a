package dev.fencedjobs.db;

import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The services' pool says its isolation instead of learning it from its first connection: when
 * that connection died during the question (a consumer started while its database restarted, in
 * a chaos run), HikariCP kept -1 and refused every connection after it ("Transaction isolation
 * level -1 not supported", HikariCP #1944) until the process was restarted.
 */
class PoolTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void everyConnectionIsReadCommittedWhateverTheDatabaseDefault() throws Exception {
        TestDatabase db = postgres.database();
        try (Connection c = db.connect();
                Statement s = c.createStatement()) {
            s.execute("ALTER DATABASE " + db.name() + " SET default_transaction_isolation = 'serializable'");
        }
        try (HikariDataSource pool = Database.pool(MigratedDatabase.config(db), "pool-test")) {
            assertThat(pool.getTransactionIsolation())
                    .as("configured, not detected")
                    .isEqualTo("TRANSACTION_READ_COMMITTED");
            for (int i = 0; i < 3; i++) {
                try (Connection c = pool.getConnection();
                        Statement s = c.createStatement();
                        ResultSet rs = s.executeQuery("SELECT current_setting('transaction_isolation')")) {
                    rs.next();
                    assertThat(rs.getString(1)).isEqualTo("read committed");
                    assertThat(c.getTransactionIsolation()).isEqualTo(Connection.TRANSACTION_READ_COMMITTED);
                }
            }
        }
    }

    /**
     * No JIT compilation on the services' connections, pooled or not, whatever the server's default
     * (on, where PostgreSQL is built with LLVM): Database.sessionSql.
     */
    @Test
    void theServicesConnectionsNeverCompileTheirPlans() throws Exception {
        TestDatabase db = postgres.database();
        try (Connection c = db.connect();
                Statement s = c.createStatement()) {
            s.execute("ALTER DATABASE " + db.name() + " SET jit = on");
        }
        DatabaseConfig config = MigratedDatabase.config(db);
        try (HikariDataSource pool = Database.pool(config, "pool-test");
                Connection pooled = pool.getConnection();
                Connection session = Database.session(config, "session-test")) {
            for (Connection c : new Connection[] {pooled, session}) {
                try (Statement s = c.createStatement();
                        ResultSet rs = s.executeQuery("SELECT current_setting('jit')")) {
                    rs.next();
                    assertThat(rs.getString(1)).isEqualTo("off");
                }
            }
        }
    }
}
