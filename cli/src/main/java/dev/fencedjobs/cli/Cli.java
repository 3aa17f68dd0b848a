package dev.fencedjobs.cli;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.Lease;
import dev.fencedjobs.lease.LeaseRow;
import dev.fencedjobs.runtime.internal.Faults;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.nio.charset.Charset;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;
import org.jooq.SQLDialect;
import org.jooq.impl.DSL;
import picocli.CommandLine;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.ITypeConverter;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Model.PositionalParamSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.ParseResult;

/**
 * {@code fenced-jobs <command>}: the operator's tool. Exit codes: 0 done, 1 failed (the database
 * refused or could not be reached, or nothing was released), 2 bad usage.
 *
 * <p>Each command is a picocli {@code @Command} class whose options are typed fields (a job id is
 * a {@code long}, a due time a {@link DueTime}, a payload {@link Json}); picocli converts and
 * checks them, and the command's {@link Action} runs with them. {@code migrate}, {@code status}
 * and {@code release} are here; the job commands are in {@link JobCommands}, the groups in
 * {@link ScheduleCommands}, {@link LimitCommands}, {@link PauseCommands}, {@link DeadLetterCommands} and {@link FenceCommands}.
 */
public final class Cli {

    /** A command that runs, with its options already converted into its fields. */
    interface Action {
        int run() throws SQLException;
    }

    /** Wide enough for the synopses as written. */
    private static final int WIDTH = 120;

    static final String FOOTER =
            "The database comes from DATABASE_URL, DATABASE_USER and DATABASE_PASSWORD; the consumer's "
                    + "tables from CONSUMER_DATABASE_URL (and _USER, _PASSWORD) when they live in another database.";

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

    @Command(
            name = "fenced-jobs",
            customSynopsis = "<command> [options]",
            description = {"The operator's tool for fenced-jobs.", "Each command takes --help."},
            footer = {"", FOOTER})
    static final class Root {}

    @Command(
            name = "migrate",
            customSynopsis = "migrate [--roles]",
            description = {
                "Apply the schema.",
                "Jobs, lease and outbox, and the consumer's tables (in CONSUMER_DATABASE_URL's database when it is set). With --roles, also "
                        + "create (or update) the least-privilege roles whose passwords are set: FJ_DISPATCHER_PASSWORD, FJ_RELAY_PASSWORD, "
                        + "FJ_PRODUCER_PASSWORD, and FJ_CONSUMER_PASSWORD (where the consumer's tables are). Run it as the schema owner."
            })
    final class Migrate implements Action {
        @Option(names = "--roles", description = "also create or update the roles whose passwords are set")
        boolean roles;

        @Override
        public int run() throws SQLException {
            return migrate(roles);
        }
    }

    @Command(
            name = "status",
            customSynopsis = "status",
            description = {
                "What runs and how far behind it is.",
                "Leader and token per role, the token history, pending/due/completed jobs, the outbox lag, and the consumer's "
                        + "applied/stale/dead-letter counts."
            })
    final class Status implements Action {
        @Override
        public int run() throws SQLException {
            return status();
        }
    }

    /** The lease a release must still find: both or neither. */
    static final class Expected {
        @Option(names = "--holder", required = true, paramLabel = "<id>", description = "the holder it must still have")
        String holder;

        @Option(
                names = "--token",
                required = true,
                paramLabel = "<n>",
                description = "the token it must still have",
                converter = TokenConverter.class)
        FencingToken token;
    }

    @Command(
            name = "release",
            customSynopsis = "release --role <role> [--holder <id> --token <n>]",
            description = {
                "End a live lease early, so that a follower takes over at once.",
                "Only if it still has that holder and "
                        + "token (default: the current ones). A newer holder's lease is never touched."
            })
    final class Release implements Action {
        @Option(names = "--role", required = true, paramLabel = "<role>", description = "scheduler or relay")
        String role;

        @ArgGroup(exclusive = false)
        Expected expected;

        @Override
        public int run() throws SQLException {
            return release(role, expected);
        }
    }

