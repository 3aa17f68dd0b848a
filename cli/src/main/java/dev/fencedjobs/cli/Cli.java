package dev.fencedjobs.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Database;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Roles;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.Faults;
import java.io.IOException;
import java.io.PrintStream;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code fenced-jobs <command>}: the operator's tool. Exit codes: 0 done, 1 failed (the database
 * refused or could not be reached, or nothing was released), 2 bad usage.
 */
public final class Cli {

    /** One entry per command: its synopsis and what it does. */
    private static final Map<String, String> HELP = new LinkedHashMap<>();

    static {
        HELP.put("migrate", String.join("\n",
                "  migrate [--roles]",
                "      Apply the schema: jobs, lease and outbox, and the consumer's tables (in CONSUMER_DATABASE_URL's",
                "      database when it is set). With --roles, also create (or update) the least-privilege roles whose",
                "      passwords are set: FJ_DISPATCHER_PASSWORD, FJ_RELAY_PASSWORD, FJ_PRODUCER_PASSWORD, and",
                "      FJ_CONSUMER_PASSWORD (where the consumer's tables are). Run it as the schema owner."));
        HELP.put("submit", String.join("\n",
                "  submit --due <when> [--resource <r>] [--payload <json>] [--key <unique key>]",
                "      Insert a job. <when> is now, an offset from the database clock (+30s, +5m, +2h) or an ISO-8601",
                "      time (2026-12-01T09:00:00Z). With --key, submitting the same key again inserts nothing."));
        HELP.put("cancel", String.join("\n",
                "  cancel (--id <job id> | --key <unique key>)",
                "      Cancel a pending job: it is never completed. Cancelling a job already completed fails and says so;",
                "      cancelling a cancelled job again changes nothing. Run as a producer's login, only its own jobs."));
        HELP.put("reschedule", String.join("\n",
                "  reschedule (--id <job id> | --key <unique key>) --due <when>",
                "      Move a pending job's due time (<when> as for submit). Fails for a completed or cancelled job."));
        HELP.put("schedule", String.join("\n",
                "  schedule add <name> (--cron '<min> <hour> <day> <month> <weekday>' [--zone <tz>] | --every <duration>)",
                "               [--resource <r>] [--payload <json>] [--misfire all|latest|skip] [--starts <when>]",
                "  schedule list | pause <name> | resume <name> | remove <name>",
                "      Recurring schedules: the dispatcher leader turns each occurrence into one job, key",
                "      schedule:<name>@<fire time>. --zone defaults to UTC, --misfire (occurrences missed while no",
                "      dispatcher led for longer than SCHEDULE_MISFIRE_GRACE) to latest. Occurrences of a paused",
                "      schedule are skipped and recorded in schedule_skips."));
        HELP.put("dead-letters", String.join("\n",
                "  dead-letters list [filters] [--limit <n>] | show <id>",
                "  dead-letters replay (<id>... | filters | --all) [--by <name>]",
                "  dead-letters discard (<id>... | filters | --all) [--by <name>]",
                "      The consumer's dead letters. Filters: --reason <text> (part of the reason), --resource <r>,",
                "      --job <id>, --status dead|replay_requested|replayed|discarded, --since/--until <time or 2h ago>.",
                "      replay asks a running consumer to process each again through the same dedup and fence path as",
                "      a fresh record (never applied twice); discard marks it handled. Both record who and when, act",
                "      only on letters still dead, and delete nothing."));
        HELP.put("status", String.join("\n",
                "  status",
                "      Leader and token per role, the token history, pending/due/completed jobs, the outbox lag, and",
                "      the consumer's applied/stale/dead-letter counts."));
        HELP.put("release", String.join("\n",
                "  release --role <role> [--holder <id> --token <n>]",
                "      End a live lease early so a follower takes over at once, only if it still has that holder and",
                "      token (default: the current ones). A newer holder's lease is never touched."));
    }

    static final String USAGE = "usage: fenced-jobs <command> [options]\n\ncommands:\n" + String.join("\n", HELP.values())
            + "\n\nEach command takes --help. The database comes from DATABASE_URL, DATABASE_USER and DATABASE_PASSWORD;\n"
            + "the consumer's tables from CONSUMER_DATABASE_URL (and _USER, _PASSWORD) when they live in another database.";

    private final Settings settings;
    private final PrintStream out;
    private final PrintStream err;

    Cli(Settings settings, PrintStream out, PrintStream err) {
        this.settings = settings;
        this.out = out;
        this.err = err;
    }

    public static void main(String[] args) {
        System.exit(new Cli(Settings.fromEnvironment(), System.out, System.err).run(args));
    }

