package dev.fencedjobs.cli;

import dev.fencedjobs.consumer.FencedConsumer;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.TypeConversionException;

/**
 * {@code fenced-jobs dead-letters list|show|replay|discard}: the consumer's dead letters, in the
 * consumer's database. {@code replay} only asks: a running consumer replays each letter through
 * the same dedup and fence path as a fresh record within a few seconds, and records the outcome on
 * it. Nothing here deletes a letter; each one acted on is marked with who and when.
 */
final class DeadLetterCommands {

    private final ScheduleCommands.Connector db;
    private final PrintStream out;

    DeadLetterCommands(ScheduleCommands.Connector db, PrintStream out) {
        this.db = db;
        this.out = out;
    }

    @Command(
            name = "dead-letters",
            customSynopsis = "dead-letters (list | show | replay | discard) ...",
            description = {
                "The consumer's dead letters.",
                "replay asks a running consumer to process each again through the same dedup and fence path as a fresh record (never applied "
                        + "twice); discard marks it handled. Both record who and when, act only on letters still dead, and delete nothing."
            })
    static final class Group {}

    /** The commands, under {@code dead-letters}. */
    CommandLine commands() {
        return new CommandLine(new Group())
                .addSubcommand(new ListLetters())
                .addSubcommand(new Show())
                .addSubcommand(markSpec(new Mark("replay")))
                .addSubcommand(markSpec(new Mark("discard")));
    }

    /** A letter's status. */
    enum Status {
        dead,
        replay_requested,
        replayed,
        discarded
    }

    /** The filters that select letters; each given one narrows the selection. */
    static final class Filters {
        @Option(names = "--reason", paramLabel = "<text>", description = "part of the reason")
        String reason;

        @Option(names = "--resource", paramLabel = "<r>", description = "the record's resource")
        String resource;

        @Option(names = "--job", paramLabel = "<id>", description = "the job id")
        Long job;

        @Option(
                names = "--status",
                paramLabel = "<status>",
                description = "dead, replay_requested, replayed or discarded")
        Status status;

        @Option(
                names = "--since",
                paramLabel = "<time>",
                converter = Moment.class,
                description = "dead-lettered at or after: an ISO-8601 time or how long ago (2h)")
        DueTime since;

        @Option(
                names = "--until",
                paramLabel = "<time>",
                converter = Moment.class,
                description = "dead-lettered before it")
        DueTime until;
    }

    /**
     * A time, or how long ago: {@code 2h} (or {@code -2h}) is two hours before the database's now,
     * held as an offset that the filter subtracts.
     */
    static final class Moment implements ITypeConverter<DueTime> {
        @Override
        public DueTime convert(String raw) {
            boolean ago =
                    !raw.isEmpty() && ((Character.isDigit(raw.charAt(0)) && !raw.contains("T")) || raw.startsWith("-"));
            return DueTime.parse(ago ? "+" + raw.replaceFirst("^-", "") : raw);
        }
    }

    /** A dead letter's id. */
    static final class LetterId implements ITypeConverter<Long> {
        @Override
        public Long convert(String raw) {
            try {
                return Long.parseLong(raw);
            } catch (NumberFormatException e) {
                throw new TypeConversionException("'" + raw + "' is not a dead letter id");
            }
        }
    }

    @Command(
            name = "list",
            customSynopsis = "dead-letters list [filters] [--limit <n>]",
            description = "The dead letters the filters select, newest first.")
    final class ListLetters implements Cli.Action {
        @Mixin
        Filters filters;

        @Option(names = "--limit", paramLabel = "<n>", description = "at most this many (default 100)")
        long limit = 100;

        @Override
        public int run() throws SQLException {
            return list(Filter.of(List.of(), filters), limit);
        }
    }

    @Command(
            name = "show",
            customSynopsis = "dead-letters show <id>",
            description = "One dead letter: its reason, its record's headers and bytes.")
    final class Show implements Cli.Action {
        @Parameters(paramLabel = "<id>", converter = LetterId.class, description = "a dead letter id")
        long id;

