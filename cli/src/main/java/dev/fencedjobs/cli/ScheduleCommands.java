package dev.fencedjobs.cli;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.internal.Occurrences;
import java.io.PrintStream;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import picocli.CommandLine;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.TypeConversionException;

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

    @Command(
            name = "schedule",
            customSynopsis = "schedule (add | list | pause | resume | remove) ...",
            description = {
                "Recurring schedules.",
                "The dispatcher leader turns each occurrence into one job, key schedule:<name>@<fire time>. Occurrences of a paused schedule "
                        + "are skipped and recorded in schedule_skips."
            })
    static final class Group {}

    /** The commands, under {@code schedule}. */
    CommandLine commands() {
        return new CommandLine(new Group())
                .addSubcommand(new Add())
                .addSubcommand(new ListSchedules())
                .addSubcommand(new Pause())
                .addSubcommand(new Resume())
                .addSubcommand(new Remove());
    }

    /** When occurrences missed while no dispatcher led are made. */
    enum Misfire {
        all,
        latest,
        skip
    }

    /** A cron expression or a fixed interval: one of them. */
    static final class Rule {
        @Option(
                names = "--cron",
                required = true,
                paramLabel = "<cron>",
                description = "five fields: minute hour day month weekday")
        String cron;

        @Option(
                names = "--every",
                required = true,
                paramLabel = "<duration>",
                converter = Interval.class,
                description = "an interval on absolute time (90s, 5m, 1h)")
        Duration every;
    }

    static final class Interval implements ITypeConverter<Duration> {
        @Override
        public Duration convert(String raw) {
            try {
                return Settings.parseDuration("--every", raw);
            } catch (ConfigException e) {
                throw new TypeConversionException(e.getMessage());
            }
        }
    }

    @Command(
            name = "add",
            customSynopsis = {
                "schedule add <name> (--cron '<min> <hour> <day> <month> <weekday>' [--zone <tz>] | --every <duration>)",
                "                                [--resource <r>] [--payload <json>] [--misfire all|latest|skip] [--starts <when>]"
            },
            description = {
                "Add a schedule.",
                "--zone defaults to UTC; --misfire (occurrences missed while no dispatcher led for longer "
                        + "than SCHEDULE_MISFIRE_GRACE) to latest."
            })
    final class Add implements Cli.Action {
        @Parameters(paramLabel = "<name>", description = "the schedule's name")
        String name;

        @ArgGroup(exclusive = true, multiplicity = "1")
        Rule rule;

        @Option(names = "--zone", paramLabel = "<tz>", description = "the cron's time zone (default UTC)")
        String zone;

        @Option(names = "--resource", paramLabel = "<r>", description = "the jobs' resource")
        String resource = "default";

        @Option(
                names = "--payload",
                paramLabel = "<json>",
                converter = Json.Converter.class,
                description = "the jobs' payload")
        Json payload = Json.EMPTY;

        @Option(names = "--misfire", paramLabel = "<policy>", description = "all, latest or skip")
        Misfire misfire = Misfire.latest;

        @Option(
                names = "--starts",
                paramLabel = "<when>",
                converter = DueTime.Converter.class,
                description = "the first occurrence at or after it")
        DueTime starts;

        @Override
        public int run() throws SQLException {
            return add(this);
        }
    }

    @Command(
            name = "list",
            customSynopsis = "schedule list",
            description = "The schedules, their rules, state and next occurrence.")
    final class ListSchedules implements Cli.Action {
        @Override
        public int run() throws SQLException {
            return list();
        }
    }

    @Command(
            name = "pause",
            customSynopsis = "schedule pause <name>",
            description = "Pause a schedule: its occurrences are skipped, and recorded.")
    final class Pause implements Cli.Action {
        @Parameters(paramLabel = "<name>", description = "the schedule's name")
        String name;

        @Override
        public int run() throws SQLException {
            return setPaused(name, true);
        }
    }

    @Command(name = "resume", customSynopsis = "schedule resume <name>", description = "Resume a paused schedule.")
    final class Resume implements Cli.Action {
        @Parameters(paramLabel = "<name>", description = "the schedule's name")
        String name;

        @Override
        public int run() throws SQLException {
            return setPaused(name, false);
        }
    }

    @Command(
            name = "remove",
            customSynopsis = "schedule remove <name>",
            description = "Remove a schedule; the jobs it made stay.")
    final class Remove implements Cli.Action {
        @Parameters(paramLabel = "<name>", description = "the schedule's name")
        String name;

        @Override
        public int run() throws SQLException {
            return remove(name);
        }
    }

    private int add(Add a) throws SQLException {
        String name = a.name;
        String cron = a.rule.cron;
        Duration interval = a.rule.every;
        if (interval != null && a.zone != null) {
            throw new Cli.UsageException(
                    "schedule add: --zone applies to --cron only (an --every interval runs on absolute time)");
        }
        String zone = a.zone == null ? "UTC" : a.zone;
        try {
            if (cron != null) {
                Occurrences.cron(cron, zone, Instant.now());
            } else {
                Occurrences.every(interval, Instant.now());
            }
        } catch (IllegalArgumentException e) {
            throw new Cli.UsageException("schedule add: " + e.getMessage());
        }
        String misfire = a.misfire.name();
        DueTime starts = a.starts;
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement(
                        "INSERT INTO schedules (name, cron, every, time_zone, resource, payload, misfire, starts_at) "
                                + "VALUES (?, ?, ? * interval '1 microsecond', ?, ?, ?::jsonb, ?, "
                                + (starts == null ? "clock_timestamp()" : starts.sql()) + ") "
                                + "ON CONFLICT (name) DO NOTHING RETURNING starts_at")) {
            ps.setString(1, name);
            ps.setString(2, cron);
            ps.setObject(3, interval == null ? null : interval.toNanos() / 1000, Types.BIGINT);
            ps.setString(4, zone);
            ps.setString(5, a.resource);
            ps.setString(6, a.payload.text());
            ps.setString(7, misfire);
            // Without --starts, from the database's clock, not this machine's.
            if (starts != null && starts.absolute() != null) {
                ps.setObject(8, starts.absolute());
            } else if (starts != null) {
                ps.setLong(8, starts.offset().toMillis());
            }
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new Cli.UsageException("schedule add: a schedule named " + name
                            + " exists; remove it first, or change it with SQL");
                }
                out.println("Added schedule " + name + " ("
                        + (cron != null ? "cron '" + cron + "' in " + zone : "every " + interval) + ", misfire "
                        + misfire + "), starting " + rs.getObject(1, OffsetDateTime.class));
            }
        }
        return 0;
    }

    private int list() throws SQLException {
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement(
                        "SELECT name, coalesce('cron ' || cron || ' ' || time_zone, 'every ' || every::text), misfire, "
                                + "paused, next_fire_at, fired, skipped, last_fired_at, error, resource FROM schedules ORDER BY name");
                ResultSet rs = ps.executeQuery()) {
            boolean any = false;
            while (rs.next()) {
                any = true;
                out.printf(
                        "%-24s %-32s misfire %-6s %-7s next %-32s fired %d, skipped %d, last %s, resource %s%s%n",
                        rs.getString(1),
                        rs.getString(2),
                        rs.getString(3),
                        rs.getBoolean(4) ? "paused" : "active",
                        rs.getObject(5, OffsetDateTime.class),
                        rs.getLong(6),
                        rs.getLong(7),
                        rs.getObject(8, OffsetDateTime.class),
                        rs.getString(10),
                        rs.getString(9) == null ? "" : "; ERROR: " + rs.getString(9));
            }
            if (!any) {
                out.println("No schedules.");
            }
        }
        return 0;
    }

    private int setPaused(String name, boolean paused) throws SQLException {
        try (Connection c = db.connect();
                PreparedStatement ps =
                        c.prepareStatement("UPDATE schedules SET paused = ? WHERE name = ? RETURNING name")) {
            ps.setBoolean(1, paused);
            ps.setString(2, name);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new Cli.UsageException(
                            "schedule " + (paused ? "pause" : "resume") + ": no schedule named " + name);
                }
            }
        }
        out.println(
                paused
                        ? "Paused schedule " + name
                                + ": its occurrences are skipped (recorded in schedule_skips) until it is resumed"
                        : "Resumed schedule " + name
                                + ": occurrences from now on fire; those while it was paused are recorded as skipped");
        return 0;
    }

    private int remove(String name) throws SQLException {
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement("DELETE FROM schedules WHERE name = ? RETURNING fired")) {
            ps.setString(1, name);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new Cli.UsageException("schedule remove: no schedule named " + name);
                }
                out.println("Removed schedule " + name + " (" + rs.getLong(1)
                        + " occurrences fired; their jobs stay as they are)");
            }
        }
        return 0;
    }
}