    /** The command tree. Every command gets {@code -h, --help} and the same layout of its usage. */
    private CommandLine commands() {
        CommandLine root = new CommandLine(new Root());
        root.addSubcommand(new Migrate());
        for (Object command :
                new JobCommands(this::connectDatabase, this::connectConsumerDatabase, out, err).commands()) {
            root.addSubcommand(command);
        }
        root.addSubcommand(new ScheduleCommands(this::connectDatabase, out).commands());
        root.addSubcommand(new LimitCommands(this::connectDatabase, out).commands());
        for (Object command : new PauseCommands(this::connectDatabase, out).commands()) {
            root.addSubcommand(command);
        }
        root.addSubcommand(new ShardCommands(this::connectDatabase, out).commands());
        root.addSubcommand(new DeadLetterCommands(this::connectConsumerDatabase, out).commands());
        root.addSubcommand(new FenceCommands(this::connectConsumerDatabase, out).commands());
        root.addSubcommand(new KeygenCommand(out, err));
        root.addSubcommand(new Status());
        root.addSubcommand(new Release());
        style(root.getCommandSpec());
        root.setOut(new PrintWriter(new OutputStreamWriter(out, Charset.defaultCharset()), true));
        root.setErr(new PrintWriter(new OutputStreamWriter(err, Charset.defaultCharset()), true));
        return root;
    }

