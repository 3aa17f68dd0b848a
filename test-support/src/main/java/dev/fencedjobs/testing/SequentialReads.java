package dev.fencedjobs.testing;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * How many rows of a table sequential scans have read ({@code pg_stat_user_tables.seq_tup_read}),
 * for tests that a statement reads what it needs through an index rather than the whole table. A
 * session reports its counts when it next goes idle, at most once a second; {@link #flush} makes
 * that immediate.
 */
public final class SequentialReads {

    private SequentialReads() {}

    /** Has the session of {@code c} report its counts now: read by the time another statement runs. */
    public static void flush(Connection c) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute("SELECT pg_stat_force_next_flush()");
            // Idle in between: reported by the time the next statement runs.
            s.execute("SELECT 1");
        }
    }

    /**
     * {@code table}'s rows read sequentially so far, with the counts of {@code c}'s own session
     * flushed first: for a test whose reads all ran in that one session.
     */
    public static long flushedOf(Connection c, String table) throws SQLException {
        flush(c);
        return of(c, table);
    }

    /**
     * The entries that scans of {@code table}'s indexes have returned so far ({@code
     * pg_stat_user_indexes.idx_tup_read}, index-only scans included), with the counts of {@code c}'s
     * own session flushed first: a statement that walks a whole index reads no row sequentially.
     */
    public static long indexEntriesFlushedOf(Connection c, String table) throws SQLException {
        flush(c);
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(
                        "SELECT coalesce(sum(idx_tup_read), 0) FROM pg_stat_user_indexes WHERE relname = '"
                                + table.replace("'", "''") + "'")) {
            rs.next();
            return rs.getLong(1);
        }
    }

    /** {@code table}'s rows read sequentially so far, as reported; {@link #flush} each session that read it first. */
    public static long of(Connection c, String table) throws SQLException {
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = '"
                        + table.replace("'", "''") + "'")) {
            if (!rs.next()) {
                throw new IllegalArgumentException("no table " + table);
            }
            return rs.getLong(1);
        }
    }
}
