package dev.fencedjobs.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.lease.Lease;
import dev.fencedjobs.lease.LeaseRow;
import dev.fencedjobs.runtime.internal.Faults;
import java.io.IOException;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;
import org.jooq.SQLDialect;
import org.jooq.impl.DSL;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Model.PositionalParamSpec;
import picocli.CommandLine.ParseResult;
import picocli.CommandLine;

/**
 * {@code fenced-jobs <command>}: the operator's tool. Exit codes: 0 done, 1 failed (the database
 * refused or could not be reached, or nothing was released), 2 bad usage.
 *
 * <p>The command line is parsed by picocli from the table below, one entry per command: its
 * synopsis, what it does, its options and arguments, and the method that runs it with the options
 * given (by long name, a flag as {@code "true"}).
 */
public final class Cli {

    /** Runs a command with its arguments and the options given. */
    private interface Handler {
        int run(List<String> arguments, Map<String, String> options) throws SQLException;
    }

    /** An option: a flag when {@code label} is null. */
    private record Opt(String name, String label, String description) {}

    private static Opt opt(String name, String label, String description) {
        return new Opt(name, label, description);
    }

    private static Opt flag(String name, String description) {
        return new Opt(name, null, description);
    }

    /** Wide enough for the synopses as written. */
    private static final int WIDTH = 120;
    private static final String FOOTER = "The database comes from DATABASE_URL, DATABASE_USER and DATABASE_PASSWORD; the consumer's "
            + "tables from CONSUMER_DATABASE_URL (and _USER, _PASSWORD) when they live in another database.";
    private static final List<Opt> FILTERS = List.of(
            opt("reason", "<text>", "part of the reason"),
            opt("resource", "<r>", "the record's resource"),
            opt("job", "<id>", "the job id"),
            opt("status", "<status>", "dead, replay_requested, replayed or discarded"),
            opt("since", "<time>", "dead-lettered at or after: an ISO-8601 time or how long ago (2h)"),
            opt("until", "<time>", "dead-lettered before it"),
            opt("limit", "<n>", "at most this many"));
    private static final List<Opt> MARK = concat(FILTERS,
            flag("all", "every letter still dead (instead of ids or filters)"),
            opt("by", "<name>", "who acts, recorded with the database user (default: your login name)"));

    private static List<Opt> concat(List<Opt> a, Opt... b) {
        List<Opt> all = new ArrayList<>(a);
        all.addAll(List.of(b));
        return all;
    }

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

