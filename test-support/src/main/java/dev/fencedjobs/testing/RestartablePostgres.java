package dev.fencedjobs.testing;

import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;

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
            files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // A temp directory left behind is harmless.
        }
    }
}