    private static void style(CommandSpec spec) {
        spec.usageMessage()
                .synopsisHeading("usage: fenced-jobs ")
                .descriptionHeading("%n")
                .parameterListHeading("%narguments:%n")
                .optionListHeading("%noptions:%n")
                .commandListHeading("%ncommands:%n")
                .width(WIDTH);
        spec.addOption(OptionSpec.builder("-h", "--help")
                .usageHelp(true)
                .description("show this and stop")
                .build());
        spec.subcommands().values().forEach(sub -> style(sub.getCommandSpec()));
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
            if (!(leaf.commandSpec().userObject() instanceof Action action)) {
                // fenced-jobs alone, or a group without its subcommand.
                if (leaf == parsed) {
                    commands.usage(out);
                    return 2;
                }
                throw new UsageException(leaf.commandSpec().name() + ": say "
                        + String.join(", ", leaf.commandSpec().subcommands().keySet()));
            }
            return action.run();
        } catch (CommandLine.ParameterException e) {
            return badUsage(
                    e.getCommandLine().getCommandSpec(), unknownOption(e, args).orElseGet(() -> describe(e)));
        } catch (UsageException | ConfigException e) {
            return badUsage(
                    command == null || !commands.getSubcommands().containsKey(command)
                            ? commands.getCommandSpec()
                            : commands.getSubcommands().get(command).getCommandSpec(),
                    e.getMessage());
        } catch (SQLException | RuntimeException e) {
            err.println("fenced-jobs " + command + ": " + Faults.describe(e));
            return 1;
        }
    }

    /**
     * An option the command does not know, which picocli reports only after a missing required
     * option ({@code submit --du now}): named first, with the options it may have meant.
     */
    private static Optional<String> unknownOption(CommandLine.ParameterException e, String[] args) {
        if (!(e instanceof CommandLine.MissingParameterException)) {
            return Optional.empty();
        }
        CommandSpec spec = e.getCommandLine().getCommandSpec();
        for (String arg : args) {
            String name = arg.split("=", 2)[0];
            if (name.startsWith("--") && !spec.optionsMap().containsKey(name)) {
                List<String> near = spec.optionsMap().keySet().stream()
                        .filter(o -> o.startsWith("--") && (o.startsWith(name) || name.startsWith(o)))
                        .sorted()
                        .toList();
                return Optional.of(spec.qualifiedName(" ").substring("fenced-jobs ".length()) + ": Unknown option: '"
                        + name + "'" + (near.isEmpty() ? "" : " (did you mean " + String.join(" or ", near) + "?)"));
            }
        }
        return Optional.empty();
    }

    /** picocli's message for what it refused, with an unknown command named as such and the nearest one suggested. */
    private static String describe(CommandLine.ParameterException e) {
        CommandSpec spec = e.getCommandLine().getCommandSpec();
        String where = spec.parent() == null ? "" : spec.qualifiedName(" ").substring("fenced-jobs ".length()) + ": ";
        if (e instanceof CommandLine.UnmatchedArgumentException u
                && !u.getUnmatched().isEmpty()
                && !u.getUnmatched().get(0).startsWith("-")
                && !spec.subcommands().isEmpty()) {
            List<String> nearest = u.getSuggestions();
            return where + "unknown command '" + u.getUnmatched().get(0) + "'"
                    + (nearest.isEmpty() ? "" : " (did you mean " + String.join(" or ", nearest) + "?)");
        }
        if (e instanceof CommandLine.UnmatchedArgumentException u
                && !u.getUnmatched().isEmpty()
                && !u.getUnmatched().get(0).startsWith("-")) {
            // A value a list of positional parameters did not take because it does not convert: say why.
            for (PositionalParamSpec p : spec.positionalParameters()) {
                for (ITypeConverter<?> converter : p.converters() == null ? new ITypeConverter<?>[0] : p.converters()) {
                    try {
                        converter.convert(u.getUnmatched().get(0));
                    } catch (Exception refused) {
                        return where + "Invalid value for positional parameter " + p.paramLabel() + ": "
                                + refused.getMessage();
                    }
                }
            }
        }
        String message = e.getMessage().replaceFirst("^Error: ", "");
        if (e instanceof CommandLine.UnmatchedArgumentException u
                && !u.getSuggestions().isEmpty()) {
            return where + message + " (did you mean " + String.join(" or ", u.getSuggestions()) + "?)";
        }
        return where + message;
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

    private int migrate(boolean roles) throws SQLException {
        DatabaseConfig db = database();
        Optional<DatabaseConfig> consumerDb = consumerDatabase();
        Bootstrap.migrate(db, consumerDb.orElse(db), 3);
        if (consumerDb.isEmpty()) {
            out.println("Schema up to date on " + db.safeUrl() + " (jobs, lease, outbox; consumer tables)");
        } else {
            out.println("Schema up to date on " + db.safeUrl() + " (jobs, lease, outbox)");
            out.println("Schema up to date on " + consumerDb.get().safeUrl() + " (consumer tables)");
        }
        if (roles) {
            Map<String, String> passwords = new HashMap<>();
            for (String role : List.of(Roles.DISPATCHER, Roles.RELAY, Roles.CONSUMER, Roles.PRODUCER)) {
                settings.get(role.toUpperCase(Locale.ROOT) + "_PASSWORD").ifPresent(p -> passwords.put(role, p));
            }
            if (passwords.isEmpty()) {
                throw new UsageException(
                        "migrate --roles: set at least one of FJ_DISPATCHER_PASSWORD, FJ_RELAY_PASSWORD, "
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
                out.println("Roles ready: " + String.join(", ", new TreeSet<>(here.keySet()))
                        + (here.isEmpty() ? "" : " on " + db.safeUrl() + "; ") + Roles.CONSUMER + " on "
                        + consumerDb.get().safeUrl());
            } else {
                out.println("Roles ready: " + String.join(", ", new TreeSet<>(passwords.keySet())));
            }
        }
        return 0;
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
        return Optional.of(DatabaseConfig.of(
                        settings.required("CONSUMER_DATABASE_URL"),
                        settings.string("CONSUMER_DATABASE_USER", database().user()),
                        settings.string("CONSUMER_DATABASE_PASSWORD", database().password()))
                .withPoolSize(1));
    }

    private int release(String role, Expected expected) throws SQLException {
        try (Connection c = connect(database())) {
            String holder;
            FencingToken token;
            if (expected == null) {
                Optional<LeaseRow> lease = LeaseRow.of(c, role);
                if (lease.isEmpty()) {
                    err.println("fenced-jobs release: no lease for role " + role);
                    return 1;
                }
                holder = lease.get().holderId();
                token = lease.get().token();
            } else {
                holder = expected.holder;
                token = expected.token;
            }
            boolean released = Lease.release(DSL.using(c, SQLDialect.POSTGRES), role, holder, token);
            if (released) {
                out.println(
                        "Released " + role + " (holder " + holder + ", token " + token + "); followers were notified");
                return 0;
            }
            err.println("fenced-jobs release: nothing released: the lease of " + role + " is not live with holder "
                    + holder + " and token " + token + " (it expired or moved on)");
            return 1;
        }
    }
}
