package dev.fencedjobs.lease;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Objects;
import java.util.Optional;
import java.util.function.Function;
import org.jooq.SQLDialect;
import org.jooq.conf.Settings;
import org.jooq.exception.DataAccessException;
import org.jooq.impl.DSL;

/**
 * A replica's own session for one role's lease: a connection outside the pool on which it acquires,
 * renews and releases the lease, and on which, while it holds the lease with token T, it also holds
 * the session-level advisory lock {@code (}{@link Lease#signOfLifeKey}{@code , T)}: its sign of life.
 *
 * <p>PostgreSQL releases that lock the moment the session ends: when the holder's process dies (the
 * kernel resets its connections), when the session is terminated, or when this connection alone is
 * cut. A follower waiting for the lock ({@link HolderWatch}) then knows the holder's session is gone
 * and takes over at once instead of at expiry. A holder that is only slow, paused or partitioned
 * keeps its session and its lock, and the lease decides as before. The lock authorises nothing:
 * every protected write still passes the lease guard.
 *
 * <p>The lock is taken by the statement that grants a new token, in its {@code RETURNING} list, so
 * before that statement commits: no session reads the new token while its sign of life is not yet
 * held. The previous token's lock (after a database failover moved the token on) is given up right
 * after. A broken connection is dropped, and with it the lock; the next call opens a new one. Not
 * for concurrent use beyond its own lock: one thread, the lease thread, drives it.
 */
public final class LeaseSession implements LeaseOps, AutoCloseable {

    /** Where the session's connection comes from. */
    public interface Connections {
        Connection open() throws SQLException;
    }

    /** The sign of life of the token just granted is held by another session: a follower is taking over. */
    public static final class SignOfLifeTaken extends RuntimeException {
        SignOfLifeTaken(FencingToken token) {
            super("the sign-of-life lock of token " + token
                    + " is held by another session, a follower that is taking over");
        }
    }

    private final Lease lease;
    private final Connections connections;
    private final int key;
    private Connection connection;
    private Lease onSession;
    /** The token whose sign of life this session holds; null when none. */
    private FencingToken held;

    public LeaseSession(Lease lease, Connections connections) {
        this.lease = Objects.requireNonNull(lease, "lease");
        this.connections = Objects.requireNonNull(connections, "connections");
        this.key = Lease.signOfLifeKey(lease.role());
    }

    /** {@link Lease#acquireOrRenew()} on this session, holding the granted token's sign of life. */
    @Override
    public synchronized Optional<Grant> acquireOrRenew() {
        FencingToken before = held;
        Optional<Lease.SignedGrant> signed = granting(l -> l.acquireOrRenewSigned(before));
        if (signed.isEmpty()) {
            giveUpSignOfLife();
            return Optional.empty();
        }
        return Optional.of(holding(signed.get()));
    }

    /** {@link Lease#takeOver(FencingToken)} on this session, holding the new token's sign of life. */
    @Override
    public synchronized Optional<Grant> takeOver(FencingToken token) {
        FencingToken before = held;
        return granting(l -> l.takeOverSigned(token, before)).map(this::holding);
    }

    /**
     * A statement that may grant a token and take its sign of life. One that fails after its
     * {@code RETURNING} took the lock (an error in a trigger at the statement's end, a statement
     * timeout, a failed commit) rolls back the grant but not the session-level lock: left held, it
     * would show a sign of life for a token no one holds, and keep the replica granted that token
     * later from taking it. So after a failure every sign-of-life lock of the role this session
     * holds, except the one of {@code held}, is let go, or the session dropped.
     */
    private Optional<Lease.SignedGrant> granting(Function<Lease, Optional<Lease.SignedGrant>> statement) {
        try {
            return run(statement);
        } catch (RuntimeException e) {
            if (connection != null) {
                try {
                    releaseStrayLocks();
                } catch (SQLException | RuntimeException cleanup) {
                    e.addSuppressed(cleanup);
                    drop();
                }
            }
            throw e;
        }
    }

