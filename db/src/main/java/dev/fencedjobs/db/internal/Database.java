package dev.fencedjobs.db.internal;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import javax.sql.DataSource;
import org.flywaydb.core.Flyway;
import org.flywaydb.core.api.CoreErrorCode;
import org.flywaydb.core.api.ErrorCode;
import org.flywaydb.core.api.output.ValidateOutput;
import org.jooq.DSLContext;
import org.jooq.SQLDialect;
import org.jooq.conf.Settings;
import org.jooq.impl.DSL;
import org.postgresql.ds.PGSimpleDataSource;
import org.slf4j.LoggerFactory;

/** Connection pools, jOOQ contexts and migrations, set up the same way by every service. */
public final class Database {

    /**
     * An SQL expression: whether {@code table} exists in this database and this login may read
     * it, so that a reader shows only the parts it can (the consumer's tables may live elsewhere).
     */
    public static String readable(String table) {
        return "CASE WHEN to_regclass('" + table + "') IS NULL THEN false ELSE has_table_privilege(to_regclass('"
                + table + "'), 'SELECT') END";
    }

    static {
        // jOOQ prints a banner and tips on first use; services log their own start-up instead.
        System.setProperty("org.jooq.no-logo", "true");
        System.setProperty("org.jooq.no-tips", "true");
    }

    /**
     * The dispatcher and relay schema: jobs, outbox, schedules, the dispatch policy. Migrating it
     * migrates the lease's location first ({@link #LEASE_MIGRATIONS}): its guards read the lease.
     */
    public static final String MIGRATIONS = "classpath:db/migration";

    public static final String HISTORY_TABLE = "flyway_schema_history";

    /** The lease's tables, functions and triggers, with a history table of their own. */
    public static final String LEASE_MIGRATIONS = "classpath:db/lease";

    public static final String LEASE_HISTORY_TABLE = "lease_schema_history";

    /**
     * What the dispatcher's migrations lost when the lease became a location of its own: the lease
     * parts of V1, V4, V5 and V10 (their checksums changed) and R__leader_lease.sql (moved).
     */
    private static final Set<String> MOVED_TO_LEASE = Set.of("1", "4", "5", "10", "leader lease");

    private Database() {}

    /**
     * A HikariCP pool whose connections carry the configured server-side timeouts and read
     * committed isolation. It starts even when the database is down (services report not-ready and
     * retry), and sends no keep-alive queries, so an idle service issues only its own statements.
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
        // Said, not detected: HikariCP learns the default isolation from its first connection, and
        // when that connection dies during the question (a service starting while its database
        // restarts) it keeps -1 and fails every later connection with "Transaction isolation level
        // -1 not supported" for the life of the pool (HikariCP #1944). Read committed is
        // PostgreSQL's default and what every statement here is written for.
        hikari.setTransactionIsolation("TRANSACTION_READ_COMMITTED");
        hikari.setKeepaliveTime(0);
        hikari.setConnectionInitSql(sessionSql(config));
        hikari.addDataSourceProperty("ApplicationName", poolName);
        hikari.addDataSourceProperty("tcpKeepAlive", "true");
        hikari.addDataSourceProperty(
                "connectTimeout",
                String.valueOf(Math.max(1, config.connectTimeout().toSeconds())));
        // A partitioned connection fails after this long instead of hanging: longer than any
        // statement may run, so only a dead peer trips it.
        hikari.addDataSourceProperty(
                "socketTimeout",
                String.valueOf(networkTimeout(config.statementTimeout()).toSeconds()));
        return new HikariDataSource(hikari);
    }

    /**
     * How long a connection waits for the server's answer to a statement that may run for {@code
     * statement}: 5 s more, so that the server's timeout ends the statement first and only a dead
     * peer trips this one. The pool's and sessions' socket timeout; a call given longer than its
     * session's statement timeout sets its connection's network timeout from it for the call.
     */
    public static Duration networkTimeout(Duration statement) {
        return statement.plusSeconds(5);
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
        props.setProperty(
                "connectTimeout",
                String.valueOf(Math.max(1, config.connectTimeout().toSeconds())));
        props.setProperty(
                "socketTimeout",
                String.valueOf(networkTimeout(config.statementTimeout()).toSeconds()));
        Connection c = DriverManager.getConnection(config.url(), props);
        try (Statement s = c.createStatement()) {
            s.execute(sessionSql(config));
        } catch (SQLException | RuntimeException e) {
            c.close();
            throw e;
        }
        return c;
    }

    /**
     * The session's settings: the server-side timeouts, and no JIT compilation. Every statement of
     * the services is short, and the planner's estimates for some (a sort under {@code enable_sort
     * = off}, FencedJobBatches) exceed {@code jit_above_cost}: on a server built with LLVM each of
     * them then spent longer compiling its plan than running it.
     */
    static String sessionSql(DatabaseConfig config) {
        return "SET jit = off; SET statement_timeout = "
                + config.statementTimeout().toMillis()
                + "; SET lock_timeout = " + config.lockTimeout().toMillis()
                + "; SET idle_in_transaction_session_timeout = "
                + config.idleInTransactionTimeout().toMillis();
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
        migrate(config, location, historyTable, connectRetries, 1);
    }