    /** The command tree: each entry's spec carries its {@link Handler}. */
    private CommandLine commands() {
        ScheduleCommands schedules = new ScheduleCommands(this::connectDatabase, out);
        DeadLetterCommands deadLetters = new DeadLetterCommands(this::connectConsumerDatabase, out);
        CommandSpec root = spec("fenced-jobs", null, List.of("<command> [options]"),
                List.of("The operator's tool for fenced-jobs.", "Each command takes --help."), List.of(), null);
        root.usageMessage().footer("", FOOTER);
        root.addSubcommand("migrate", spec("migrate", (a, o) -> migrate(o), List.of("migrate [--roles]"), List.of("Apply the schema.",
                "Jobs, lease and outbox, and the consumer's tables (in CONSUMER_DATABASE_URL's database when it is set). With "
                + "--roles, also create (or update) the least-privilege roles whose passwords are set: FJ_DISPATCHER_PASSWORD, "
                + "FJ_RELAY_PASSWORD, FJ_PRODUCER_PASSWORD, and FJ_CONSUMER_PASSWORD (where the consumer's tables are). Run it as "
                + "the schema owner."),
                List.of(flag("roles", "also create or update the roles whose passwords are set")), null));
        root.addSubcommand("submit", spec("submit", (a, o) -> submit(o),
                List.of("submit --due <when> [--resource <r>] [--payload <json>] [--key <unique key>]"), List.of("Insert a job.",
                "<when> is now, an offset from the database clock (+30s, +5m, +2h) or an ISO-8601 time (2026-12-01T09:00:00Z). "
                + "With --key, submitting the same key again inserts nothing."),
                List.of(opt("due", "<when>", "now, +30s, +5m, +2h or an ISO-8601 time"), opt("resource", "<r>", "default: default"),
                        opt("payload", "<json>", "default: {}"), opt("key", "<unique key>", "the job's unique key")), null));
        root.addSubcommand("cancel", spec("cancel", (a, o) -> cancel(o), List.of("cancel (--id <job id> | --key <unique key>)"), List.of("Cancel a pending job: it is never completed.",
                "Cancelling a job already completed fails and says so; cancelling a cancelled job again changes nothing. Run as "
                + "a producer's login, only its own jobs."),
                List.of(opt("id", "<job id>", "the job's id"), opt("key", "<unique key>", "the job's unique key")), null));
        root.addSubcommand("reschedule", spec("reschedule", (a, o) -> reschedule(o),
                List.of("reschedule (--id <job id> | --key <unique key>) --due <when>"), List.of("Move a pending job's due time.",
                "<when> as for submit. Fails for a completed or cancelled job."),
                List.of(opt("id", "<job id>", "the job's id"), opt("key", "<unique key>", "the job's unique key"),
                        opt("due", "<when>", "now, +30s, +5m, +2h or an ISO-8601 time")), null));
        CommandSpec schedule = spec("schedule", null, List.of("schedule (add | list | pause | resume | remove) ..."), List.of("Recurring schedules.",
                "The dispatcher leader turns each occurrence into one job, key schedule:<name>@<fire time>. Occurrences of a "
                + "paused schedule are skipped and recorded in schedule_skips."), List.of(), null);
        schedule.addSubcommand("add", spec("add", (a, o) -> schedules.run("add", a, o),
                List.of("schedule add <name> (--cron '<min> <hour> <day> <month> <weekday>' [--zone <tz>] | --every <duration>)",
                        " ".repeat(32) + "[--resource <r>] [--payload <json>] [--misfire all|latest|skip] [--starts <when>]"), List.of("Add a schedule.",
                "--zone defaults to UTC; --misfire (occurrences missed while no dispatcher led for longer than "
                + "SCHEDULE_MISFIRE_GRACE) to latest."),
                List.of(opt("cron", "<cron>", "five fields: minute hour day month weekday"), opt("zone", "<tz>", "the cron's time zone"),
                        opt("every", "<duration>", "an interval on absolute time (90s, 5m, 1h)"), opt("resource", "<r>", "the jobs' resource"),
                        opt("payload", "<json>", "the jobs' payload"), opt("misfire", "<policy>", "all, latest or skip"),
                        opt("starts", "<when>", "the first occurrence at or after it")), "<name>"));
        schedule.addSubcommand("list", spec("list", (a, o) -> schedules.run("list", a, o), List.of("schedule list"),
                List.of("The schedules, their rules, state and next occurrence."), List.of(), null));
        for (String[] sub : new String[][] {{"pause", "Pause a schedule: its occurrences are skipped, and recorded."},
                {"resume", "Resume a paused schedule."}, {"remove", "Remove a schedule; the jobs it made stay."}}) {
            schedule.addSubcommand(sub[0], spec(sub[0], (a, o) -> schedules.run(sub[0], a, o), List.of("schedule " + sub[0] + " <name>"),
                    List.of(sub[1]), List.of(), "<name>"));
        }
        root.addSubcommand("schedule", schedule);
        CommandSpec letters = spec("dead-letters", null, List.of("dead-letters (list | show | replay | discard) ..."), List.of("The consumer's dead letters.",
                "replay asks a running consumer to process each again through the same dedup and fence path as a fresh record "
                + "(never applied twice); discard marks it handled. Both record who and when, act only on letters still dead, "
                + "and delete nothing."), List.of(), null);
        letters.addSubcommand("list", spec("list", (a, o) -> deadLetters.run("list", a, o),
                List.of("dead-letters list [filters] [--limit <n>]"), List.of("The dead letters the filters select, newest first."),
                FILTERS, null));
        letters.addSubcommand("show", spec("show", (a, o) -> deadLetters.run("show", a, o), List.of("dead-letters show <id>"),
                List.of("One dead letter: its reason, its record's headers and bytes."), List.of(), "<id>"));
        letters.addSubcommand("replay", spec("replay", (a, o) -> deadLetters.run("replay", a, o),
                List.of("dead-letters replay (<id>... | filters | --all) [--by <name>]"),
                List.of("Ask a running consumer to replay these letters."), MARK, "<id>..."));
        letters.addSubcommand("discard", spec("discard", (a, o) -> deadLetters.run("discard", a, o),
                List.of("dead-letters discard (<id>... | filters | --all) [--by <name>]"), List.of("Mark these letters handled."), MARK,
                "<id>..."));
        root.addSubcommand("dead-letters", letters);
        FenceCommands fences = new FenceCommands(this::connectConsumerDatabase, out);
        CommandSpec fence = spec("fence", null, List.of("fence (show | reset) <resource> ..."), List.of("A resource's fence in the consumer.",
                "show prints its highest token and outbox ids, the tokens its records carried, and its stale, late and reset history; "
                + "reset moves it back, for a fence a forged or mistaken record raised. Run reset as an operator's login: the "
                + "consumer's role is refused, and each reset is recorded in consumer_fence_reset (who, when, why, from, to)."),
                List.of(), null);
        fence.addSubcommand("show", spec("show", (a, o) -> fences.run("show", a, o), List.of("fence show <resource>"),
                List.of("The fence of <resource> and its history."), List.of(), "<resource>"));
        fence.addSubcommand("reset", spec("reset", (a, o) -> fences.run("reset", a, o),
                List.of("fence reset <resource> --token <n> [--outbox-id <n>] --reason <text>"),
                List.of("Move the fence of <resource> back to --token.",
                        "Records below it are stale from then on. --outbox-id (default 0: not known) is the highest outbox id applied "
                        + "with that token, for telling late records apart; effects already applied stay."),
                List.of(opt("token", "<n>", "the highest token to keep, usually the dispatcher lease's (fenced-jobs status)"),
                        opt("outbox-id", "<n>", "the highest outbox id applied with it (default 0: not known)"),
                        opt("reason", "<text>", "why, for the audit record")), "<resource>"));
        root.addSubcommand("fence", fence);
        root.addSubcommand("keygen", spec("keygen", (a, o) -> new KeygenCommand(out, err).run(o), List.of("keygen [--dir <directory>] [--if-missing]"),
                List.of("Make an Ed25519 key pair for record signatures.",
                        "Writes record-signing.key (the relay's RECORD_SIGNING_KEY_FILE, readable by its owner only) and "
                        + "record-signing.pub (the consumers' RECORD_VERIFY_KEYS_FILE) and prints the key's id. Refuses to "
                        + "overwrite either; with --if-missing, keeps a pair already there and makes one only where there is none."),
                List.of(opt("dir", "<directory>", "where to write them (default: the current directory)"),
                        flag("if-missing", "keep the pair already in the directory (a container's first start makes it)")), null));
        root.addSubcommand("status", spec("status", (a, o) -> status(), List.of("status"), List.of("What runs and how far behind it is.",
                "Leader and token per role, the token history, pending/due/completed jobs, the outbox lag, and the consumer's "
                + "applied/stale/dead-letter counts."), List.of(), null));
        root.addSubcommand("release", spec("release", (a, o) -> release(o), List.of("release --role <role> [--holder <id> --token <n>]"),
                List.of("End a live lease early, so that a follower takes over at once.",
                        "Only if it still has that holder and token (default: the current ones). A newer holder's lease is never "
                        + "touched."),
                List.of(opt("role", "<role>", "scheduler or relay"), opt("holder", "<id>", "the holder it must still have"),
                        opt("token", "<n>", "the token it must still have")), null));
        CommandLine line = new CommandLine(root);
        line.setOut(new PrintWriter(out, true));
        line.setErr(new PrintWriter(err, true));
        return line;
    }

