package dev.fencedjobs.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.internal.Occurrences;
import java.io.IOException;
import java.io.PrintStream;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Map;

/**
 * {@code fenced-jobs schedule add|list|pause|resume|remove}: plain SQL on the {@code schedules}
 * table (migration V9), with the rule checked here first, by the same code the dispatcher uses,
 * so that a typo is refused at once instead of being found by the dispatcher later.
 */
final class ScheduleCommands {

    interface Connector {
        Connection connect() throws SQLException;
    }

    private final Connector db;
    private final PrintStream out;

    ScheduleCommands(Connector db, PrintStream out) {
        this.db = db;
        this.out = out;
    }

    /** {@code sub} with the schedule's name (none for {@code list}) and the options given; the command line is parsed in {@link Cli}. */
    int run(String sub, List<String> names, Map<String, String> options) throws SQLException {
        String name = names.isEmpty() ? null : names.get(0);
        return switch (sub) {
            case "add" -> add(name, options);
            case "list" -> list();
            case "pause" -> setPaused(name, true);
            case "resume" -> setPaused(name, false);
            default -> remove(name);
        };
    }

    private int add(String name, Map<String, String> options) throws SQLException {
        String cron = options.get("cron");
        String every = options.get("every");
        if ((cron == null) == (every == null)) {
            throw new Cli.UsageException("schedule add: give --cron or --every, one of them");
        }
        String zone = options.getOrDefault("zone", "UTC");
        if (every != null && options.containsKey("zone")) {
            throw new Cli.UsageException("schedule add: --zone applies to --cron only (an --every interval runs on absolute time)");
        }
        Duration interval = null;
        try {
            if (cron != null) {
                Occurrences.cron(cron, zone, Instant.now());
            } else {
                interval = Settings.parseDuration("--every", every);
                Occurrences.every(interval, Instant.now());
            }
        } catch (IllegalArgumentException | ConfigException e) {
            throw new Cli.UsageException("schedule add: " + e.getMessage());
        }
        String misfire = options.getOrDefault("misfire", "latest");
        if (!List.of("all", "latest", "skip").contains(misfire)) {
            throw new Cli.UsageException("schedule add: --misfire is all, latest or skip, not " + misfire);
        }
        String payload = options.getOrDefault("payload", "{}");
        try {
            new ObjectMapper().readTree(payload);
        } catch (IOException e) {
            throw new Cli.UsageException("schedule add: --payload is not valid JSON: " + payload);
        }
        Cli.DueTime starts = options.containsKey("starts") ? Cli.DueTime.parse("schedule add", options.get("starts")) : null;
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement("INSERT INTO schedules (name, cron, every, time_zone, resource, payload, misfire, starts_at) "
                        + "VALUES (?, ?, ? * interval '1 microsecond', ?, ?, ?::jsonb, ?, " + (starts == null ? "clock_timestamp()" : starts.sql()) + ") "
                        + "ON CONFLICT (name) DO NOTHING RETURNING starts_at")) {
            ps.setString(1, name);
            ps.setString(2, cron);
            ps.setObject(3, interval == null ? null : interval.toNanos() / 1000, Types.BIGINT);
            ps.setString(4, zone);
            ps.setString(5, options.getOrDefault("resource", "default"));
            ps.setString(6, payload);
            ps.setString(7, misfire);
            // Without --starts, from the database's clock, not this machine's.
            if (starts != null && starts.absolute() != null) {
                ps.setObject(8, starts.absolute());
            } else if (starts != null) {
                ps.setLong(8, starts.offset().toMillis());
            }
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new Cli.UsageException("schedule add: a schedule named " + name + " exists; remove it first, or change it with SQL");
                }
                out.println("Added schedule " + name + " (" + (cron != null ? "cron '" + cron + "' in " + zone : "every " + interval)
                        + ", misfire " + misfire + "), starting " + rs.getObject(1, OffsetDateTime.class));
            }
        }
        return 0;
    }

    private int list() throws SQLException {
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement("SELECT name, coalesce('cron ' || cron || ' ' || time_zone, 'every ' || every::text), misfire, "
                        + "paused, next_fire_at, fired, skipped, last_fired_at, error, resource FROM schedules ORDER BY name");
                ResultSet rs = ps.executeQuery()) {
            boolean any = false;
            while (rs.next()) {
                any = true;
                out.printf("%-24s %-32s misfire %-6s %-7s next %-32s fired %d, skipped %d, last %s, resource %s%s%n", rs.getString(1), rs.getString(2),
                        rs.getString(3), rs.getBoolean(4) ? "paused" : "active", rs.getObject(5, OffsetDateTime.class), rs.getLong(6), rs.getLong(7),
                        rs.getObject(8, OffsetDateTime.class), rs.getString(10), rs.getString(9) == null ? "" : "; ERROR: " + rs.getString(9));
            }
            if (!any) {
                out.println("No schedules.");
            }
        }
        return 0;
    }

    private int setPaused(String name, boolean paused) throws SQLException {
        try (Connection c = db.connect(); PreparedStatement ps = c.prepareStatement("UPDATE schedules SET paused = ? WHERE name = ? RETURNING name")) {
            ps.setBoolean(1, paused);
            ps.setString(2, name);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new Cli.UsageException("schedule " + (paused ? "pause" : "resume") + ": no schedule named " + name);
                }
            }
        }
        out.println(paused ? "Paused schedule " + name + ": its occurrences are skipped (recorded in schedule_skips) until it is resumed"
                : "Resumed schedule " + name + ": occurrences from now on fire; those while it was paused are recorded as skipped");
        return 0;
    }

    private int remove(String name) throws SQLException {
        try (Connection c = db.connect(); PreparedStatement ps = c.prepareStatement("DELETE FROM schedules WHERE name = ? RETURNING fired")) {
            ps.setString(1, name);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new Cli.UsageException("schedule remove: no schedule named " + name);
                }
                out.println("Removed schedule " + name + " (" + rs.getLong(1) + " occurrences fired; their jobs stay as they are)");
            }
        }
        return 0;
    }
}
