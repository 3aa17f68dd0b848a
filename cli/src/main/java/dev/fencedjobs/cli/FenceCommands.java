package dev.fencedjobs.cli;

import java.io.PrintStream;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.TypeConversionException;

/**
 * {@code fenced-jobs fence show|reset}: a way back from a poisoned fence, in the consumer's
 * database. {@code show} prints a resource's fence, the tokens its records carried, and its stale,
 * late and reset history; {@code reset} moves the fence back to a token the operator names. The
 * fence's own trigger refuses the consumer's role (and its members) and writes the audit row
 * ({@code consumer_fence_reset}: who, when, why, from what, to what), so no reset goes unrecorded.
 */
final class FenceCommands {

    private static final int RECENT = 10;

    private final ScheduleCommands.Connector db;
    private final PrintStream out;

    FenceCommands(ScheduleCommands.Connector db, PrintStream out) {
        this.db = db;
        this.out = out;
    }

    @Command(
            name = "fence",
            customSynopsis = "fence (show | reset) <resource> ...",
            description = {
                "A resource's fence in the consumer.",
                "show prints its highest token and outbox ids, the tokens its records carried, and its stale, late and reset history; reset "
                        + "moves it back, for a fence a forged or mistaken record raised. Run reset as an operator's login: the consumer's role is "
                        + "refused, and each reset is recorded in consumer_fence_reset (who, when, why, from, to)."
            })
    static final class Group {}

    /** The commands, under {@code fence}. */
    CommandLine commands() {
        return new CommandLine(new Group()).addSubcommand(new Show()).addSubcommand(new Reset());
    }

    @Command(
            name = "show",
            customSynopsis = "fence show <resource>",
            description = "The fence of <resource> and its history.")
    final class Show implements Cli.Action {
        @Parameters(paramLabel = "<resource>", description = "the resource")
        String resource;

        @Override
        public int run() throws SQLException {
            return show(resource);
        }
    }

    @Command(
            name = "reset",
            customSynopsis = "fence reset <resource> --token <n> [--outbox-id <n>] --reason <text>",
            description = {
                "Move the fence of <resource> back to --token.",
                "Records below it are stale from then on. --outbox-id (default 0: "
                        + "not known) is the highest outbox id applied with that token, for telling late records apart; effects already applied stay."
            })
    final class Reset implements Cli.Action {
        @Parameters(paramLabel = "<resource>", description = "the resource")
        String resource;

        @Option(
                names = "--token",
                required = true,
                paramLabel = "<n>",
                converter = NotNegative.class,
                description = "the highest token to keep, usually the dispatcher lease's (fenced-jobs status)")
        long token;

        @Option(
                names = "--outbox-id",
                paramLabel = "<n>",
                converter = NotNegative.class,
                description = "the highest outbox id applied with it (default 0: not known)")
        long outboxId;

        @Option(names = "--reason", required = true, paramLabel = "<text>", description = "why, for the audit record")
        String reason;

        @Override
        public int run() throws SQLException {
            if (reason.isBlank()) {
                throw new Cli.UsageException("fence reset: say why with --reason (it goes into the audit record)");
            }
            return reset(resource, token, outboxId, reason);
        }
    }

    /** A token or an outbox id: a whole number of 0 or more. */
    static final class NotNegative implements ITypeConverter<Long> {
        @Override
        public Long convert(String raw) {
            try {
                long n = Long.parseLong(raw);
                if (n >= 0) {
                    return n;
                }
            } catch (NumberFormatException e) {
                // below
            }
            throw new TypeConversionException("'" + raw + "' is not a whole number of 0 or more");
        }
    }

    private int show(String resource) throws SQLException {
        try (Connection c = db.connect()) {
            if (!printFence(c, resource)) {
                out.println("Resource " + resource + " has no fence: the consumer has accepted no record of it.");
                return 1;
            }
            rows(
                    c,
                    "Tokens its records carried (decided by the consumer, within PROCESSED_RETENTION):",
                    "SELECT fencing_token, outcome, count(*), min(processed_at), max(processed_at) FROM consumer_processed WHERE resource = ?"
                            + " GROUP BY fencing_token, outcome ORDER BY fencing_token DESC, outcome",
                    r -> String.format(
                            "token %d: %d %s, %s to %s",
                            r.getLong(1), r.getLong(3), r.getString(2), r.getObject(4), r.getObject(5)),
                    resource);
            rows(
                    c,
                    "Rejected as stale (newest first):",
                    "SELECT job_id, fencing_token, highest_token, topic, kafka_partition, kafka_offset, rejected_at FROM consumer_rejected"
                            + " WHERE resource = ? ORDER BY id DESC LIMIT " + RECENT,
                    r -> String.format(
                            "job %d, token %d below %d, %s-%d@%d, at %s",
                            r.getLong(1),
                            r.getLong(2),
                            r.getLong(3),
                            r.getString(4),
                            r.getInt(5),
                            r.getLong(6),
                            r.getObject(7)),
                    resource);
            rows(
                    c,
                    "Applied late (newest first):",
                    "SELECT job_id, outbox_id, fencing_token, highest_outbox_id, highest_token, seen_at FROM consumer_late"
                            + " WHERE resource = ? ORDER BY id DESC LIMIT " + RECENT,
                    r -> String.format(
                            "job %d, outbox id %d (token %d) below %d (token %d), at %s",
                            r.getLong(1), r.getLong(2), r.getLong(3), r.getLong(4), r.getLong(5), r.getObject(6)),
                    resource);
            rows(
                    c,
                    "Resets (newest first):",
                    "SELECT id, reset_by, reset_at, from_highest_token, from_highest_outbox_id, to_highest_token, to_highest_outbox_id, reason"
                            + " FROM consumer_fence_reset WHERE resource = ? ORDER BY id DESC LIMIT " + RECENT,
                    r -> String.format(
                            "#%d by %s at %s: token %d (outbox id %d) to %d (outbox id %d): %s",
                            r.getLong(1),
                            r.getString(2),
                            r.getObject(3),
                            r.getLong(4),
                            r.getLong(5),
                            r.getLong(6),
                            r.getLong(7),
                            r.getString(8)),
                    resource);
        }
        return 0;
    }

