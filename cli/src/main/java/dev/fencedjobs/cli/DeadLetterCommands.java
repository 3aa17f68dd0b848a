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
import java.util.Map;

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

    /** {@code sub} with the ids and the options given; the command line is parsed in {@link Cli}. */
    int run(String sub, List<String> arguments, Map<String, String> options) throws SQLException {
        List<Long> ids = new ArrayList<>();
        for (String argument : arguments) {
            try {
                ids.add(Long.parseLong(argument));
            } catch (NumberFormatException e) {
                throw new Cli.UsageException("dead-letters " + sub + ": '" + argument + "' is not a dead letter id");
            }
        }
        return switch (sub) {
            case "list" -> list(options);
            case "show" -> {
                if (ids.size() != 1) {
                    throw new Cli.UsageException("dead-letters show: name one dead letter id");
                }
                yield show(ids.get(0));
            }
            default -> mark(sub, ids, options);
        };
    }

    /** The WHERE clause and its values for the filters given. */
    private record Filter(String sql, List<Object> values) {

        static Filter of(String command, List<Long> ids, Map<String, String> options) {
            StringBuilder sql = new StringBuilder("TRUE");
            List<Object> values = new ArrayList<>();
            if (!ids.isEmpty()) {
                sql.append(" AND id = ANY (?)");
                values.add(ids.toArray(new Long[0]));
            }
            if (options.containsKey("reason")) {
                sql.append(" AND reason ILIKE ('%' || ? || '%')");
                values.add(options.get("reason"));
            }
            if (options.containsKey("resource")) {
                sql.append(" AND record_key = ?");
                values.add(options.get("resource"));
            }
            if (options.containsKey("job")) {
                sql.append(" AND job_id = ?");
                values.add(number(command, "job", options.get("job")));
            }
            if (options.containsKey("status")) {
                String status = options.get("status");
                if (!List.of("dead", "replay_requested", "replayed", "discarded").contains(status)) {
                    throw new Cli.UsageException(command + ": --status is dead, replay_requested, replayed or discarded, not " + status);
                }
                sql.append(" AND status = ?");
                values.add(status);
            }
            for (String bound : List.of("since", "until")) {
                if (options.containsKey(bound)) {
                    // A time, or how long ago: --since 2h (or -2h) is two hours before the database's now.
                    String raw = options.get(bound);
                    Cli.DueTime t = Cli.DueTime.parse(command + " --" + bound, Character.isDigit(raw.charAt(0)) && !raw.contains("T")
                            || raw.startsWith("-") ? "+" + raw.replaceFirst("^-", "") : raw);
                    sql.append(" AND dead_lettered_at ").append(bound.equals("since") ? ">=" : "<").append(' ')
                            .append(t.absolute() != null ? "?::timestamptz" : "clock_timestamp() - ? * interval '1 millisecond'");
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

    private static long number(String command, String option, String value) {
        try {
            return Long.parseLong(value);
        } catch (NumberFormatException e) {
            throw new Cli.UsageException(command + ": --" + option + " must be a whole number, got " + value);
        }
    }

    private int list(Map<String, String> options) throws SQLException {
        Filter f = Filter.of("dead-letters list", List.of(), options);
        long limit = options.containsKey("limit") ? number("dead-letters list", "limit", options.get("limit")) : 100;
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement("SELECT id, status, dead_lettered_at, topic, kafka_partition, kafka_offset, job_id, record_key, "
                        + "left(reason, 120), status_by, count(*) OVER () FROM consumer_dead_letter WHERE " + f.sql() + " ORDER BY id LIMIT ?")) {
            int n = f.bind(ps, 1);
            ps.setLong(n, limit);
            try (ResultSet rs = ps.executeQuery()) {
                long total = 0;
                int shown = 0;
                while (rs.next()) {
                    total = rs.getLong(11);
                    shown++;
                    out.printf("%-6d %-16s %s  %s-%d@%d  job %s  resource %s  %s%s%n", rs.getLong(1), rs.getString(2),
                            rs.getObject(3, OffsetDateTime.class), rs.getString(4), rs.getInt(5), rs.getLong(6),
                            rs.getObject(7) == null ? "-" : rs.getLong(7), rs.getString(8), rs.getString(9),
                            rs.getString(10) == null ? "" : "  (by " + rs.getString(10) + ")");
                }
                out.println(shown == 0 ? "No dead letters" + (f.narrows() ? " match." : ".")
                        : shown + " of " + total + " dead letter(s)" + (shown < total ? "; --limit shows more" : ""));
            }
        }
        return 0;
    }

    private int show(long id) throws SQLException {
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement("SELECT id, status, dead_lettered_at, topic, kafka_partition, kafka_offset, job_id, record_key, "
                        + "reason, status_by, status_at, replay_outcome, record_value FROM consumer_dead_letter WHERE id = ?")) {
            ps.setLong(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new Cli.UsageException("dead-letters show: no dead letter " + id);
                }
                out.println("Dead letter " + rs.getLong(1) + ": " + rs.getString(2)
                        + (rs.getString(10) == null ? "" : " (by " + rs.getString(10) + " at " + rs.getObject(11, OffsetDateTime.class) + ")"));
                out.println("  dead-lettered " + rs.getObject(3, OffsetDateTime.class) + " from " + rs.getString(4) + "-" + rs.getInt(5) + "@"
                        + rs.getLong(6));
                out.println("  job " + (rs.getObject(7) == null ? "(not readable)" : rs.getLong(7)) + ", key (resource) " + rs.getString(8));
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
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(value)).toString();
        } catch (CharacterCodingException e) {
            return "(" + value.length + " bytes, not UTF-8) " + HexFormat.of().formatHex(value);
        }
    }

    private int mark(String sub, List<Long> ids, Map<String, String> options) throws SQLException {
        String command = "dead-letters " + sub;
        Filter f = Filter.of(command, ids, options);
        if (!f.narrows() && !options.containsKey("all")) {
            throw new Cli.UsageException(command + ": name dead letter ids or filters (--reason, --resource, --job, --since, --until), or say --all");
        }
        String by = options.getOrDefault("by", System.getProperty("user.name", "unknown"));
        String to = sub.equals("replay") ? "replay_requested" : "discarded";
        // Only letters not yet acted on: a replayed or discarded one stays as it is.
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement("UPDATE consumer_dead_letter SET status = ?, status_by = ? || ' as ' || session_user, "
                        + "status_at = clock_timestamp(), replay_outcome = NULL WHERE status = 'dead' AND " + f.sql() + " RETURNING id")) {
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
                out.println("No dead letter matched that is still dead (replayed, discarded and requested ones are left as they are).");
                return 1;
            }
            out.println((sub.equals("replay") ? "Asked a consumer to replay " : "Discarded ") + marked.size() + " dead letter(s): "
                    + (marked.size() > 20 ? marked.subList(0, 20) + " …" : marked)
                    + (sub.equals("replay") ? "; a running consumer replays them within " + 2 * FencedConsumer.REPLAY_POLL.toSeconds()
                            + " s and records each outcome (dead-letters show <id>)" : ""));
        }
        return 0;
    }
}
