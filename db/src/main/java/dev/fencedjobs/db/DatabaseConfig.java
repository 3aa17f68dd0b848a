package dev.fencedjobs.db;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Properties;
import javax.sql.DataSource;
import org.postgresql.Driver;

/**
 * How a service reaches PostgreSQL, and the server-side timeouts every pooled connection gets.
 *
 * <p>The timeouts bound how long a blocked database or a paused process can hold the lease row
 * lock; {@link LeaseConfig#requireTimeoutsWithin} checks that they sit well inside the lease.
 *
 * @param url JDBC URL, {@code jdbc:postgresql://host:port/database} ({@code DATABASE_URL})
 * @param user database role ({@code DATABASE_USER})
 * @param password its password ({@code DATABASE_PASSWORD}); never logged
 * @param poolSize maximum pooled connections ({@code DATABASE_POOL_SIZE})
 * @param connectTimeout wait for a pooled connection or a new one ({@code DATABASE_CONNECT_TIMEOUT})
 * @param statementTimeout server-side {@code statement_timeout} ({@code DATABASE_STATEMENT_TIMEOUT})
 * @param lockTimeout server-side {@code lock_timeout} ({@code DATABASE_LOCK_TIMEOUT})
 * @param idleInTransactionTimeout server-side {@code idle_in_transaction_session_timeout}
 *     ({@code DATABASE_IDLE_IN_TRANSACTION_TIMEOUT})
 */