    /**
     * As {@link #migrate(DatabaseConfig, String, String, int)}; a new database gets {@code
     * initialShards} shards ({@link Shards#DEFAULT_COUNT} for the services and the CLI), one that
     * has held jobs or leases keeps one shard until an operator changes it (docs/shards.md).
     */
    public static void migrate(
            DatabaseConfig config, String location, String historyTable, int connectRetries, int initialShards) {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setUrl(config.url());
        ds.setUser(config.user());
        ds.setPassword(config.password());
        ds.setConnectTimeout((int) Math.max(1, config.connectTimeout().toSeconds()));
        ds.setApplicationName("migrate");
        migrate(ds, location, historyTable, connectRetries, initialShards);
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
        migrate(dataSource, location, historyTable, connectRetries, 1);
    }

    /** As {@link #migrate(DataSource, String, String, int)}, a new database with {@code initialShards} shards. */
    public static void migrate(
            DataSource dataSource, String location, String historyTable, int connectRetries, int initialShards) {
        Flyway flyway = flyway(dataSource, location, historyTable, "0", connectRetries, initialShards);
        // Flyway locks only once its history table exists: two first-time migrations of one empty
        // database both try to create (or baseline) it, and one fails. A session-level advisory
        // lock, held on a connection of its own, puts every migrator of this database in a queue.
        flyway.info(); // connects with Flyway's retries, so the lock below finds the database up
        try (Connection lock = dataSource.getConnection();
                Statement s = lock.createStatement()) {
            s.execute("SELECT pg_advisory_lock(" + MIGRATION_LOCK + ")");
            try {
                if (location.equals(MIGRATIONS)) {
                    migrateLease(dataSource, lock);
                    forgetWhatMovedToTheLease(flyway);
                }
                flyway.migrate();
            } finally {
                s.execute("SELECT pg_advisory_unlock(" + MIGRATION_LOCK + ")");
            }
        } catch (SQLException e) {
            throw new IllegalStateException("migration lock: " + e.getMessage(), e);
        }
    }

    private static Flyway flyway(
            DataSource dataSource, String location, String historyTable, String baseline, int connectRetries) {
        return flyway(dataSource, location, historyTable, baseline, connectRetries, 1);
    }

    private static Flyway flyway(
            DataSource dataSource,
            String location,
            String historyTable,
            String baseline,
            int connectRetries,
            int initialShards) {
        return Flyway.configure()
                .dataSource(dataSource)
                .placeholders(Map.of(INITIAL_SHARDS, Integer.toString(initialShards)))
                .locations(location)
                .table(historyTable)
                .baselineOnMigrate(true)
                .baselineVersion(baseline)
                .connectRetries(connectRetries)
                .connectRetriesInterval(10)
                .load();
    }

    /**
     * The lease's location. A database whose lease tables the dispatcher's V1 made (before the lease
     * had a location of its own) has them but no lease history: Flyway baselines it at version 1, so
     * only the repeatable migration runs there, restating the functions and triggers it has.
     */
    private static void migrateLease(DataSource dataSource, Connection c) throws SQLException {
        boolean tablesMadeBefore;
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT to_regclass('leader_lease') IS NOT NULL AND to_regclass('"
                        + LEASE_HISTORY_TABLE + "') IS NULL")) {
            rs.next();
            tablesMadeBefore = rs.getBoolean(1);
        }
        flyway(dataSource, LEASE_MIGRATIONS, LEASE_HISTORY_TABLE, tablesMadeBefore ? "1" : "0", 0)
                .migrate();
    }

    /**
     * On a database migrated before the lease had a location of its own, the dispatcher's history
     * still has the old checksums of V1, V4, V5 and V10 and a row for R__leader_lease.sql, and Flyway
     * would refuse to go on. Those differences, and only those, are realigned once with Flyway's
     * repair (new checksums; the moved file marked deleted). Anything else that fails validation is
     * left for migrate to report.
     */
    private static void forgetWhatMovedToTheLease(Flyway flyway) {
        List<ValidateOutput> invalid = flyway.validateWithResult().invalidMigrations;
        boolean moved = invalid.stream().anyMatch(Database::movedToTheLease);
        boolean onlyMovedOrPending = invalid.stream().allMatch(m -> movedToTheLease(m) || pending(m));
        if (moved && onlyMovedOrPending) {
            LoggerFactory.getLogger(Database.class)
                    .info(
                            "The lease has its own migrations now (db/lease, history {}): "
                                    + "realigning the dispatcher's history of V1, V4, V5, V10 and R__leader_lease.sql",
                            LEASE_HISTORY_TABLE);
            flyway.repair();
        }
    }

    private static boolean movedToTheLease(ValidateOutput m) {
        ErrorCode code = m.errorDetails == null ? null : m.errorDetails.errorCode;
        return (code == CoreErrorCode.CHECKSUM_MISMATCH && MOVED_TO_LEASE.contains(m.version))
                || (code == CoreErrorCode.APPLIED_REPEATABLE_MIGRATION_NOT_RESOLVED
                        && MOVED_TO_LEASE.contains(m.description));
    }

    private static boolean pending(ValidateOutput m) {
        ErrorCode code = m.errorDetails == null ? null : m.errorDetails.errorCode;
        return code == CoreErrorCode.RESOLVED_VERSIONED_MIGRATION_NOT_APPLIED
                || code == CoreErrorCode.RESOLVED_REPEATABLE_MIGRATION_NOT_APPLIED
                || code == CoreErrorCode.OUTDATED_REPEATABLE_MIGRATION;
    }

    /** Advisory lock key that serialises migrations (any 64-bit constant unique to this project). */
    private static final long MIGRATION_LOCK = 0x66656e6365646a6fL;

    /** The Flyway placeholder V13 reads: how many shards a new database starts with. */
    public static final String INITIAL_SHARDS = "initial_shards";
}
