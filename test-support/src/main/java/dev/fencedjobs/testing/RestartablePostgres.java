package dev.fencedjobs.testing;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * An embedded PostgreSQL of its own that a test can stop and start again on the same data
 * directory and port, to play a database restart. Always embedded: a restart of a server
 * from the environment or a container is not ours to make.
 */
public final class RestartablePostgres implements AutoCloseable {

    private final Path dataDirectory;
    private final int port;
    private EmbeddedPostgres server;

    public RestartablePostgres() {
        try {
            this.dataDirectory = Files.createTempDirectory("fj-restartable-pg");
            try (ServerSocket socket = new ServerSocket(0)) {
                this.port = socket.getLocalPort();
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        start();
    }

    public synchronized void start() {
        if (server != null) {
            return;
        }
        try {
            server = EmbeddedPostgres.builder()
                    .setDataDirectory(dataDirectory)
                    .setCleanDataDirectory(false)
                    .setPort(port)
                    .setServerConfig("max_connections", "200")
                    .setServerConfig("fsync", "off")
                    .start();
        } catch (IOException e) {
            throw new UncheckedIOException("could not start embedded PostgreSQL on " + dataDirectory, e);
        }
    }

    /** Stops the server (fast shutdown: open connections are cut); the data stays. */
    public synchronized void stop() {
        if (server != null) {
            TestPostgres.closeQuietly(server);
            server = null;
        }
    }

    /**
     * A stalled database: SIGSTOP to the postmaster and every process under it (each backend,
     * the checkpointer, the WAL writer). Connections stay open and nothing answers on them, as
     * with a server stuck on its disk. Closing the returned handle sends SIGCONT to them all.
     */
    public synchronized AutoCloseable pause() {
        long postmaster;
        try {
            postmaster = Long.parseLong(Files.readAllLines(dataDirectory.resolve("postmaster.pid"))
                    .get(0)
                    .trim());
        } catch (IOException e) {
            throw new UncheckedIOException("no postmaster.pid in " + dataDirectory + ": is the server running?", e);
        }
        ProcessHandle root =
                ProcessHandle.of(postmaster).orElseThrow(() -> new IllegalStateException("no process " + postmaster));
        List<Long> pids = new ArrayList<>();
        pids.add(root.pid());
        root.descendants().forEach(p -> pids.add(p.pid()));
        signal("STOP", pids);
        return () -> signal("CONT", pids);
    }

    private static void signal(String signal, List<Long> pids) {
        List<String> command = new ArrayList<>(List.of("kill", "-" + signal));
        pids.forEach(p -> command.add(Long.toString(p)));
        try {
            Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
            if (p.waitFor() != 0) {
                throw new IllegalStateException(String.join(" ", command) + " failed: "
                        + new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while signalling PostgreSQL", e);
        }
    }

    public String url() {
        return "jdbc:postgresql://localhost:" + port + "/postgres";
    }

    public String user() {
        return "postgres";
    }

    public String password() {
        return "";
    }

    @Override
    public synchronized void close() {
        stop();
        try (var files = Files.walk(dataDirectory)) {
            files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // A temp directory left behind is harmless.
        }
    }
}