public record DatabaseConfig(
        String url,
        String user,
        String password,
        int poolSize,
        Duration connectTimeout,
        Duration statementTimeout,
        Duration lockTimeout,
        Duration idleInTransactionTimeout) {

    public static final String URL = "DATABASE_URL";
    public static final String USER = "DATABASE_USER";
    public static final String PASSWORD = "DATABASE_PASSWORD";
    public static final String POOL_SIZE = "DATABASE_POOL_SIZE";
    public static final String CONNECT_TIMEOUT = "DATABASE_CONNECT_TIMEOUT";
    public static final String STATEMENT_TIMEOUT = "DATABASE_STATEMENT_TIMEOUT";
    public static final String LOCK_TIMEOUT = "DATABASE_LOCK_TIMEOUT";
    public static final String IDLE_IN_TRANSACTION_TIMEOUT = "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT";

    public static final String DEFAULT_URL = "jdbc:postgresql://localhost:5432/fencedjobs";
    public static final String DEFAULT_USER = "fencedjobs";
    public static final int DEFAULT_POOL_SIZE = 4;
    public static final Duration DEFAULT_CONNECT_TIMEOUT = Duration.ofSeconds(2);
    public static final Duration DEFAULT_STATEMENT_TIMEOUT = Duration.ofSeconds(2);
    public static final Duration DEFAULT_LOCK_TIMEOUT = Duration.ofSeconds(1);
    public static final Duration DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT = Duration.ofSeconds(2);

    public DatabaseConfig {
        if (url == null || !url.startsWith("jdbc:postgresql:")) {
            throw new ConfigException(
                    URL, "must be a PostgreSQL JDBC URL such as " + DEFAULT_URL + ", got '" + redact(url) + "'");
        }
        Properties parsed = Driver.parseURL(url, new Properties());
        if (parsed == null) {
            throw new ConfigException(URL, "is not a JDBC URL the PostgreSQL driver can parse: '" + redact(url) + "'");
        }
        // The driver lets URL parameters override the user and password it is given, which would
        // silently defeat DATABASE_USER (and put a password where logs can see it).
        if (parsed.containsKey("user") || parsed.containsKey("password")) {
            throw new ConfigException(
                    URL,
                    "must not carry user or password parameters; set " + USER + " and " + PASSWORD + " instead (got '"
                            + redact(url) + "')");
        }
        if (user == null || user.isBlank()) {
            throw new ConfigException(USER, "is required");
        }
        password = password == null ? "" : password;
        Settings.requirePositive(POOL_SIZE, poolSize);
        Settings.requirePositive(CONNECT_TIMEOUT, connectTimeout);
        if (connectTimeout.compareTo(Duration.ofMillis(250)) < 0) {
            throw new ConfigException(
                    CONNECT_TIMEOUT, "must be at least 250ms (HikariCP's minimum), got " + connectTimeout);
        }
        Settings.requirePositive(STATEMENT_TIMEOUT, statementTimeout);
        Settings.requirePositive(LOCK_TIMEOUT, lockTimeout);
        Settings.requirePositive(IDLE_IN_TRANSACTION_TIMEOUT, idleInTransactionTimeout);
    }

    public static DatabaseConfig from(Settings settings) {
        return new DatabaseConfig(
                settings.string(URL, DEFAULT_URL),
                settings.string(USER, DEFAULT_USER),
                settings.string(PASSWORD, ""),
                settings.integer(POOL_SIZE, DEFAULT_POOL_SIZE),
                settings.duration(CONNECT_TIMEOUT, DEFAULT_CONNECT_TIMEOUT),
                settings.duration(STATEMENT_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT),
                settings.duration(LOCK_TIMEOUT, DEFAULT_LOCK_TIMEOUT),
                settings.duration(IDLE_IN_TRANSACTION_TIMEOUT, DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT));
    }

    /**
     * The defaults for everything but where and as whom: a pool of {@value #DEFAULT_POOL_SIZE}, a 2 s
     * connect timeout, a 2 s statement timeout, a 1 s lock timeout and a 2 s idle-in-transaction
     * timeout. Change one with the {@code with…} methods:
     *
     * <pre>{@code
     * DatabaseConfig db = DatabaseConfig.of("jdbc:postgresql://db:5432/app", "fj_dispatcher", secret)
     *         .withPoolSize(8);
     * }</pre>
     */
    public static DatabaseConfig of(String url, String user, String password) {
        return new DatabaseConfig(
                url,
                user,
                password,
                DEFAULT_POOL_SIZE,
                DEFAULT_CONNECT_TIMEOUT,
                DEFAULT_STATEMENT_TIMEOUT,
                DEFAULT_LOCK_TIMEOUT,
                DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT);
    }

    public DatabaseConfig withPoolSize(int poolSize) {
        return new DatabaseConfig(
                url, user, password, poolSize, connectTimeout, statementTimeout, lockTimeout, idleInTransactionTimeout);
    }

    public DatabaseConfig withConnectTimeout(Duration connectTimeout) {
        return new DatabaseConfig(
                url, user, password, poolSize, connectTimeout, statementTimeout, lockTimeout, idleInTransactionTimeout);
    }

    public DatabaseConfig withStatementTimeout(Duration statementTimeout) {
        return new DatabaseConfig(
                url, user, password, poolSize, connectTimeout, statementTimeout, lockTimeout, idleInTransactionTimeout);
    }

    public DatabaseConfig withLockTimeout(Duration lockTimeout) {
        return new DatabaseConfig(
                url, user, password, poolSize, connectTimeout, statementTimeout, lockTimeout, idleInTransactionTimeout);
    }

    public DatabaseConfig withIdleInTransactionTimeout(Duration idleInTransactionTimeout) {
        return new DatabaseConfig(
                url, user, password, poolSize, connectTimeout, statementTimeout, lockTimeout, idleInTransactionTimeout);
    }

    /** The three server-side timeouts at once. */
    public DatabaseConfig withServerTimeouts(
            Duration statementTimeout, Duration lockTimeout, Duration idleInTransactionTimeout) {
        return new DatabaseConfig(
                url, user, password, poolSize, connectTimeout, statementTimeout, lockTimeout, idleInTransactionTimeout);
    }

    /**
     * What the sessions of an application's pool are, read from one of its connections: where (the
     * URL without its parameters), as whom, and their server-side timeouts. A leased service (the
     * dispatcher, the relay) lent a pool needs those bounded: its safety margin and the time it may
     * hold the lease row lock are derived from them, and it does not set them on a pool it does not
     * own. Set them on the pool (HikariCP's {@code connectionInitSql}), in the URL ({@code
     * options=-c statement_timeout=2s}), or on the role ({@code ALTER ROLE … SET statement_timeout = '2s'}).
     *
     * @throws ConfigException when a timeout is 0 (none), naming the setting and how to set it
     * @throws IllegalStateException when no connection can be had
     */
    public static DatabaseConfig ofSessions(DataSource dataSource) {
        try (Connection c = dataSource.getConnection();
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(
                        "SELECT current_user, "
                                + "(SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'), "
                                + "(SELECT setting::bigint FROM pg_settings WHERE name = 'lock_timeout'), "
                                + "(SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout')")) {
            rs.next();
            String url = c.getMetaData().getURL();
            int query = url.indexOf('?');
            url = query < 0 ? url : url.substring(0, query);
            String[] names = {"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout"};
            String[] settings = {STATEMENT_TIMEOUT, LOCK_TIMEOUT, IDLE_IN_TRANSACTION_TIMEOUT};
            Duration[] timeouts = new Duration[3];
            for (int i = 0; i < 3; i++) {
                long millis = rs.getLong(i + 2);
                if (millis <= 0) {
                    throw new ConfigException(
                            settings[i],
                            "the lent DataSource's sessions have " + names[i] + " = 0 (none); a leased "
                                    + "service needs it bounded and shorter than the lease: set it on the pool (HikariCP connectionInitSql "
                                    + "'SET " + names[i] + " = 2000'), in the URL (options=-c " + names[i]
                                    + "=2s) or on the role (ALTER ROLE "
                                    + rs.getString(1) + " SET " + names[i] + " = '2s')");
                }
                timeouts[i] = Duration.ofMillis(millis);
            }
            return new DatabaseConfig(
                    url, rs.getString(1), "", 1, DEFAULT_CONNECT_TIMEOUT, timeouts[0], timeouts[1], timeouts[2]);
        } catch (SQLException e) {
            throw new IllegalStateException(
                    "the lent DataSource gave no connection to read its sessions' settings from: " + e.getMessage(), e);
        }
    }

    /** The URL without any password or query parameters, fit for logs. */
    public String safeUrl() {
        return redact(url);
    }

    /** Keeps scheme, host, port and database; drops everything after '?' (it may carry a password). */
    public static String redact(String url) {
        if (url == null) {
            return "null";
        }
        int query = url.indexOf('?');
        return query < 0 ? url : url.substring(0, query) + "?…";
    }

    @Override
    public String toString() {
        return "DatabaseConfig[url=" + safeUrl() + ", user=" + user + ", password="
                + (password.isEmpty() ? "(none)" : "****")
                + ", poolSize=" + poolSize + ", connectTimeout=" + connectTimeout + ", statementTimeout="
                + statementTimeout
                + ", lockTimeout=" + lockTimeout + ", idleInTransactionTimeout=" + idleInTransactionTimeout + "]";
    }
}