    /**
     * One command's spec. {@code arguments}: the label of its positional arguments ({@code <id>...}
     * for any number, else exactly one), or null for none.
     */
    private static CommandSpec spec(String name, Handler handler, List<String> synopsis, List<String> description, List<Opt> options,
            String arguments) {
        CommandSpec spec = handler == null ? CommandSpec.create() : CommandSpec.wrapWithoutInspection(handler);
        spec.name(name);
        spec.usageMessage().synopsisHeading("usage: fenced-jobs ").customSynopsis(synopsis.toArray(String[]::new))
                .descriptionHeading("%n").description(description.toArray(String[]::new)).parameterListHeading("%narguments:%n")
                .optionListHeading("%noptions:%n").commandListHeading("%ncommands:%n").width(WIDTH);
        spec.addOption(OptionSpec.builder("-h", "--help").usageHelp(true).description("show this and stop").build());
        for (Opt o : options) {
            OptionSpec.Builder b = OptionSpec.builder("--" + o.name()).description(o.description());
            if (o.label() == null) {
                b.arity("0").type(boolean.class);
            } else {
                b.paramLabel(o.label()).type(String.class);
            }
            spec.addOption(b.build());
        }
        if (arguments != null) {
            boolean many = arguments.endsWith("...");
            String label = many ? arguments.substring(0, arguments.length() - 3) : arguments;
            spec.addPositional(PositionalParamSpec.builder().paramLabel(label).arity(many ? "0..*" : "1").required(!many)
                    .description(many ? "dead letter ids" : label.equals("<id>") ? "a dead letter id" : label.equals("<resource>") ? "the resource" : "the schedule's name")
                    .type(many ? String[].class : String.class).build());
        }
        return spec;
    }