    /** Usage errors; the message is printed as one line with a hint. */
    static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    int run(String[] args) {
        if (args.length == 0 || args[0].equals("help") || args[0].equals("--help") || args[0].equals("-h")) {
            out.println(USAGE);
            return args.length == 0 ? 2 : 0;
        }
        String command = args[0];
        Map<String, String> options;
        try {
            if (command.equals("schedule")) {
                return new ScheduleCommands(this::connectDatabase, out).run(args);
            }
            if (command.equals("dead-letters")) {
                return new DeadLetterCommands(this::connectConsumerDatabase, out).run(args);
            }
            options = options(command, java.util.Arrays.copyOfRange(args, 1, args.length));
            if (options.containsKey("help")) {
                out.println(commandHelp(command));
                return 0;
            }
            switch (command) {
                case "migrate":
                    return migrate(options);
                case "submit":
                    return submit(options);
                case "status":
                    return status();
                case "release":
                    return release(options);
                case "cancel":
                    return cancel(options);
                case "reschedule":
                    return reschedule(options);
                default:
                    throw new UsageException("unknown command '" + command + "'");
            }
        } catch (UsageException | ConfigException e) {
            err.println("fenced-jobs: " + e.getMessage());
            err.println("Try 'fenced-jobs " + (isCommand(command) ? command + " " : "") + "--help'.");
            return 2;
        } catch (SQLException | RuntimeException e) {
            err.println("fenced-jobs " + command + ": " + Faults.describe(e));
            return 1;
        }
    }

    private static boolean isCommand(String command) {
        return HELP.containsKey(command);
    }

    private static final Map<String, List<String>> OPTIONS = Map.of(
            "migrate", List.of("roles"),
            "submit", List.of("due", "resource", "payload", "key"),
            "status", List.of(),
            "release", List.of("role", "holder", "token"),
            "cancel", List.of("id", "key"),
            "reschedule", List.of("id", "key", "due"));

    private static final List<String> FLAGS = List.of("roles", "help", "all");

    static Map<String, String> options(String command, String[] args) {
        return options(command, OPTIONS.get(command), args);
    }