        @Override
        public int run() throws SQLException {
            return show(id);
        }
    }

    /** {@code replay} or {@code discard}. */
    @Command(customSynopsis = "")
    final class Mark implements Cli.Action {
        private final String sub;

        @Parameters(paramLabel = "<id>", arity = "0..*", converter = LetterId.class, description = "dead letter ids")
        List<Long> ids = new ArrayList<>();

        @Mixin
        Filters filters;

        @Option(names = "--all", description = "every letter still dead (instead of ids or filters)")
        boolean all;

        @Option(
                names = "--by",
                paramLabel = "<name>",
                description = "who acts, recorded with the database user (default: your login name)")
        String by = System.getProperty("user.name", "unknown");

        Mark(String sub) {
            this.sub = sub;
        }

        @Override
        public int run() throws SQLException {
            return mark(sub, Filter.of(ids, filters), all, by);
        }
    }

    /** The spec of {@code replay} or {@code discard}: one class, two names and descriptions. */
    private static CommandSpec markSpec(Mark mark) {
        CommandSpec spec = CommandSpec.forAnnotatedObject(mark).name(mark.sub);
        spec.usageMessage()
                .customSynopsis("dead-letters " + mark.sub + " (<id>... | filters | --all) [--by <name>]")
                .description(
                        mark.sub.equals("replay")
                                ? "Ask a running consumer to replay these letters."
                                : "Mark these letters handled.");
        return spec;
    }

    /** The WHERE clause and its values for the filters given. */
    private record Filter(String sql, List<Object> values) {

        static Filter of(List<Long> ids, Filters options) {
            StringBuilder sql = new StringBuilder("TRUE");
            List<Object> values = new ArrayList<>();
            if (!ids.isEmpty()) {
                sql.append(" AND id = ANY (?)");
                values.add(ids.toArray(new Long[0]));
            }
            if (options.reason != null) {
                sql.append(" AND reason ILIKE ('%' || ? || '%')");
                values.add(options.reason);
            }
            if (options.resource != null) {
                sql.append(" AND record_key = ?");
                values.add(options.resource);
            }
            if (options.job != null) {
                sql.append(" AND job_id = ?");
                values.add(options.job);
            }
            if (options.status != null) {
                sql.append(" AND status = ?");
                values.add(options.status.name());
            }
            DueTime[] bounds = {options.since, options.until};
            String[] comparisons = {">=", "<"};
            for (int i = 0; i < bounds.length; i++) {
                DueTime t = bounds[i];
                if (t != null) {
                    sql.append(" AND dead_lettered_at ")
                            .append(comparisons[i])
                            .append(' ')
                            .append(
                                    t.absolute() != null
                                            ? "?::timestamptz"
                                            : "clock_timestamp() - ? * interval '1 millisecond'");
                    values.add(t.absolute() != null ? t.absolute() : t.offset().toMillis());
                }
            }
            return new Filter(sql.toString(), values);
        }

        boolean narrows() {
            return !values.isEmpty();
        }

        int bind(PreparedStatement ps, int from) throws SQLException {
            int n = from;
            for (Object v : values) {
                if (v instanceof Long[] array) {
                    ps.setArray(n++, ps.getConnection().createArrayOf("bigint", array));
                } else {
                    ps.setObject(n++, v);
                }
            }
            return n;
        }
    }