    private boolean printFence(Connection c, String resource) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT highest_token, token_first_outbox_id, highest_outbox_id, highest_token_holder,"
                        + " highest_token_acquired_at, updated_at FROM consumer_resource_fence WHERE resource = ?")) {
            ps.setString(1, resource);
            try (ResultSet r = ps.executeQuery()) {
                if (!r.next()) {
                    return false;
                }
                out.printf(
                        "Fence of %s: highest token %d (%s), first outbox id with it %s, highest outbox id %s, updated at %s%n",
                        resource,
                        r.getLong(1),
                        r.getString(4) == null
                                ? "tenure not known"
                                : "held by " + r.getString(4) + " since " + r.getObject(5),
                        known(r.getLong(2)),
                        known(r.getLong(3)),
                        r.getObject(6));
                return true;
            }
        }
    }

    private static String known(long outboxId) {
        return outboxId == 0 ? "not known" : Long.toString(outboxId);
    }

    private interface Row {
        String format(ResultSet r) throws SQLException;
    }

    private void rows(Connection c, String heading, String sql, Row row, String resource) throws SQLException {
        out.println(heading);
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            ps.setString(1, resource);
            try (ResultSet r = ps.executeQuery()) {
                boolean any = false;
                while (r.next()) {
                    out.println("  " + row.format(r));
                    any = true;
                }
                if (!any) {
                    out.println("  none");
                }
            }
        }
    }

    private int reset(String resource, long token, long outboxId, String reason) throws SQLException {
        try (Connection c = db.connect()) {
            c.setAutoCommit(false);
            try {
                long highest;
                long highestOutbox;
                try (PreparedStatement ps = c.prepareStatement(
                        "SELECT highest_token, highest_outbox_id FROM consumer_resource_fence WHERE resource = ? FOR UPDATE")) {
                    ps.setString(1, resource);
                    try (ResultSet r = ps.executeQuery()) {
                        if (!r.next()) {
                            throw new Cli.UsageException("fence reset: resource " + resource + " has no fence");
                        }
                        highest = r.getLong(1);
                        highestOutbox = r.getLong(2);
                    }
                }
                if (token > highest || (token == highest && outboxId >= highestOutbox)) {
                    throw new Cli.UsageException(
                            "fence reset: moves a fence back; token " + token + " (outbox id " + outboxId
                                    + ") is not below " + resource + "'s token " + highest + " (outbox id "
                                    + highestOutbox + "), which the consumer "
                                    + "raises by itself");
                }
                try (PreparedStatement ps =
                        c.prepareStatement("SELECT set_config('fencedjobs.fence_reset_reason', ?, true)")) {
                    ps.setString(1, reason);
                    ps.execute();
                }
                try (PreparedStatement ps = c.prepareStatement(
                        "UPDATE consumer_resource_fence SET highest_token = ?, token_first_outbox_id = 0,"
                                + " highest_outbox_id = ?, highest_token_holder = NULL, highest_token_acquired_at = NULL, updated_at = clock_timestamp()"
                                + " WHERE resource = ?")) {
                    ps.setLong(1, token);
                    ps.setLong(2, outboxId);
                    ps.setString(3, resource);
                    ps.executeUpdate();
                }
                long audit;
                try (PreparedStatement ps =
                        c.prepareStatement("SELECT max(id) FROM consumer_fence_reset WHERE resource = ?")) {
                    ps.setString(1, resource);
                    try (ResultSet r = ps.executeQuery()) {
                        r.next();
                        audit = r.getLong(1);
                    }
                }
                c.commit();
                out.printf(
                        "Reset the fence of %s from token %d (outbox id %d) to token %d (outbox id %s); audit record #%d "
                                + "in consumer_fence_reset.%n",
                        resource, highest, highestOutbox, token, known(outboxId), audit);
                out.println("A record of " + resource + " with a token below " + token
                        + " is stale from now on; effects already applied stay.");
                return 0;
            } catch (SQLException | RuntimeException e) {
                c.rollback();
                throw e;
            }
        }
    }
}
