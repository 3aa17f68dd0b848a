package dev.fencedjobs.db.internal;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;
import javax.sql.DataSource;
import org.flywaydb.core.Flyway;
import org.jooq.DSLContext;
import org.jooq.SQLDialect;
import org.jooq.conf.Settings;
import org.jooq.impl.DSL;
import org.postgresql.ds.PGSimpleDataSource;

/** Connection pools, jOOQ contexts and migrations, set up the same way by every service. */
public final class Database {

    /**
     * An SQL expression: whether {@code table} exists in this database and this login may read
     * it, so that a reader shows only the parts it can (the consumer's tables may live elsewhere).
     */
    public static String readable(String table) {
        return "CASE WHEN to_regclass('" + table + "') IS NULL THEN false ELSE has_table_privilege(to_regclass('" + table
                + "'), 'SELECT') END";
    }

    static {
        // jOOQ prints a banner and tips on first use; services log their own start-up instead.
        System.setProperty("org.jooq.no-logo", "true");
        System.setProperty("org.jooq.no-tips", "true");
    }

    /** The dispatcher and relay schema: jobs, lease, outbox. */
    public static final String MIGRATIONS = "classpath:db/migration";
    public static final String HISTORY_TABLE = "flyway_schema_history";

    private Database() {}

    /**
     * A HikariCP pool whose connections carry the configured server-side timeouts. It starts even
     * when the database is down (services report not-ready and retry), and sends no keep-alive
     * queries, so an idle service issues only its own statements.
     */
    public static HikariDataSource pool(DatabaseConfig config, String poolName) {
        HikariConfig hikari = new HikariConfig();
        hikari.setPoolName(poolName);
        hikari.setJdbcUrl(config.url());
        hikari.setUsername(config.user());
        hikari.setPassword(config.password());
        hikari.setMaximumPoolSize(config.poolSize());
        hikari.setMinimumIdle(1);
        hikari.setConnectionTimeout(config.connectTimeout().toMillis());
        hikari.setValidationTimeout(Math.max(250, config.connectTimeout().toMillis() / 2));
        hikari.setInitializationFailTimeout(-1);
        hikari.setKeepaliveTime(0);
        hikari.setConnectionInitSql(timeoutsSql(config));
        hikari.addDataSourceProperty("ApplicationName", poolName);
        hikari.addDataSourceProperty("tcpKeepAlive", "true");
        hikari.addDataSourceProperty("connectTimeout", String.valueOf(Math.max(1, config.connectTimeout().toSeconds())));
        // A partitioned connection fails after this long instead of hanging: longer than any
        // statement may run, so only a dead peer trips it.
        hikari.addDataSourceProperty("socketTimeout", String.valueOf(config.statementTimeout().toSeconds() + 5));
        return new HikariDataSource(hikari);
    }

    /**
     * One connection outside the pool, set up as the pool's are (server-side timeouts, keep-alive,
     * socket timeout), for a service's long-lived session such as its lease session.
     */
    public static Connection session(DatabaseConfig config, String applicationName) throws SQLException {
        Properties props = new Properties();
        props.setProperty("user", config.user());
        props.setProperty("password", config.password());
        props.setProperty("ApplicationName", applicationName);
        props.setProperty("tcpKeepAlive", "true");
        props.setProperty("connectTimeout", String.valueOf(Math.max(1, config.connectTimeout().toSeconds())));
        props.setProperty("socketTimeout", String.valueOf(config.statementTimeout().toSeconds() + 5));
        Connection c = DriverManager.getConnection(config.url(), props);
        try (Statement s = c.createStatement()) {
            s.execute(timeoutsSql(config));
        } catch (SQLException | RuntimeException e) {
            c.close();
            throw e;
        }
        return c;
    }

    static String timeoutsSql(DatabaseConfig config) {
        return "SET statement_timeout = " + config.statementTimeout().toMillis()
                + "; SET lock_timeout = " + config.lockTimeout().toMillis()
                + "; SET idle_in_transaction_session_timeout = " + config.idleInTransactionTimeout().toMillis();
    }

    public static DSLContext dsl(DataSource dataSource) {
        return DSL.using(dataSource, SQLDialect.POSTGRES, new Settings().withExecuteLogging(false));
    }

    /**
     * Migrates over connections of its own, not the service pool: Flyway waits for its advisory
     * lock inside an open transaction, and the pool's idle-in-transaction timeout would end the
     * session of every replica but the first when several start together.
     */
    public static void migrate(DatabaseConfig config, String location, String historyTable, int connectRetries) {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setUrl(config.url());
        ds.setUser(config.user());
        ds.setPassword(config.password());
        ds.setConnectTimeout((int) Math.max(1, config.connectTimeout().toSeconds()));
        ds.setApplicationName("migrate");
        migrate(ds, location, historyTable, connectRetries);
    }

    /** Applies the schema migrations in {@code db/migration}; safe to run from several replicas at once. */
    public static void migrate(DataSource dataSource) {
        migrate(dataSource, 0);
    }

    /**
     * As {@link #migrate(DataSource)}, first waiting for the database: up to {@code connectRetries}
     * more tries, with Flyway's doubling pause between them (at most 10 s).
     */
    public static void migrate(DataSource dataSource, int connectRetries) {
        migrate(dataSource, MIGRATIONS, HISTORY_TABLE, connectRetries);
    }

    /**
     * Applies one component's migrations with its own history table, so the dispatcher's schema
     * and the consumer's can live in one database or in two. Baselining at version 0 lets a
     * component start on a database where the other's tables already exist.
     */
    public static void migrate(DataSource dataSource, String location, String historyTable, int connectRetries) {
        Flyway flyway = Flyway.configure()
                .dataSource(dataSource)
                .locations(location)
                .table(historyTable)
                .baselineOnMigrate(true)
                .baselineVersion("0")
                .connectRetries(connectRetries)
                .connectRetriesInterval(10)
                .load();
        // Flyway locks only once its history table exists: two first-time migrations of one empty
        // database both try to create (or baseline) it, and one fails. A session-level advisory
        // lock, held on a connection of its own, puts every migrator of this database in a queue.
        flyway.info(); // connects with Flyway's retries, so the lock below finds the database up
        try (Connection lock = dataSource.getConnection(); Statement s = lock.createStatement()) {
            s.execute("SELECT pg_advisory_lock(" + MIGRATION_LOCK + ")");
            try {
                flyway.migrate();
            } finally {
                s.execute("SELECT pg_advisory_unlock(" + MIGRATION_LOCK + ")");
            }
        } catch (SQLException e) {
            throw new IllegalStateException("migration lock: " + e.getMessage(), e);
        }
    }

    /** Advisory lock key that serialises migrations (any 64-bit constant unique to this project). */
    private static final long MIGRATION_LOCK = 0x66656e6365646a6fL;
}
