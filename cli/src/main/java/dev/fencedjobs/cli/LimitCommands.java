package dev.fencedjobs.cli;

import dev.fencedjobs.db.internal.DispatchOverview;
import java.io.PrintStream;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/**
 * {@code fenced-jobs limit set|remove|list}: rate limits per dispatch key ({@code dispatch_limits},
 * migration V11, docs/dispatch.md), as an operator declares them in SQL. The dispatcher leader
 * spends their tokens; a change applies from its next batch.
 */
final class LimitCommands {

    private final ScheduleCommands.Connector db;
    private final PrintStream out;

    LimitCommands(ScheduleCommands.Connector db, PrintStream out) {
        this.db = db;
        this.out = out;
    }

    @Command(
            name = "limit",
            customSynopsis = "limit (set | remove | list) ...",
            description = {
                "Rate limits per dispatch key.",
                "A job's key is its dispatch_key, else its resource. Jobs over their key's limit stay pending and are completed as the "
                        + "limit allows, in rank order; none is dropped."
            })
    static final class Group {}

    /** The commands, under {@code limit}. */
    CommandLine commands() {
        return new CommandLine(new Group())
                .addSubcommand(new Set())
                .addSubcommand(new Remove())
                .addSubcommand(new ListLimits());
    }

    @Command(
            name = "set",
            customSynopsis = "limit set <key> --per-second <rate> [--burst <n>]",
            description = {
                "Define or change a key's limit: at most <rate> jobs a second, in bursts of up to <n>.",
                "A new limit starts with a full burst; a changed one keeps the tokens it has, up to the new burst."
            })
    final class Set implements Cli.Action {
        @Parameters(paramLabel = "<key>", description = "the dispatch key (a job's dispatch_key, else its resource)")
        String key;

        @Option(
                names = "--per-second",
                required = true,
                paramLabel = "<rate>",
                description = "jobs a second, more than 0 (0.5: one every 2 s)")
        double perSecond;

        @Option(
                names = "--burst",
                paramLabel = "<n>",
                description = "jobs at once after a quiet spell; default: the rate rounded up, at least 1")
        Integer burst;

        @Override
        public int run() throws SQLException {
            int b = burst != null ? burst : (int) Math.max(1, Math.ceil(perSecond));
            if (!(perSecond > 0) || b < 1) {
                throw new Cli.UsageException("limit set: --per-second must be more than 0 and --burst at least 1");
            }
            try (Connection c = db.connect();
                    PreparedStatement ps = c.prepareStatement(
                            "INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES (?, ?, ?) "
                                    + "ON CONFLICT (dispatch_key) DO UPDATE SET per_second = excluded.per_second, burst = excluded.burst "
                                    + "RETURNING (xmax = 0)")) {
                ps.setString(1, key);
                ps.setDouble(2, perSecond);
                ps.setInt(3, b);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    out.println((rs.getBoolean(1) ? "Limited " : "Changed the limit of ") + key + ": at most "
                            + perSecond + " jobs a second, bursts of " + b);
                }
            }
            return 0;
        }
    }

    @Command(
            name = "remove",
            customSynopsis = "limit remove <key>",
            description = "Remove a key's limit: its jobs go at once.")
    final class Remove implements Cli.Action {
        @Parameters(paramLabel = "<key>", description = "the dispatch key")
        String key;

        @Override
        public int run() throws SQLException {
            try (Connection c = db.connect();
                    PreparedStatement ps = c.prepareStatement("DELETE FROM dispatch_limits WHERE dispatch_key = ?")) {
                ps.setString(1, key);
                if (ps.executeUpdate() == 0) {
                    throw new Cli.UsageException("limit remove: no limit for key " + key);
                }
            }
            out.println("Removed the limit of " + key + "; its jobs are no longer held back");
            return 0;
        }
    }

    @Command(
            name = "list",
            customSynopsis = "limit list",
            description = "Each limit, its tokens now, and the due jobs waiting behind it.")
    final class ListLimits implements Cli.Action {
        @Override
        public int run() throws SQLException {
            try (Connection c = db.connect();
                    PreparedStatement ps = c.prepareStatement("SELECT l.dispatch_key, l.per_second, l.burst, "
                            + "dispatch_limit_tokens(l.tokens, l.refilled_at, l.per_second, l.burst, clock_timestamp()), "
                            + "(SELECT count(*) FROM (" + DispatchOverview.dueJobsOf("l.dispatch_key") + ") d) "
                            + "FROM dispatch_limits l ORDER BY l.dispatch_key");
                    ResultSet rs = ps.executeQuery()) {
                boolean any = false;
                while (rs.next()) {
                    any = true;
                    out.printf(
                            "%-32s %10s/s  burst %-6d tokens %8.2f  due jobs waiting %,d%n",
                            rs.getString(1), rs.getDouble(2), rs.getInt(3), rs.getDouble(4), rs.getLong(5));
                }
                if (!any) {
                    out.println("No limits.");
                }
            }
            return 0;
        }
    }
}
