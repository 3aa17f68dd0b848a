package dev.fencedjobs.local;

import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;

/** The numbers that show the system is exact: jobs, outbox, effects, and the tokens behind them. */
record Counts(
        long jobs,
        long completed,
        long unpublished,
        long effects,
        long distinctEffects,
        long stale,
        long deadLetters,
        String tokens) {

    static final String SQL =
            "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM jobs WHERE state = 'completed'), "
                    + "(SELECT count(*) FROM outbox_unpublished), (SELECT count(*) FROM ledger), "
                    + "(SELECT count(DISTINCT job_id) FROM ledger), (SELECT count(*) FROM consumer_rejected), "
                    + "(SELECT count(*) FROM consumer_dead_letter), "
                    + "(SELECT coalesce(string_agg(DISTINCT fencing_token::text, ',' ORDER BY fencing_token::text), '') FROM ledger)";

    static Counts read(Statement s) throws SQLException {
        try (ResultSet rs = s.executeQuery(SQL)) {
            rs.next();
            return new Counts(
                    rs.getLong(1),
                    rs.getLong(2),
                    rs.getLong(3),
                    rs.getLong(4),
                    rs.getLong(5),
                    rs.getLong(6),
                    rs.getLong(7),
                    rs.getString(8));
        }
    }

    String line() {
        return String.format(
                "jobs %d, completed %d, outbox unpublished %d, effects %d (distinct jobs %d), stale %d, dead letters %d, tokens [%s]",
                jobs, completed, unpublished, effects, distinctEffects, stale, deadLetters, tokens);
    }

    /** Every job completed, published and applied exactly once. */
    boolean exact() {
        return completed == jobs && unpublished == 0 && effects == jobs && distinctEffects == jobs;
    }
}
