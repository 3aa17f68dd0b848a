package dev.fencedjobs.testing;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Locale;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.testcontainers.DockerClientFactory;
import org.testcontainers.postgresql.PostgreSQLContainer;

/**
 * One real PostgreSQL server per test JVM, chosen in this order:
 *
 * <ol>
 *   <li>{@code FJ_TEST_POSTGRES_URL} (with {@code FJ_TEST_POSTGRES_USER} and
 *       {@code FJ_TEST_POSTGRES_PASSWORD}, not as URL parameters): a server you run, reached as a
 *       user that may create databases;
 *   <li>Testcontainers ({@code postgres:17}), if a Docker engine answers;
 *   <li>otherwise an embedded PostgreSQL 17 started from Maven-served binaries.
 * </ol>
 *
 * <p>{@code FJ_TEST_SERVERS} narrows the last two: {@code testcontainers} requires a Docker engine
 * (no engine fails the test instead of falling back), {@code embedded} does not ask for one.
 *
 * <p>Tests never share a database: {@link #createDatabase} makes a fresh one each time.
 */
public final class TestPostgres {

    public static final String URL_ENV = "FJ_TEST_POSTGRES_URL";
    public static final String USER_ENV = "FJ_TEST_POSTGRES_USER";
    public static final String PASSWORD_ENV = "FJ_TEST_POSTGRES_PASSWORD";

    private static final Logger log = LoggerFactory.getLogger(TestPostgres.class);
    private static TestPostgres shared;

    private final String adminUrl;
    private final String user;
    private final String password;
    private final String source;

    private TestPostgres(String adminUrl, String user, String password, String source) {
        this.adminUrl = adminUrl;
        this.user = user;
        this.password = password;
        this.source = source;
    }

    /** The server of this JVM, started on first use and stopped when the JVM exits. */
    public static synchronized TestPostgres shared() {
        if (shared == null) {
            shared = start();
            log.info("Test PostgreSQL from {}: {}", shared.source, shared.adminUrl);
        }
        return shared;
    }

