package dev.fencedjobs.bench;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Locale;
import java.util.Map;
import java.util.OptionalLong;

/**
 * The PostgreSQL a benchmark runs against: {@code FJ_BENCH_POSTGRES_URL} (a superuser URL, with
 * {@code FJ_BENCH_POSTGRES_USER}/{@code FJ_BENCH_POSTGRES_PASSWORD}) or an embedded PostgreSQL 17
 * with durable settings (fsync and synchronous commit on, unlike the test servers) and
 * pg_stat_statements loaded, so statements can be counted. {@code FJ_BENCH_POSTGRES_SETTINGS}
 * ({@code name=value,name=value}) adds settings to the embedded server.
 */
final class BenchPostgres implements AutoCloseable {

    private final EmbeddedPostgres embedded;
    private final String adminUrl;
    private final String user;
    private final String password;
    private int databases;

    private BenchPostgres(EmbeddedPostgres embedded, String adminUrl, String user, String password) {
        this.embedded = embedded;
        this.adminUrl = adminUrl;
        this.user = user;
        this.password = password;
    }

    static BenchPostgres start() {
        return start(Map.of());
    }

    /**
     * With {@code settings} on the embedded server, before {@code FJ_BENCH_POSTGRES_SETTINGS}, which
     * may change them; a server given by {@code FJ_BENCH_POSTGRES_URL} keeps its own.
     */
    static BenchPostgres start(Map<String, String> settings) {
        String url = System.getenv("FJ_BENCH_POSTGRES_URL");
        if (url != null && !url.isBlank()) {
            return new BenchPostgres(
                    null, url, env("FJ_BENCH_POSTGRES_USER", "postgres"), env("FJ_BENCH_POSTGRES_PASSWORD", ""));
        }
        try {
            EmbeddedPostgres.Builder builder = EmbeddedPostgres.builder()
                    .setServerConfig("fsync", "on")
                    .setServerConfig("synchronous_commit", "on")
                    .setServerConfig("full_page_writes", "on")
                    .setServerConfig("max_connections", "100")
                    .setServerConfig("shared_buffers", "256MB")
                    .setServerConfig("shared_preload_libraries", "pg_stat_statements")
                    .setServerConfig("pg_stat_statements.track", "all");
            settings.forEach(builder::setServerConfig);
            // Printed with the results (describe()), so what ran is on record.
            for (String setting : env("FJ_BENCH_POSTGRES_SETTINGS", "").split(",")) {
                if (!setting.isBlank()) {
                    String[] kv = setting.split("=", 2);
                    builder.setServerConfig(kv[0].trim(), kv[1].trim());
                }
            }
            EmbeddedPostgres pg = builder.start();
            BenchPostgres started =
                    new BenchPostgres(pg, "jdbc:postgresql://localhost:" + pg.getPort() + "/postgres", "postgres", "");
            started.postmasterPid().ifPresent(BenchStack::ownServer);
            return started;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The server's postmaster: the parent of a backend's process (empty where it cannot be seen). */
    private OptionalLong postmasterPid() {
        try (Connection c = admin();
                Statement s = c.createStatement();
                ResultSet r = s.executeQuery("SELECT pg_backend_pid()")) {
            r.next();
            return ProcessHandle.of(r.getLong(1))
                    .flatMap(ProcessHandle::parent)
                    .map(p -> OptionalLong.of(p.pid()))
                    .orElse(OptionalLong.empty());
        } catch (SQLException e) {
            return OptionalLong.empty();
        }
    }

    private static String env(String name, String defaultValue) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? defaultValue : v;
    }

    /** A fresh database; returns its JDBC URL. */
    String freshDatabase(String hint) throws SQLException {
        String name = ("bench_" + hint + "_" + (++databases)).toLowerCase(Locale.ROOT);
        try (Connection c = admin();
                Statement s = c.createStatement()) {
            s.execute("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
            s.execute("CREATE DATABASE " + name);
        }
        return withDatabase(name);
    }

    /** Drops the database of {@code url}, its sessions ended first. */
    void dropDatabase(String url) throws SQLException {
        String name = url.substring(url.lastIndexOf('/') + 1).replaceAll("\\?.*", "");
        try (Connection c = admin();
                Statement s = c.createStatement()) {
            s.execute("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
        }
    }

    String withDatabase(String name) {
        int hostStart = adminUrl.indexOf("//") + 2;
        int slash = adminUrl.indexOf('/', hostStart);
        int query = adminUrl.indexOf('?', hostStart);
        String prefix = adminUrl.substring(0, slash < 0 ? (query < 0 ? adminUrl.length() : query) : slash);
        return prefix + "/" + name + (query < 0 ? "" : adminUrl.substring(query));
    }

    Connection admin() throws SQLException {
        return DriverManager.getConnection(adminUrl, user, password);
    }

    String user() {
        return user;
    }

    String password() {
        return password;
    }

    String describe() throws SQLException {
        try (Connection c = admin();
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT current_setting('server_version'), current_setting('fsync'), "
                        + "current_setting('synchronous_commit'), current_setting('shared_buffers'), current_setting('max_wal_size'),"
                        + " current_setting('min_wal_size'), current_setting('autovacuum_naptime')")) {
            rs.next();
            return "PostgreSQL " + rs.getString(1) + (embedded != null ? " (embedded)" : " (FJ_BENCH_POSTGRES_URL)")
                    + ", fsync=" + rs.getString(2) + ", synchronous_commit=" + rs.getString(3) + ", shared_buffers="
                    + rs.getString(4)
                    + ", max_wal_size=" + rs.getString(5) + ", min_wal_size=" + rs.getString(6)
                    + ", autovacuum_naptime="
                    + rs.getString(7);
        }
    }

    @Override
    public void close() throws IOException {
        if (embedded != null) {
            embedded.close();
        }
    }
}
