package dev.fencedjobs.lease;

import dev.fencedjobs.db.internal.Database;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.Objects;
import org.jooq.exception.DataAccessException;

/**
 * A follower's wait for the end of the holder's session, on a connection of its own: a blocking
 * {@code pg_advisory_lock} on the holder token's sign-of-life lock ({@link LeaseSession}). Waiting
 * sends nothing; PostgreSQL grants the lock the moment the holder's session ends.
 *
 * <p>A grant proves the holder's session gone only if the lock was seen held before the wait began
 * ({@link Lease.Holder#signOfLife()}): a lock nobody held (a holder that has not taken it yet, has
 * the fast path turned off or runs an older version, or just reconnected after a database restart)
 * is granted at once and proves nothing. The caller checks that first.
 *
 * <p>Each wait lasts at most {@code upTo}, bounded by the server's {@code lock_timeout} set for that
 * one statement: a running statement holds back vacuum's horizon, so no wait is left open for
 * longer than a second ({@link Leadership#WATCH_WAIT}). The session's {@code statement_timeout} is 0
 * (restored on close).
 */
public final class HolderWatch implements SessionWatch {

    private static final String WAIT =
            "WITH t AS MATERIALIZED (SELECT set_config('lock_timeout', ?, true)) SELECT pg_advisory_lock(?, ?) FROM t";

    private final int key;
    private final LeaseSession.Connections connections;
    private final Object lock = new Object();
    private Connection connection;
    private String statementTimeoutBefore;
    private boolean waiting;
    /** An {@link #interrupt()} that came while no wait was in progress: the next wait ends at once. */
    private boolean interruptPending;

    private boolean closed;

    public HolderWatch(String role, LeaseSession.Connections connections) {
        this.key = Lease.signOfLifeKey(role);
        this.connections = Objects.requireNonNull(connections, "connections");
    }

    /**
     * Waits up to {@code upTo} for this session to get token {@code token}'s sign-of-life lock.
     * True: it has it, so every session that held it has let it go (the caller {@link #unlock}s it
     * once done). False: the wait ran out. Throws when the connection failed or was
     * {@link #interrupt()}ed.
     */
    @Override
    public boolean await(FencingToken token, Duration upTo) {
        Connection c;
        synchronized (lock) {
            if (closed) {
                throw new IllegalStateException("holder watch closed");
            }
            if (interruptPending) {
                interruptPending = false;
                return false;
            }
            c = connection();
            waiting = true;
        }
        try (PreparedStatement s = c.prepareStatement(WAIT)) {
            s.setString(1, Math.max(1, upTo.toMillis()) + "ms");
            s.setInt(2, key);
            s.setInt(3, token.lockKey());
            c.setNetworkTimeout(Runnable::run, (int)
                    Math.min(Integer.MAX_VALUE, Database.networkTimeout(upTo).toMillis()));
            s.execute();
            return true;
        } catch (SQLException e) {
            if ("55P03".equals(e.getSQLState())) {
                return false; // lock_timeout: the holder's session is still there
            }
            drop(c);
            throw new DataAccessException("holder watch: " + e.getMessage(), e);
        } finally {
            synchronized (lock) {
                waiting = false;
            }
        }
    }

    /** Lets go of a lock {@link #await} got. */
    @Override
    public void unlock(FencingToken token) {
        synchronized (lock) {
            if (connection == null) {
                return;
            }
            try (Statement s = connection.createStatement()) {
                s.execute("SELECT pg_advisory_unlock(" + key + ", " + token.lockKey() + ")");
            } catch (SQLException e) {
                drop(connection);
            }
        }
    }

    /**
     * Ends a wait now, from another thread (the token moved on, or this replica leads): closes the
     * connection under it. Its server session ends at its own lock timeout; the next wait opens a
     * new connection. With no wait in progress, the next one ends at once instead, so a wait about
     * to begin for a token that moved on is not left to run its course.
     */
    @Override
    public void interrupt() {
        Connection c;
        synchronized (lock) {
            if (!waiting) {
                interruptPending = true;
                return;
            }
            c = connection;
            connection = null;
        }
        if (c != null) {
            try {
                c.abort(Runnable::run);
            } catch (SQLException ignored) {
                // Closing anyway.
            }
        }
    }

    private Connection connection() {
        if (connection == null) {
            try {
                Connection c = connections.open();
                try {
                    c.setAutoCommit(true);
                    try (Statement s = c.createStatement()) {
                        try (ResultSet rs = s.executeQuery("SHOW statement_timeout")) {
                            rs.next();
                            statementTimeoutBefore = rs.getString(1);
                        }
                        s.execute("SET statement_timeout = 0");
                    }
                } catch (SQLException e) {
                    c.close();
                    throw e;
                }
                connection = c;
            } catch (SQLException e) {
                throw new DataAccessException("holder watch: " + e.getMessage(), e);
            }
        }
        return connection;
    }

    private void drop(Connection c) {
        synchronized (lock) {
            if (connection == c) {
                connection = null;
            }
        }
        try {
            c.close();
        } catch (SQLException ignored) {
            // Gone already.
        }
    }

    /**
     * Closes the connection, restoring its statement timeout first (it may be an application's);
     * a wait in progress is cut instead, with the connection under it.
     */
    @Override
    public void close() {
        Connection c;
        boolean busy;
        synchronized (lock) {
            closed = true;
            c = connection;
            connection = null;
            busy = waiting;
        }
        if (c == null) {
            return;
        }
        if (busy) {
            try {
                c.abort(Runnable::run);
            } catch (SQLException ignored) {
                // Closing anyway.
            }
            return;
        }
        try {
            if (!c.isClosed() && statementTimeoutBefore != null) {
                try (PreparedStatement s = c.prepareStatement("SELECT set_config('statement_timeout', ?, false)")) {
                    s.setString(1, statementTimeoutBefore);
                    s.execute();
                }
            }
        } catch (SQLException ignored) {
            // A broken connection: the pool drops it.
        } finally {
            try {
                c.close();
            } catch (SQLException ignored) {
                // Gone already.
            }
        }
    }
}