    private static TestPostgres start() {
        Optional<String> url = env(URL_ENV);
        if (url.isPresent()) {
            return new TestPostgres(
                    url.get(),
                    env(USER_ENV).orElse("postgres"),
                    env(PASSWORD_ENV).orElse(""),
                    URL_ENV);
        }
        if (Docker.available()) {
            // As the embedded server is set up: room for a handful of services, pools and tests at once
            // (300, where the image's default is 100), and no fsync (as Testcontainers sets by default).
            PostgreSQLContainer container = new PostgreSQLContainer("postgres:17")
                    .withCommand("postgres", "-c", "fsync=off", "-c", "max_connections=300", "-c", "log_lock_waits=on");
            container.start();
            Runtime.getRuntime().addShutdownHook(new Thread(container::stop, "test-postgres-stop"));
            return new TestPostgres(
                    container.getJdbcUrl(), container.getUsername(), container.getPassword(), "Testcontainers");
        }
        EmbeddedPostgres embedded = startEmbedded();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> closeQuietly(embedded), "test-postgres-stop"));
        // No user parameter in the URL: services take the user from their own settings.
        return new TestPostgres(
                "jdbc:postgresql://localhost:" + embedded.getPort() + "/postgres",
                "postgres",
                "",
                "embedded PostgreSQL");
    }

    static EmbeddedPostgres startEmbedded() {
        try {
            return EmbeddedPostgres.builder()
                    // A handful of services, pools and tests share one server.
                    .setServerConfig("max_connections", "300")
                    .setServerConfig("fsync", "off")
                    // A lock wait longer than deadlock_timeout (1 s) is logged, with who holds the lock.
                    .setServerConfig("log_lock_waits", "on")
                    .start();
        } catch (IOException e) {
            throw new UncheckedIOException("could not start embedded PostgreSQL", e);
        }
    }

    /** Creates an empty database on this server, owned by the admin user. */
    public TestDatabase createDatabase(String hint) {
        String name = ("t_" + hint.replaceAll("[^A-Za-z0-9]", "_") + "_"
                        + Long.toString(ThreadLocalRandom.current().nextLong() & Long.MAX_VALUE, 36))
                .toLowerCase(Locale.ROOT);
        if (name.length() > 60) {
            name = name.substring(name.length() - 60);
        }
        execute("CREATE DATABASE " + name);
        return new TestDatabase(this, name, withDatabase(adminUrl, name), user, password);
    }

    /**
     * What the server and the machine are doing, for a failed test's output: every session's state,
     * what it waits for and who blocks it, and the machine's pressure stall figures. A test that
     * fails because the database stopped answering leaves the evidence of why, not only a timeout.
     */
    public String describeActivity() {
        StringBuilder out = new StringBuilder("test PostgreSQL (" + source + ") sessions, oldest transaction first:\n");
        try (Connection c = DriverManager.getConnection(adminUrl, user, password);
                Statement s = c.createStatement();
                java.sql.ResultSet rs = s.executeQuery("SELECT pid, datname, application_name, backend_type, state,"
                        + " wait_event_type, wait_event, pg_blocking_pids(pid), now() - xact_start, now() - query_start,"
                        + " left(regexp_replace(query, '\\s+', ' ', 'g'), 160)"
                        + " FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                        // Background processes only when they wait for something other than work.
                        + " AND NOT (backend_type <> 'client backend' AND wait_event_type IS NOT DISTINCT FROM 'Activity')"
                        + " ORDER BY xact_start NULLS LAST, backend_start")) {
            while (rs.next()) {
                out.append(String.format(
                        Locale.ROOT,
                        "  pid %s db %s app '%s' %s: %s, waits %s/%s, blocked by %s, transaction %s, statement %s: %s%n",
                        rs.getString(1),
                        rs.getString(2),
                        rs.getString(3),
                        rs.getString(4),
                        rs.getString(5),
                        rs.getString(6),
                        rs.getString(7),
                        rs.getString(8),
                        rs.getString(9),
                        rs.getString(10),
                        rs.getString(11)));
            }
        } catch (SQLException e) {
            out.append("  not readable: ").append(e).append('\n');
        }
        for (String kind : new String[] {"cpu", "io", "memory"}) {
            try {
                java.nio.file.Path path = java.nio.file.Path.of("/proc/pressure", kind);
                if (java.nio.file.Files.isReadable(path)) {
                    out.append("machine pressure, ")
                            .append(kind)
                            .append(": ")
                            .append(String.join("; ", java.nio.file.Files.readAllLines(path)))
                            .append('\n');
                }
            } catch (IOException e) {
                out.append("machine pressure, ")
                        .append(kind)
                        .append(": not readable: ")
                        .append(e)
                        .append('\n');
            }
        }
        return out.toString();
    }

    void dropDatabase(String name) {
        execute("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
    }

    private void execute(String sql) {
        try (Connection c = DriverManager.getConnection(adminUrl, user, password);
                Statement s = c.createStatement()) {
            s.execute(sql);
        } catch (SQLException e) {
            throw new IllegalStateException("test PostgreSQL: " + sql + " failed", e);
        }
    }

    /** Replaces the database name in a {@code jdbc:postgresql://host:port/name?params} URL. */
    static String withDatabase(String url, String database) {
        int hostStart = url.indexOf("//") + 2;
        int slash = url.indexOf('/', hostStart);
        int query = url.indexOf('?', hostStart);
        String prefix = url.substring(0, slash < 0 ? (query < 0 ? url.length() : query) : slash);
        String params = query < 0 ? "" : url.substring(query);
        return prefix + "/" + database + params;
    }

    static Optional<String> env(String name) {
        return Optional.ofNullable(System.getenv(name)).filter(v -> !v.isBlank());
    }

    static void closeQuietly(AutoCloseable closeable) {
        try {
            closeable.close();
        } catch (Exception e) {
            log.warn("could not stop a test server", e);
        }
    }

    /**
     * Whether to take servers from Testcontainers: asks once whether a Docker engine answers, unless
     * {@code FJ_TEST_SERVERS} decides ({@code embedded}: no; {@code testcontainers}: yes, and no
     * engine is an error).
     */
    static final class Docker {
        static final String SERVERS_ENV = "FJ_TEST_SERVERS";
        private static Boolean available;

        static synchronized boolean available() {
            if (available == null) {
                String servers = env(SERVERS_ENV).orElse("auto").toLowerCase(Locale.ROOT);
                if (servers.equals("embedded")) {
                    available = false;
                    log.info(
                            "Docker engine for Testcontainers: not asked ({}=embedded), using embedded servers",
                            SERVERS_ENV);
                    return available;
                }
                if (!servers.equals("auto") && !servers.equals("testcontainers")) {
                    throw new IllegalStateException(
                            SERVERS_ENV + "=" + servers + ": expected testcontainers, embedded or auto");
                }
                try {
                    available = DockerClientFactory.instance().isDockerAvailable();
                } catch (RuntimeException | LinkageError e) {
                    available = false;
                }
                if (!available && servers.equals("testcontainers")) {
                    available = null;
                    throw new IllegalStateException(
                            SERVERS_ENV + "=testcontainers, but no Docker engine answers Testcontainers");
                }
                log.info(
                        "Docker engine for Testcontainers: {}",
                        available ? "available" : "not available, using embedded servers");
            }
            return available;
        }

        private Docker() {}
    }
}