    static Map<String, String> options(String command, List<String> allowed, String[] args) {
        if (allowed == null) {
            throw new UsageException("unknown command '" + command + "'");
        }
        Map<String, String> options = new LinkedHashMap<>();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            if (!arg.startsWith("--")) {
                throw new UsageException(command + ": unexpected argument '" + arg + "'");
            }
            String name = arg.substring(2);
            String value = null;
            int eq = name.indexOf('=');
            if (eq >= 0) {
                value = name.substring(eq + 1);
                name = name.substring(0, eq);
            }
            if (!allowed.contains(name) && !name.equals("help")) {
                throw new UsageException(command + ": unknown option --" + name);
            }
            if (FLAGS.contains(name)) {
                options.put(name, "true");
                continue;
            }
            if (value == null) {
                if (i + 1 >= args.length) {
                    throw new UsageException(command + ": --" + name + " needs a value");
                }
                value = args[++i];
            }
            options.put(name, value);
        }
        return options;
    }

    static String commandHelp(String command) {
        return "usage: fenced-jobs " + HELP.get(command).strip();
    }

    private DatabaseConfig database() {
        return DatabaseConfig.from(settings);
    }

    private Connection connectDatabase() throws SQLException {
        return connect(database());
    }

    /** Where the consumer's tables are: CONSUMER_DATABASE_URL's database when set. */
    private Connection connectConsumerDatabase() throws SQLException {
        Connection consumer = consumerConnection();
        return consumer != null ? consumer : connect(database());
    }

    private Connection connect(DatabaseConfig db) throws SQLException {
        return DriverManager.getConnection(db.url(), db.user(), db.password());
    }

    private int migrate(Map<String, String> options) throws SQLException {
        DatabaseConfig db = database();
        java.util.Optional<DatabaseConfig> consumerDb = consumerDatabase();
        Database.migrate(db, Database.MIGRATIONS, Database.HISTORY_TABLE, 3);
        if (consumerDb.isEmpty()) {
            Database.migrate(db, FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE, 3);
            out.println("Schema up to date on " + db.safeUrl() + " (jobs, lease, outbox; consumer tables)");
        } else {
            Database.migrate(consumerDb.get(), FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE, 3);
            out.println("Schema up to date on " + db.safeUrl() + " (jobs, lease, outbox)");
            out.println("Schema up to date on " + consumerDb.get().safeUrl() + " (consumer tables)");
        }
        if (options.containsKey("roles")) {
            Map<String, String> passwords = new HashMap<>();
            for (String role : List.of(Roles.DISPATCHER, Roles.RELAY, Roles.CONSUMER, Roles.PRODUCER)) {
                settings.get(role.toUpperCase(java.util.Locale.ROOT) + "_PASSWORD").ifPresent(p -> passwords.put(role, p));
            }
            if (passwords.isEmpty()) {
                throw new UsageException("migrate --roles: set at least one of FJ_DISPATCHER_PASSWORD, FJ_RELAY_PASSWORD, "
                        + "FJ_CONSUMER_PASSWORD, FJ_PRODUCER_PASSWORD");
            }
            // fj_consumer is made where the consumer's tables are: roles belong to a server, and the
            // consumer's database may be on another one.
            Map<String, String> here = new HashMap<>(passwords);
            String consumerPassword = consumerDb.isPresent() ? here.remove(Roles.CONSUMER) : null;
            if (!here.isEmpty()) {
                try (Connection c = connect(db)) {
                    Roles.apply(c, here);
                }
            }
            if (consumerPassword != null) {
                try (Connection c = connect(consumerDb.get())) {
                    Roles.apply(c, Map.of(Roles.CONSUMER, consumerPassword));
                }
                out.println("Roles ready: " + String.join(", ", new java.util.TreeSet<>(here.keySet())) + (here.isEmpty() ? "" : " on "
                        + db.safeUrl() + "; ") + Roles.CONSUMER + " on " + consumerDb.get().safeUrl());
            } else {
                out.println("Roles ready: " + String.join(", ", new java.util.TreeSet<>(passwords.keySet())));
            }
        }
        return 0;
    }

    private int submit(Map<String, String> options) throws SQLException {
        String due = required(options, "due", "submit");
        String resource = options.getOrDefault("resource", "default");
        String payload = options.getOrDefault("payload", "{}");
        try {
            new ObjectMapper().readTree(payload);
        } catch (IOException e) {
            throw new UsageException("submit: --payload is not valid JSON: " + payload);
        }
        String key = options.get("key");
        DueTime when = DueTime.parse("submit", due);
        try (Connection c = connect(database());
                PreparedStatement ps = c.prepareStatement("INSERT INTO jobs (resource, payload, due_at, unique_key) "
                        + "VALUES (?, ?::jsonb, " + when.sql() + ", ?) ON CONFLICT (unique_key) DO NOTHING RETURNING id, due_at")) {
            ps.setString(1, resource);
            ps.setString(2, payload);
            int next = 3;
            if (when.absolute() != null) {
                ps.setObject(next++, when.absolute());
            } else {
                ps.setLong(next++, when.offset().toMillis());
            }
            ps.setString(next, key);
            try (ResultSet rs = ps.executeQuery()) {
                if (rs.next()) {
                    out.println("Submitted job " + rs.getLong(1) + " for resource " + resource + ", due " + rs.getObject(2, OffsetDateTime.class));
                    return 0;
                }
            }
            try (PreparedStatement existing = c.prepareStatement("SELECT id, state FROM jobs WHERE unique_key = ?")) {
                existing.setString(1, key);
                try (ResultSet rs = existing.executeQuery()) {
                    rs.next();
                    out.println("Already submitted: job " + rs.getLong(1) + " has key " + key + " (" + rs.getString(2) + "); nothing inserted");
                    return 0;
                }
            }
        }
    }

    /** The job an option names: {@code --id} or {@code --key}, exactly one. */
    private static Object[] jobRef(Map<String, String> options, String command) {
        if (options.containsKey("id") == options.containsKey("key")) {
            throw new UsageException(command + ": name the job with --id or with --key, one of them");
        }
        if (options.containsKey("id")) {
            try {
                return new Object[] {Long.parseLong(options.get("id")), null};
            } catch (NumberFormatException e) {
                throw new UsageException(command + ": --id must be a job id (a whole number), got " + options.get("id"));
            }
        }
        return new Object[] {null, options.get("key")};
    }

    private int cancel(Map<String, String> options) throws SQLException {
        Object[] ref = jobRef(options, "cancel");
        try (Connection c = connect(database())) {
            long id = controlled(c, (ref[0] != null ? "cancel_job(?)" : "cancel_job_by_key(?)"), ref, null);
            try (PreparedStatement ps = c.prepareStatement("SELECT cancelled_at FROM my_jobs WHERE id = ?")) {
                ps.setLong(1, id);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    out.println("Job " + id + " is cancelled (since " + rs.getObject(1, OffsetDateTime.class) + "); it will not be completed");
                    return 0;
                }
            }
        } catch (SQLException e) {
            return refused("cancel", e);
        }
    }

    private int reschedule(Map<String, String> options) throws SQLException {
        Object[] ref = jobRef(options, "reschedule");
        DueTime when = DueTime.parse("reschedule", required(options, "due", "reschedule"));
        try (Connection c = connect(database())) {
            long id = controlled(c, (ref[0] != null ? "reschedule_job(?, " : "reschedule_job_by_key(?, ") + when.sql() + ")", ref, when);
            try (PreparedStatement ps = c.prepareStatement("SELECT due_at FROM my_jobs WHERE id = ?")) {
                ps.setLong(1, id);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    out.println("Job " + id + " is now due " + rs.getObject(1, OffsetDateTime.class));
                    return 0;
                }
            }
        } catch (SQLException e) {
            return refused("reschedule", e);
        }
    }

    /** Calls one of the job-control functions (migration V9), which returns the job's id. */
    private static long controlled(Connection c, String call, Object[] ref, DueTime when) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("SELECT " + call)) {
            ps.setObject(1, ref[0] != null ? ref[0] : ref[1]);
            if (when != null) {
                if (when.absolute() != null) {
                    ps.setObject(2, when.absolute());
                } else {
                    ps.setLong(2, when.offset().toMillis());
                }
            }
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getLong(1);
            }
        }
    }

    /** The database's refusal (no such job, already completed, cancelled) as one line, exit code 1. */
    private int refused(String command, SQLException e) throws SQLException {
        String state = e.getSQLState();
        if ("P0002".equals(state) || "55000".equals(state)) {
            String message = e.getMessage();
            int newline = message.indexOf('\n');
            err.println("fenced-jobs " + command + ": " + (newline < 0 ? message : message.substring(0, newline)).replaceFirst("^ERROR: ", ""));
            return 1;
        }
        throw e;
    }

    /** A due time: absolute, or an offset from the database's clock. */
    record DueTime(OffsetDateTime absolute, Duration offset) {
        static DueTime parse(String command, String raw) {
            if (raw.equals("now")) {
                return new DueTime(null, Duration.ZERO);
            }
            if (raw.startsWith("+")) {
                try {
                    return new DueTime(null, Settings.parseDuration("--due", raw.substring(1)));
                } catch (ConfigException e) {
                    throw new UsageException(command + ": --due " + raw + " is not an offset such as +30s, +5m or +2h");
                }
            }
            try {
                return new DueTime(OffsetDateTime.parse(raw), null);
            } catch (DateTimeParseException e) {
                throw new UsageException(command + ": --due " + raw + " is neither now, an offset such as +30s, nor an ISO-8601 time "
                        + "such as 2026-12-01T09:00:00Z");
            }
        }

        /** Offsets are added to clock_timestamp(), so the due time is in database time. */
        String sql() {
            return absolute != null ? "?" : "clock_timestamp() + ? * interval '1 millisecond'";
        }
    }

    private int status() throws SQLException {
        try (Connection c = connect(database())) {
            new StatusReport(c, consumerConnection(), out).print();
        }
        return 0;
    }

    private Connection consumerConnection() throws SQLException {
        java.util.Optional<DatabaseConfig> consumer = consumerDatabase();
        return consumer.isEmpty() ? null : connect(consumer.get());
    }

    /** The consumer's own database, when {@code CONSUMER_DATABASE_URL} says its tables live elsewhere. */
    private java.util.Optional<DatabaseConfig> consumerDatabase() {
        if (settings.get("CONSUMER_DATABASE_URL").isEmpty()) {
            return java.util.Optional.empty();
        }
        return java.util.Optional.of(DatabaseConfig.of(settings.required("CONSUMER_DATABASE_URL"),
                settings.string("CONSUMER_DATABASE_USER", database().user()),
                settings.string("CONSUMER_DATABASE_PASSWORD", database().password())).withPoolSize(1));
    }

    private int release(Map<String, String> options) throws SQLException {
        String role = required(options, "role", "release");
        if (options.containsKey("holder") != options.containsKey("token")) {
            throw new UsageException("release: give both --holder and --token, or neither");
        }
        try (Connection c = connect(database())) {
            String holder = options.get("holder");
            long token;
            if (holder == null) {
                java.util.Optional<dev.fencedjobs.db.LeaseRow> lease = dev.fencedjobs.db.LeaseRow.of(c, role);
                if (lease.isEmpty()) {
                    err.println("fenced-jobs release: no lease for role " + role);
                    return 1;
                }
                holder = lease.get().holderId();
                token = lease.get().token();
            } else {
                try {
                    token = Long.parseLong(options.get("token"));
                } catch (NumberFormatException e) {
                    throw new UsageException("release: --token must be a whole number, got " + options.get("token"));
                }
            }
            boolean released = dev.fencedjobs.db.Lease.release(org.jooq.impl.DSL.using(c, org.jooq.SQLDialect.POSTGRES), role, holder, token);
            if (released) {
                out.println("Released " + role + " (holder " + holder + ", token " + token + "); followers were notified");
                return 0;
            }
            err.println("fenced-jobs release: nothing released: the lease of " + role + " is not live with holder " + holder
                    + " and token " + token + " (it expired or moved on)");
            return 1;
        }
    }

    private static String required(Map<String, String> options, String name, String command) {
        String value = options.get(name);
        if (value == null || value.isBlank()) {
            throw new UsageException(command + ": --" + name + " is required");
        }
        return value;
    }
}
