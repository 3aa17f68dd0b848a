package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.DatabaseConfig;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * LISTENs on some channels over a connection of its own, outside the pool, and hands each
 * notification to a callback. Waiting sends nothing to the server, so an idle listener costs no
 * statements. A lost connection is reopened with back-off; {@code onConnected} runs after every
 * (re)connect, because notifications sent while disconnected are gone and the caller must catch up.
 */
final class PgListener implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(PgListener.class);

    /** Where the listener's connection comes from. */
    public interface Connections {
        Connection open() throws SQLException;
    }

    private final Connections connections;
    private final List<String> channels;
    private final BiConsumer<String, String> onNotification;
    private final Runnable onConnected;
    private final Thread thread;
    private volatile boolean running = true;
    private volatile boolean connected;
    private volatile Connection connection;

    /** Over a connection of its own, outside any pool. */
    public PgListener(
            DatabaseConfig config,
            String name,
            List<String> channels,
            BiConsumer<String, String> onNotification,
            Runnable onConnected) {
        this(() -> open(config, channels), name, channels, onNotification, onConnected);
    }

    /** Over a connection from {@code connections} (an application's pool lent to the service: it keeps one of its connections). */
    public PgListener(
            Connections connections,
            String name,
            List<String> channels,
            BiConsumer<String, String> onNotification,
            Runnable onConnected) {
        this.connections = connections;
        this.channels = List.copyOf(channels);
        this.onNotification = onNotification;
        this.onConnected = onConnected;
        this.thread = new Thread(this::run, "listen-" + name);
        this.thread.setDaemon(true);
    }

    public void start() {
        thread.start();
    }

    public boolean connected() {
        return connected;
    }

    private void run() {
        Backoff backoff = new Backoff(Duration.ofMillis(100), Duration.ofSeconds(5));
        while (running) {
            try (Connection c = connections.open()) {
                connection = c;
                try (Statement s = c.createStatement()) {
                    for (String channel : channels) {
                        s.execute("LISTEN " + channel);
                    }
                }
                connected = true;
                backoff.reset();
                log.debug("Listening on {}", channels);
                onConnected.run();
                PGConnection pg = c.unwrap(PGConnection.class);
                while (running) {
                    // Blocks on the socket; sends nothing. The timeout only lets us notice close().
                    PGNotification[] received = pg.getNotifications(1_000);
                    if (received != null) {
                        for (PGNotification n : received) {
                            onNotification.accept(n.getName(), n.getParameter());
                        }
                    }
                    if (c.isClosed()) {
                        throw new SQLException("listen connection closed");
                    }
                }
            } catch (SQLException | RuntimeException e) {
                connected = false;
                if (!running) {
                    break;
                }
                long pause = backoff.nextNanos();
                if (backoff.failures() <= 1) {
                    log.warn("LISTEN connection lost ({}); reconnecting", Faults.describe(e));
                } else {
                    log.debug(
                            "LISTEN reconnect failed ({}); next try in {} ms",
                            Faults.describe(e),
                            TimeUnit.NANOSECONDS.toMillis(pause));
                }
                sleep(pause);
            } finally {
                connected = false;
                connection = null;
            }
        }
    }

    private static Connection open(DatabaseConfig config, List<String> channels) throws SQLException {
        Properties props = new Properties();
        props.setProperty("user", config.user());
        props.setProperty("password", config.password());
        props.setProperty("ApplicationName", "listen-" + String.join(",", channels));
        props.setProperty(
                "connectTimeout",
                String.valueOf(Math.max(1, config.connectTimeout().toSeconds())));
        props.setProperty("tcpKeepAlive", "true");
        return DriverManager.getConnection(config.url(), props);
    }

    private void sleep(long nanos) {
        try {
            TimeUnit.NANOSECONDS.sleep(nanos);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            running = false;
        }
    }

    @Override
    public void close() {
        running = false;
        Connection c = connection;
        if (c != null) {
            try {
                c.close();
            } catch (SQLException ignored) {
                // Closing anyway.
            }
        }
        try {
            thread.join(5_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
