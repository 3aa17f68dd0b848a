package dev.fencedjobs.cli;

import dev.fencedjobs.db.internal.DispatchOverview;
import java.io.PrintStream;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.OffsetDateTime;
import java.util.List;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/**
 * {@code fenced-jobs pause} and {@code resume}: a dispatch key's jobs, or every job, held pending
 * ({@code dispatch_pauses}, migration V15, docs/dispatch.md), as an operator writes it in SQL. Once
 * a pause has committed no job of its key completes; resumed, they go in their order.
 */
final class PauseCommands {

    /**
     * How long a pause waits for the transactions that hold {@code jobs} (a batch in flight, a
     * producer's open transaction) before it gives up, changing nothing: producers' inserts wait
     * behind it meanwhile.
     */
    static final String LOCK_TIMEOUT = "5s";

    private final ScheduleCommands.Connector db;
    private final PrintStream out;

    PauseCommands(ScheduleCommands.Connector db, PrintStream out) {
        this.db = db;
        this.out = out;
    }

    /** The commands, at the top level. */
    List<Object> commands() {
        return List.of(new Pause(), new Resume());
    }

    /** A key, or everything. */
    static final class Target {
        @Parameters(paramLabel = "<key>", description = "the dispatch key (a job's dispatch_key, else its resource)")
        String key;

        @Option(names = "--all", required = true, description = "every job, whatever its key")
        boolean all;

        String describe() {
            return all ? "everything" : key;
        }

        /** The pause's row: everything's has no key. */
        String row() {
            return all ? "dispatch_key IS NULL" : "dispatch_key = ?";
        }

        /** Binds the key of {@link #row} at {@code index}, if it has one; returns the next index. */
        int bind(PreparedStatement ps, int index) throws SQLException {
            if (all) {
                return index;
            }
            ps.setString(index, key);
            return index + 1;
        }
    }

    @Command(
            name = "pause",
            customSynopsis = "pause (<key> | --all) [--reason <text>]",
            description = {
                "Stop completing a dispatch key's jobs, or every job. They stay pending and due; nothing is dropped.",
                "Once the pause has committed no job of the key completes, by any dispatcher. The pause waits (at most "
                        + LOCK_TIMEOUT + ") for the batches in flight; producers' inserts wait for it meanwhile."
            })
    final class Pause implements Cli.Action {
        @ArgGroup(multiplicity = "1")
        Target target;

        @Option(
                names = "--reason",
                paramLabel = "<text>",
                description = "why, shown by status (at most 1,000 characters)")
        String reason;

        @Override
        public int run() throws SQLException {
            try (Connection c = db.connect()) {
                c.setAutoCommit(false);
                try (Statement s = c.createStatement()) {
                    s.execute("SET LOCAL lock_timeout = '" + LOCK_TIMEOUT + "'");
                }
                // Each unique index is inferred by its own predicate (dispatch_pauses_everything, dispatch_pauses_key).
                String insert = target.all
                        ? "INSERT INTO dispatch_pauses (dispatch_key, reason) VALUES (NULL, ?) ON CONFLICT ((true)) WHERE dispatch_key IS NULL DO NOTHING"
                        : "INSERT INTO dispatch_pauses (dispatch_key, reason) VALUES (?, ?) ON CONFLICT (dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING";
                int inserted;
                try (PreparedStatement ps = c.prepareStatement(insert)) {
                    ps.setString(target.bind(ps, 1), reason);
                    inserted = ps.executeUpdate();
                    c.commit();
                } catch (SQLException e) {
                    c.rollback();
                    if ("55P03".equals(e.getSQLState())) {
                        throw new Cli.UsageException("pause " + target.describe() + ": waited " + LOCK_TIMEOUT
                                + " for the transactions that hold the jobs table (a batch in flight, a producer's open "
                                + "transaction) and changed nothing; try again");
                    }
                    throw e;
                } finally {
                    c.setAutoCommit(true);
                }
                if (inserted == 0) {
                    Paused p = paused(c, target);
                    out.println((target.all ? "Everything" : target.key) + " was already paused, by " + p.by + " since "
                            + p.at);
                } else if (target.all) {
                    out.println("Paused everything: no job completes until `fenced-jobs resume --all`");
                } else {
                    out.printf(
                            "Paused %s: its jobs stay pending until `fenced-jobs resume %s`; %s due now%n",
                            target.key, target.key, dueWaiting(c, target.key));
                }
            }
            return 0;
        }
    }

    @Command(
            name = "resume",
            customSynopsis = "resume (<key> | --all)",
            description = "Let a paused key's jobs, or every job, go again, in their order.")
    final class Resume implements Cli.Action {
        @ArgGroup(multiplicity = "1")
        Target target;

        @Override
        public int run() throws SQLException {
            try (Connection c = db.connect();
                    PreparedStatement ps = c.prepareStatement(
                            "DELETE FROM dispatch_pauses WHERE " + target.row() + " RETURNING paused_by, paused_at")) {
                target.bind(ps, 1);
                try (ResultSet rs = ps.executeQuery()) {
                    if (!rs.next()) {
                        throw new Cli.UsageException(
                                "resume: " + (target.all ? "everything is not paused" : target.key + " is not paused"));
                    }
                    out.println("Resumed " + target.describe() + " (paused by " + rs.getString(1) + " since "
                            + rs.getObject(2, OffsetDateTime.class) + ")"
                            + (target.all ? "" : "; " + dueWaiting(c, target.key) + " due now"));
                }
            }
            return 0;
        }
    }

    private record Paused(String by, OffsetDateTime at) {}

    private static Paused paused(Connection c, Target target) throws SQLException {
        try (PreparedStatement ps =
                c.prepareStatement("SELECT paused_by, paused_at FROM dispatch_pauses WHERE " + target.row())) {
            target.bind(ps, 1);
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next()
                        ? new Paused(rs.getString(1), rs.getObject(2, OffsetDateTime.class))
                        : new Paused("(resumed meanwhile)", null);
            }
        }
    }

    /** The key's due jobs, counted up to {@link DispatchOverview#WAITING_CAP}, worded as status words them. */
    private static String dueWaiting(Connection c, String key) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("SELECT count(*) FROM (" + DispatchOverview.dueJobsOf("?")
                + " LIMIT " + DispatchOverview.WAITING_CAP + ") d")) {
            ps.setString(1, key);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return StatusReport.count(rs.getLong(1), DispatchOverview.WAITING_CAP) + " job(s)";
            }
        }
    }
}
