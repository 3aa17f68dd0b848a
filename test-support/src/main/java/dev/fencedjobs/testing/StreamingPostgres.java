package dev.fencedjobs.testing;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Two embedded PostgreSQL 17 servers, a primary and a streaming standby, on fixed ports, that a
 * test fails over the way an HA manager (Patroni, say) would: the primary is SIGKILLed, the standby
 * promoted, and the lost node rebuilt as the new primary's standby from a base backup taken while
 * it runs. Clients reach whichever is primary through {@link #url}, a multi-host URL with {@code
 * targetServerType=primary}.
 *
 * <p>{@link Replication#SYNCHRONOUS}: the primary waits for the standby to flush each commit
 * ({@code synchronous_commit=on}, {@code synchronous_standby_names} naming it), so a promotion
 * loses nothing that was acknowledged. Until a rebuilt standby has caught up, the new primary runs
 * without one, as Patroni's {@code synchronous_mode} does without {@code synchronous_mode_strict}.
 * {@link Replication#ASYNCHRONOUS}: commits do not wait, and a promotion loses what the standby had
 * not received; {@link #cutReplication()} stops the standby receiving, to make that window as long
 * as a test needs.
 *
 * <p>Always embedded: failing over someone else's server is not a test's to do. Base backups use
 * the low-level API ({@code pg_backup_start}/{@code pg_backup_stop}) and a file copy, because the
 * embedded binaries have no {@code pg_basebackup}.
 */
public final class StreamingPostgres implements AutoCloseable {

    /** How the primary waits for the standby. */
    public enum Replication {
        SYNCHRONOUS,
        ASYNCHRONOUS
    }

    private static final Logger log = LoggerFactory.getLogger(StreamingPostgres.class);
    private static final Set<String> NOT_COPIED = Set.of(
            "postmaster.pid",
            "postmaster.opts",
            "epg-lock",
            "standby.signal",
            "backup_label",
            "tablespace_map",
            "postgresql.auto.conf");
    private static final Set<String> COPIED_EMPTY = Set.of(
            "pg_wal",
            "pg_replslot",
            "pg_stat_tmp",
            "pg_dynshmem",
            "pg_notify",
            "pg_serial",
            "pg_snapshots",
            "pg_subtrans");

    private final Replication replication;
    private final Path root;
    private final Node[] nodes = new Node[2];
    private int primary;
    private int generation;

    /** One server: its name (also its application_name as a standby), port, data directory and process. */
    private static final class Node {
        final int index;
        final String name;
        final int port;
        Path data;
        EmbeddedPostgres server;

        Node(int index, String name, int port) {
            this.index = index;
            this.name = name;
            this.port = port;
        }
    }

    public StreamingPostgres(Replication replication) {
        this.replication = replication;
        try {
            this.root = Files.createTempDirectory("fj-streaming-pg");
            nodes[0] = new Node(0, "node_a", KafkaProcess.freePort());
            nodes[1] = new Node(1, "node_b", KafkaProcess.freePort());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        // The first standby is a copy of the primary's data directory, cleanly stopped.
        Node a = nodes[0];
        a.data = directory(a);
        start(a);
        stopCleanly(a);
        Node b = nodes[1];
        b.data = directory(b);
        copyDataDirectory(a.data, b.data, true);
        configureStandby(b, a);
        start(a);
        execute(a, "SELECT pg_create_physical_replication_slot('" + b.name + "', true)");
        start(b);
        awaitStreaming(a, b);
        primary = 0;
    }

    public Replication replication() {
        return replication;
    }

    /** A multi-host URL for {@code database} that connects to whichever server is primary. */
    public String url(String database) {
        return "jdbc:postgresql://127.0.0.1:" + nodes[0].port + ",127.0.0.1:" + nodes[1].port + "/" + database
                + "?targetServerType=primary&hostRecheckSeconds=1";
    }

    /** The URL of one server alone (0 or 1), primary or standby. */
    public String nodeUrl(int node, String database) {
        return "jdbc:postgresql://127.0.0.1:" + nodes[node].port + "/" + database;
    }

    public int port(int node) {
        return nodes[node].port;
    }

    /** Which server (0 or 1) is primary now. */
    public synchronized int primary() {
        return primary;
    }

    public String user() {
        return "postgres";
    }

    public String password() {
        return "";
    }

    /** Runs SQL as the superuser on the primary's {@code database}. */
    public void executeOnPrimary(String database, String sql) {
        try (Connection c = DriverManager.getConnection(nodeUrl(primary(), database), user(), password());
                Statement s = c.createStatement()) {
            s.execute(sql);
        } catch (SQLException e) {
            throw new IllegalStateException(sql + " on the primary failed", e);
        }
    }

    /** The standby stops receiving WAL (its primary_conninfo is emptied); what the primary commits from now on, it misses. */
    public synchronized void cutReplication() {
        Node standby = nodes[1 - primary];
        execute(standby, "ALTER SYSTEM SET primary_conninfo = ''");
        execute(standby, "SELECT pg_reload_conf()");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (queryLong(standby, "SELECT count(*) FROM pg_stat_wal_receiver") > 0) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the standby's WAL receiver did not stop");
            }
            sleep(50);
        }
        log.info("Replication to {} cut", standby.name);
    }

    /** Waits until the standby has replayed everything the primary had written when called. */
    public synchronized void awaitStandbyCaughtUp() {
        String target = queryString(nodes[primary], "SELECT pg_current_wal_lsn()::text");
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (queryLong(
                        nodes[1 - primary],
                        "SELECT CASE WHEN pg_last_wal_replay_lsn() >= '" + target + "'::pg_lsn THEN 1 ELSE 0 END")
                == 0) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the standby did not replay up to " + target + " in 60 s");
            }
            sleep(50);
        }
    }

    /**
     * Fails over: SIGKILLs the primary, promotes the standby, then rebuilds the lost server as the
     * new primary's standby (synchronous again once it streams, in {@link Replication#SYNCHRONOUS}).
     * Returns when the new standby streams.
     */
    public synchronized void failover() {
        killPrimary();
        promoteStandby();
        rebuildStandby();
    }

    /** SIGKILLs the primary: the postmaster and every process it started, at once, as a crashed machine would. */
    public synchronized void killPrimary() {
        Node p = nodes[primary];
        long pid = postmasterPid(p);
        ProcessHandle.of(pid).ifPresent(postmaster -> {
            List<ProcessHandle> all = new ArrayList<>(postmaster.descendants().toList());
            all.add(postmaster);
            all.forEach(ProcessHandle::destroyForcibly);
        });
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false) || listening(p)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(p.name + " (pid " + pid + ") survived SIGKILL");
            }
            sleep(20);
        }
        stopCleanly(
                p); // lets go of the dead server's handle and its lock on the data directory; pg_ctl finds nothing to
        // stop
        log.info("Primary {} SIGKILLed (pid {})", p.name, pid);
    }

    /** Promotes the standby, which becomes the primary on a new timeline. */
    public synchronized void promoteStandby() {
        Node s = nodes[1 - primary];
        execute(s, "SELECT pg_promote(true, 60)");
        // It commits without a standby until one is rebuilt.
        execute(s, "ALTER SYSTEM SET synchronous_standby_names = ''");
        execute(s, "SELECT pg_reload_conf()");
        primary = 1 - primary;
        log.info(
                "{} promoted: timeline {}",
                s.name,
                queryString(s, "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)"));
    }

    /** Rebuilds the server that is not primary (its old data is discarded) as a standby of the primary. */
    public synchronized void rebuildStandby() {
        Node p = nodes[primary];
        Node s = nodes[1 - primary];
        stopCleanly(s);
        deleteQuietly(s.data);
        s.data = directory(s);
        if (queryLong(p, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" + s.name + "'") == 0) {
            execute(p, "SELECT pg_create_physical_replication_slot('" + s.name + "', true)");
        }
        try (Connection c = connect(p);
                Statement st = c.createStatement()) {
            st.execute("SELECT pg_backup_start('fj-rebuild-" + s.name + "', true)");
            copyDataDirectory(p.data, s.data, false);
            try (ResultSet r = st.executeQuery("SELECT labelfile, spcmapfile FROM pg_backup_stop(false)")) {
                r.next();
                Files.writeString(s.data.resolve("backup_label"), r.getString(1));
                String map = r.getString(2);
                if (map != null && !map.isEmpty()) {
                    Files.writeString(s.data.resolve("tablespace_map"), map);
                }
            }
        } catch (SQLException | IOException e) {
            throw new IllegalStateException("base backup of " + p.name + " failed", e);
        }
        configureStandby(s, p);
        start(s);
        awaitStreaming(p, s);
        log.info("{} rebuilt as the standby of {}", s.name, p.name);
    }

    /**
     * Starts the server lost in a failover (killed, not yet rebuilt) on its own data, as the
     * primary it was, to read what it held that the promoted one never received. Two primaries then
     * answer the multi-host URL: call it only once every client is stopped.
     */
    public synchronized String startLostPrimaryAlone(String database) {
        Node lost = nodes[1 - primary];
        if (lost.server != null) {
            throw new IllegalStateException(lost.name + " is running");
        }
        start(lost);
        return nodeUrl(1 - primary, database);
    }

    /** Stops the primary (fast shutdown) and starts it again on its data; the standby reconnects. */
    public synchronized void restartPrimary(Duration down) {
        Node p = nodes[primary];
        stopCleanly(p);
        sleep(down.toMillis());
        start(p);
    }

    // ---------------------------------------------------------------- servers

    private Path directory(Node n) {
        return root.resolve(n.name + "-" + (++generation));
    }

    private void start(Node n) {
        try {
            n.server = EmbeddedPostgres.builder()
                    .setDataDirectory(n.data)
                    .setCleanDataDirectory(false)
                    .setPort(n.port)
                    .setServerConfig("max_connections", "300")
                    .setServerConfig("fsync", "off")
                    // zonky's default is off, which acknowledges commits before their WAL is written
                    // and would make a SIGKILL lose them; "on" also waits for a synchronous standby.
                    .setServerConfig("synchronous_commit", "on")
                    .setServerConfig("wal_level", "replica")
                    .setServerConfig("max_wal_senders", "5")
                    .setServerConfig("max_replication_slots", "5")
                    .setServerConfig("hot_standby", "on")
                    .setServerConfig("wal_receiver_status_interval", "1s")
                    .setServerConfig("wal_retrieve_retry_interval", "500ms")
                    .start();
        } catch (IOException e) {
            throw new UncheckedIOException("could not start " + n.name + " on " + n.data, e);
        }
    }

    private void stopCleanly(Node n) {
        if (n.server != null) {
            TestPostgres.closeQuietly(n.server);
            n.server = null;
        }
    }

    private static long postmasterPid(Node n) {
        try {
            return Long.parseLong(
                    Files.readAllLines(n.data.resolve("postmaster.pid")).get(0).strip());
        } catch (IOException e) {
            throw new UncheckedIOException("no postmaster.pid in " + n.data, e);
        }
    }

    private static boolean listening(Node n) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), n.port), 200);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** The standby's own settings: where its primary is, under which name and slot, and no standby of its own. */
    private void configureStandby(Node standby, Node of) {
        try {
            Files.writeString(standby.data.resolve("standby.signal"), "");
            Files.writeString(
                    standby.data.resolve("postgresql.auto.conf"),
                    "# written by StreamingPostgres\n"
                            + "primary_conninfo = 'host=127.0.0.1 port=" + of.port + " user=postgres application_name="
                            + standby.name + "'\n"
                            + "primary_slot_name = '" + standby.name + "'\n"
                            + "synchronous_standby_names = ''\n");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Waits until the standby streams from the primary, then makes it the synchronous one if asked. */
    private void awaitStreaming(Node p, Node s) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        String query = "SELECT count(*) FROM pg_stat_replication WHERE application_name = '" + s.name
                + "' AND state = 'streaming'";
        while (queryLong(p, query) == 0) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(s.name + " does not stream from " + p.name + " after 60 s");
            }
            sleep(100);
        }
        if (replication == Replication.SYNCHRONOUS) {
            execute(p, "ALTER SYSTEM SET synchronous_standby_names = '" + s.name + "'");
            execute(p, "SELECT pg_reload_conf()");
            String sync = "SELECT count(*) FROM pg_stat_replication WHERE application_name = '" + s.name
                    + "' AND sync_state = 'sync'";
            while (queryLong(p, sync) == 0) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(
                            s.name + " is not the synchronous standby of " + p.name + " after 60 s");
                }
                sleep(100);
            }
        }
    }

    /**
     * Copies a data directory file by file, leaving out what a base backup leaves out (the slots, the
     * lock and pid files, and the WAL unless {@code withWal}: a cleanly stopped server's copy takes
     * it, a running one's streams it from the primary). Files that vanish while a running server is
     * copied are skipped; replaying the WAL from the backup's start repairs whatever changed under it.
     */
    private static void copyDataDirectory(Path from, Path to, boolean withWal) {
        try (Stream<Path> files = Files.walk(from)) {
            for (Path source : (Iterable<Path>) files::iterator) {
                Path relative = from.relativize(source);
                Path target = to.resolve(relative.toString());
                if (relative.getNameCount() == 0) {
                    Files.createDirectories(target);
                    continue;
                }
                String top = relative.getName(0).toString();
                if (relative.getNameCount() == 1 && NOT_COPIED.contains(top)) {
                    continue;
                }
                if (COPIED_EMPTY.contains(top) && relative.getNameCount() > 1 && !(withWal && top.equals("pg_wal"))) {
                    if (top.equals("pg_wal") && relative.getNameCount() == 2 && Files.isDirectory(source)) {
                        Files.createDirectories(target); // pg_wal/archive_status and summaries
                    }
                    continue;
                }
                try {
                    if (Files.isDirectory(source)) {
                        Files.createDirectories(target);
                    } else {
                        Files.copy(source, target, StandardCopyOption.REPLACE_EXISTING);
                    }
                } catch (NoSuchFileException vanished) {
                    // Dropped by the running server meanwhile.
                }
            }
        } catch (IOException | UncheckedIOException e) {
            throw new IllegalStateException("copying " + from + " to " + to + " failed", e);
        }
        try {
            Files.setPosixFilePermissions(to, PosixFilePermissions.fromString("rwx------"));
        } catch (IOException | UnsupportedOperationException e) {
            // PostgreSQL refuses a data directory others can read; where permissions do not exist, neither does the
            // check.
        }
    }

    // ---------------------------------------------------------------- SQL

    private Connection connect(Node n) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", user());
        p.setProperty("connectTimeout", "5");
        return DriverManager.getConnection(nodeUrl(n.index, "postgres"), p);
    }

    private void execute(Node n, String sql) {
        try (Connection c = connect(n);
                Statement s = c.createStatement()) {
            s.execute(sql);
        } catch (SQLException e) {
            throw new IllegalStateException(n.name + ": " + sql + " failed", e);
        }
    }

    private long queryLong(Node n, String sql) {
        return Long.parseLong(queryString(n, sql));
    }

    private String queryString(Node n, String sql) {
        try (Connection c = connect(n);
                Statement s = c.createStatement();
                ResultSet r = s.executeQuery(sql)) {
            r.next();
            return r.getString(1);
        } catch (SQLException e) {
            throw new IllegalStateException(n.name + ": " + sql + " failed", e);
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    private static void deleteQuietly(Path dir) {
        if (dir == null || !Files.exists(dir)) {
            return;
        }
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // A temp directory left behind is harmless.
        }
    }

    @Override
    public synchronized void close() {
        for (Node n : nodes) {
            if (n != null) {
                stopCleanly(n);
            }
        }
        deleteQuietly(root);
    }
}