    int run(String[] args) {
        CommandLine commands = commands();
        String command = args.length > 0 && !args[0].startsWith("-") ? args[0] : null;
        try {
            ParseResult parsed = commands.parseArgs(args);
            if (CommandLine.printHelpIfRequested(parsed)) {
                return 0;
            }
            ParseResult leaf = parsed;
            while (leaf.hasSubcommand()) {
                leaf = leaf.subcommand();
            }
            Handler handler = (Handler) leaf.commandSpec().userObject();
            if (handler == null) {
                // fenced-jobs alone, or a group without its subcommand.
                if (leaf == parsed) {
                    commands.usage(out);
                    return 2;
                }
                throw new UsageException(leaf.commandSpec().name() + ": say " + String.join(", ", leaf.commandSpec().subcommands().keySet()));
            }
            Map<String, String> options = new LinkedHashMap<>();
            for (OptionSpec o : leaf.matchedOptions()) {
                Object value = o.getValue();
                options.put(o.longestName().substring(2), value instanceof Boolean ? "true" : String.valueOf(value));
            }
            List<String> arguments = new ArrayList<>();
            leaf.matchedPositionals().forEach(p -> arguments.addAll(p.stringValues()));
            return handler.run(arguments, options);
        } catch (CommandLine.ParameterException e) {
            return badUsage(e.getCommandLine().getCommandSpec(), describe(e));
        } catch (UsageException | ConfigException e) {
            return badUsage(command == null ? commands.getCommandSpec() : commands.getSubcommands().get(command).getCommandSpec(),
                    e.getMessage());
        } catch (SQLException | RuntimeException e) {
            err.println("fenced-jobs " + command + ": " + Faults.describe(e));
            return 1;
        }
    }

    /** picocli's message for what it refused, with an unknown command named as such and the nearest one suggested. */
    private static String describe(CommandLine.ParameterException e) {
        CommandSpec spec = e.getCommandLine().getCommandSpec();
        String where = spec.parent() == null ? "" : spec.qualifiedName(" ").substring("fenced-jobs ".length()) + ": ";
        if (e instanceof CommandLine.UnmatchedArgumentException u && !u.getUnmatched().isEmpty()
                && !u.getUnmatched().get(0).startsWith("-") && !spec.subcommands().isEmpty()) {
            List<String> nearest = u.getSuggestions();
            return where + "unknown command '" + u.getUnmatched().get(0) + "'"
                    + (nearest.isEmpty() ? "" : " (did you mean " + String.join(" or ", nearest) + "?)");
        }
        if (e instanceof CommandLine.UnmatchedArgumentException u && !u.getSuggestions().isEmpty()) {
            return where + e.getMessage() + " (did you mean " + String.join(" or ", u.getSuggestions()) + "?)";
        }
        return where + e.getMessage();
    }

    /** One line, and the command whose help to read. */
    private int badUsage(CommandSpec spec, String message) {
        err.println("fenced-jobs: " + message);
        err.println("Try '" + spec.qualifiedName(" ") + " --help'.");
        return 2;
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
        Optional<DatabaseConfig> consumerDb = consumerDatabase();
        Bootstrap.migrate(db, consumerDb.orElse(db), 3);
        if (consumerDb.isEmpty()) {
            out.println("Schema up to date on " + db.safeUrl() + " (jobs, lease, outbox; consumer tables)");
        } else {
            out.println("Schema up to date on " + db.safeUrl() + " (jobs, lease, outbox)");
            out.println("Schema up to date on " + consumerDb.get().safeUrl() + " (consumer tables)");
        }
        if (options.containsKey("roles")) {
            Map<String, String> passwords = new HashMap<>();
            for (String role : List.of(Roles.DISPATCHER, Roles.RELAY, Roles.CONSUMER, Roles.PRODUCER)) {
                settings.get(role.toUpperCase(Locale.ROOT) + "_PASSWORD").ifPresent(p -> passwords.put(role, p));
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
                Bootstrap.roles(db, here);
            }
            if (consumerPassword != null) {
                Bootstrap.roles(consumerDb.get(), Map.of(Roles.CONSUMER, consumerPassword));
                out.println("Roles ready: " + String.join(", ", new TreeSet<>(here.keySet())) + (here.isEmpty() ? "" : " on "
                        + db.safeUrl() + "; ") + Roles.CONSUMER + " on " + consumerDb.get().safeUrl());
            } else {
                out.println("Roles ready: " + String.join(", ", new TreeSet<>(passwords.keySet())));
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
        Optional<DatabaseConfig> consumer = consumerDatabase();
        return consumer.isEmpty() ? null : connect(consumer.get());
    }

    /** The consumer's own database, when {@code CONSUMER_DATABASE_URL} says its tables live elsewhere. */
    private Optional<DatabaseConfig> consumerDatabase() {
        if (settings.get("CONSUMER_DATABASE_URL").isEmpty()) {
            return Optional.empty();
        }
        return Optional.of(DatabaseConfig.of(settings.required("CONSUMER_DATABASE_URL"),
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
                Optional<LeaseRow> lease = LeaseRow.of(c, role);
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
            boolean released = Lease.release(DSL.using(c, SQLDialect.POSTGRES), role, holder, token);
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