    private int list(Filter f, long limit) throws SQLException {
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement(
                        "SELECT id, status, dead_lettered_at, topic, kafka_partition, kafka_offset, job_id, record_key, "
                                + "left(reason, 120), status_by, count(*) OVER () FROM consumer_dead_letter WHERE "
                                + f.sql() + " ORDER BY id LIMIT ?")) {
            int n = f.bind(ps, 1);
            ps.setLong(n, limit);
            try (ResultSet rs = ps.executeQuery()) {
                long total = 0;
                int shown = 0;
                while (rs.next()) {
                    total = rs.getLong(11);
                    shown++;
                    out.printf(
                            "%-6d %-16s %s  %s-%d@%d  job %s  resource %s  %s%s%n",
                            rs.getLong(1),
                            rs.getString(2),
                            rs.getObject(3, OffsetDateTime.class),
                            rs.getString(4),
                            rs.getInt(5),
                            rs.getLong(6),
                            rs.getObject(7) == null ? "-" : rs.getLong(7),
                            rs.getString(8),
                            rs.getString(9),
                            rs.getString(10) == null ? "" : "  (by " + rs.getString(10) + ")");
                }
                out.println(
                        shown == 0
                                ? "No dead letters" + (f.narrows() ? " match." : ".")
                                : shown + " of " + total + " dead letter(s)"
                                        + (shown < total ? "; --limit shows more" : ""));
            }
        }
        return 0;
    }

    private int show(long id) throws SQLException {
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement(
                        "SELECT id, status, dead_lettered_at, topic, kafka_partition, kafka_offset, job_id, record_key, "
                                + "reason, status_by, status_at, replay_outcome, record_value FROM consumer_dead_letter WHERE id = ?")) {
            ps.setLong(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new Cli.UsageException("dead-letters show: no dead letter " + id);
                }
                out.println("Dead letter " + rs.getLong(1) + ": " + rs.getString(2)
                        + (rs.getString(10) == null
                                ? ""
                                : " (by " + rs.getString(10) + " at " + rs.getObject(11, OffsetDateTime.class) + ")"));
                out.println("  dead-lettered " + rs.getObject(3, OffsetDateTime.class) + " from " + rs.getString(4)
                        + "-" + rs.getInt(5) + "@" + rs.getLong(6));
                out.println("  job " + (rs.getObject(7) == null ? "(not readable)" : rs.getLong(7))
                        + ", key (resource) " + rs.getString(8));
                out.println("  reason: " + rs.getString(9));
                if (rs.getString(12) != null) {
                    out.println("  replay: " + rs.getString(12));
                }
                byte[] value = rs.getBytes(13);
                out.println("  value: " + describe(value));
            }
        }
        return 0;
    }

    /** The record's bytes as text when they are UTF-8, else as hex. */
    static String describe(byte[] value) {
        if (value == null) {
            return "(null)";
        }
        try {
            return StandardCharsets.UTF_8
                    .newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(value))
                    .toString();
        } catch (CharacterCodingException e) {
            return "(" + value.length + " bytes, not UTF-8) " + HexFormat.of().formatHex(value);
        }
    }

    private int mark(String sub, Filter f, boolean all, String by) throws SQLException {
        String command = "dead-letters " + sub;
        if (!f.narrows() && !all) {
            throw new Cli.UsageException(
                    command
                            + ": name dead letter ids or filters (--reason, --resource, --job, --since, --until), or say --all");
        }
        String to = sub.equals("replay") ? "replay_requested" : "discarded";
        // Only letters not yet acted on: a replayed or discarded one stays as it is.
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement(
                        "UPDATE consumer_dead_letter SET status = ?, status_by = ? || ' as ' || session_user, "
                                + "status_at = clock_timestamp(), replay_outcome = NULL WHERE status = 'dead' AND "
                                + f.sql() + " RETURNING id")) {
            ps.setString(1, to);
            ps.setString(2, by);
            f.bind(ps, 3);
            List<Long> marked = new ArrayList<>();
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    marked.add(rs.getLong(1));
                }
            }
            marked.sort(null);
            if (marked.isEmpty()) {
                out.println(
                        "No dead letter matched that is still dead (replayed, discarded and requested ones are left as they are).");
                return 1;
            }
            out.println((sub.equals("replay") ? "Asked a consumer to replay " : "Discarded ") + marked.size()
                    + " dead letter(s): "
                    + (marked.size() > 20 ? marked.subList(0, 20) + " …" : marked)
                    + (sub.equals("replay")
                            ? "; a running consumer replays them within " + 2 * FencedConsumer.REPLAY_POLL.toSeconds()
                                    + " s and records each outcome (dead-letters show <id>)"
                            : ""));
        }
        return 0;
    }
}