    private void releaseStrayLocks() throws SQLException {
        try (PreparedStatement s = connection.prepareStatement(
                "SELECT count(pg_advisory_unlock(?, l.objid::bigint::bit(32)::int)) FROM pg_locks l"
                        + " WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 2"
                        + " AND l.classid = ?::oid AND l.objid::bigint <> ?")) {
            s.setInt(1, key);
            s.setLong(2, Integer.toUnsignedLong(key));
            s.setLong(3, held == null ? -1 : held.value() & 0xFFFF_FFFFL);
            s.execute();
        }
    }

    /**
     * {@link Lease#release(FencingToken)} on this session. The sign of life stays until {@link #close()}, a
     * moment later: followers take over on the release's notification, and a wait that ended at the
     * same moment would only compete with it.
     */
    @Override
    public synchronized boolean release(FencingToken token) {
        return run(l -> l.release(token));
    }

    /** {@link Lease#holder()}, read on this session. */
    @Override
    public synchronized Optional<Lease.Holder> holder() {
        return run(Lease::holder);
    }

    /** The token whose sign of life this session holds, if any. */
    public synchronized Optional<FencingToken> signOfLife() {
        return Optional.ofNullable(held);
    }

    /** The statement took the grant's sign of life (or found it held here already); the previous token's is let go. */
    private Grant holding(Lease.SignedGrant signed) {
        FencingToken token = signed.grant().token();
        if (!signed.signOfLife()) {
            throw new SignOfLifeTaken(token);
        }
        if (!token.equals(held)) {
            FencingToken previous = held;
            held = token;
            if (previous != null) {
                unlock(previous);
            }
        }
        return signed.grant();
    }

    private void giveUpSignOfLife() {
        if (held == null) {
            return;
        }
        FencingToken token = held;
        held = null;
        unlock(token);
    }

    /** Lets {@code token}'s sign of life go, over plain JDBC: it runs between an acquisition and the grant's use. */
    private void unlock(FencingToken token) {
        run(l -> unlockStatement(token));
    }

    private boolean unlockStatement(FencingToken token) {
        try (PreparedStatement s = connection.prepareStatement("SELECT pg_advisory_unlock(?, ?)")) {
            s.setInt(1, key);
            s.setInt(2, token.lockKey());
            try (ResultSet r = s.executeQuery()) {
                return r.next() && r.getBoolean(1);
            }
        } catch (SQLException e) {
            throw new DataAccessException("lease session: " + e.getMessage(), e);
        }
    }

    private <T> T run(Function<Lease, T> statement) {
        try {
            if (connection == null) {
                connection = connections.open();
                connection.setAutoCommit(true);
                onSession =
                        lease.on(DSL.using(connection, SQLDialect.POSTGRES, new Settings().withExecuteLogging(false)));
            }
            return statement.apply(onSession);
        } catch (SQLException e) {
            drop();
            throw new DataAccessException("lease session: " + e.getMessage(), e);
        } catch (RuntimeException e) {
            if (broken(e)) {
                drop();
            }
            throw e;
        }
    }

    /** A lost or terminated connection: SQLSTATE class 08 (connection) or 57P (operator intervention), or closed. */
    private boolean broken(RuntimeException e) {
        String state = e instanceof DataAccessException d ? d.sqlState() : null;
        try {
            return connection == null
                    || connection.isClosed()
                    || (state != null && (state.startsWith("08") || state.startsWith("57P")));
        } catch (SQLException closedCheck) {
            return true;
        }
    }

    private void drop() {
        held = null;
        onSession = null;
        Connection c = connection;
        connection = null;
        if (c != null) {
            try {
                c.close();
            } catch (SQLException ignored) {
                // Gone already.
            }
        }
    }

    /**
     * Lets the sign of life go and closes the connection: a session of its own ends, and one lent by
     * an application's pool goes back to it holding no lock of ours.
     */
    @Override
    public synchronized void close() {
        if (connection != null && held != null) {
            try {
                giveUpSignOfLife();
            } catch (RuntimeException e) {
                // A broken connection holds nothing any more.
            }
        }
        drop();
    }
}
