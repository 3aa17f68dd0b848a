package dev.fencedjobs.cli;

import dev.fencedjobs.db.internal.JobJourney;
import dev.fencedjobs.runtime.internal.TraceContext;
import java.io.PrintStream;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code fenced-jobs submit|cancel|reschedule|journey}: a job inserted with the same SQL a producer
 * writes, controlled through the job-control functions (migration V9, {@code R__jobs.sql}), which
 * let a producer's login act on its own jobs only, and followed to its effect ({@link JobJourney}).
 */
final class JobCommands {

    private final ScheduleCommands.Connector db;
    /** Where the consumer's tables are (CONSUMER_DATABASE_URL's database when set), for the journey. */
    private final ScheduleCommands.Connector consumerDb;

    private final PrintStream out;
    private final PrintStream err;

    JobCommands(
            ScheduleCommands.Connector db, ScheduleCommands.Connector consumerDb, PrintStream out, PrintStream err) {
        this.db = db;
        this.consumerDb = consumerDb;
        this.out = out;
        this.err = err;
    }

    /** The commands, each at the top level. */
    Object[] commands() {
        return new Object[] {new Submit(), new Cancel(), new Reschedule(), new Journey()};
    }

    @Command(
            name = "submit",
            customSynopsis = "submit --due <when> [--resource <r>] [--payload <json>] [--key <unique key>] "
                    + "[--priority <seconds>] [--dispatch-key <k>] [--traceparent <tp> [--tracestate <ts>]]",
            description = {
                "Insert a job.",
                "<when> is now, an offset from the database clock (+30s, +5m, +2h) or an ISO-8601 time "
                        + "(2026-12-01T09:00:00Z). With --key, submitting the same key again inserts nothing. A priority ranks the job as if "
                        + "it were due that many seconds earlier; a dispatch key names the group limits and fairness count by (docs/dispatch.md). "
                        + "A W3C traceparent puts the job in that trace (docs/tracing.md)."
            })
    final class Submit implements Cli.Action {
        @Option(
                names = "--due",
                required = true,
                paramLabel = "<when>",
                converter = DueTime.Converter.class,
                description = "now, +30s, +5m, +2h or an ISO-8601 time")
        DueTime due;

        @Option(names = "--resource", paramLabel = "<r>", description = "default: default")
        String resource = "default";

        @Option(
                names = "--payload",
                paramLabel = "<json>",
                converter = Json.Converter.class,
                description = "default: {}")
        Json payload = Json.EMPTY;

        @Option(names = "--key", paramLabel = "<unique key>", description = "the job's unique key")
        String key;

        @Option(names = "--priority", paramLabel = "<seconds>", description = "-86400 to 86400; default 0")
        int priority;

        @Option(names = "--dispatch-key", paramLabel = "<k>", description = "default: the resource")
        String dispatchKey;

        @Option(
                names = "--traceparent",
                paramLabel = "<tp>",
                description = "W3C trace context, 00-<trace id>-<parent id>-<flags>")
        String traceparent;

        @Option(names = "--tracestate", paramLabel = "<ts>", description = "W3C tracestate, with --traceparent")
        String tracestate;

        @Override
        public int run() throws SQLException {
            return submit(this);
        }
    }

    /** The job a command names: by id or by unique key, exactly one of them. */
    static final class JobRef {
        @Option(names = "--id", required = true, paramLabel = "<job id>", description = "the job's id")
        Long id;

        @Option(names = "--key", required = true, paramLabel = "<unique key>", description = "the job's unique key")
        String key;

        Object value() {
            return id != null ? id : key;
        }
    }

    @Command(
            name = "cancel",
            customSynopsis = "cancel (--id <job id> | --key <unique key>)",
            description = {
                "Cancel a pending job: it is never completed.",
                "Cancelling a job already completed fails and says so; "
                        + "cancelling a cancelled job again changes nothing. Run as a producer's login, only its own jobs."
            })
    final class Cancel implements Cli.Action {
        @ArgGroup(exclusive = true, multiplicity = "1")
        JobRef job;

        @Override
        public int run() throws SQLException {
            return cancel(job);
        }
    }

    @Command(
            name = "journey",
            customSynopsis = "journey (--id <job id> | --key <unique key>)",
            description = {
                "One job's way to its effect: its row, its outbox row and whether the relay has published it, and what "
                        + "the consumer did with it (its tables in CONSUMER_DATABASE_URL's database when set).",
                "Run as the owner or a login that may " + "read jobs and outbox."
            })
    final class Journey implements Cli.Action {
        @ArgGroup(exclusive = true, multiplicity = "1")
        JobRef job;

        @Override
        public int run() throws SQLException {
            return journey(job);
        }
    }

    @Command(
            name = "reschedule",
            customSynopsis = "reschedule (--id <job id> | --key <unique key>) [--due <when>] [--priority <seconds>]",
            description = {
                "Move a pending job's due time, change its priority, or both.",
                "<when> as for submit. Fails for a completed or " + "cancelled job."
            })
    final class Reschedule implements Cli.Action {
        @ArgGroup(exclusive = true, multiplicity = "1")
        JobRef job;

        @ArgGroup(exclusive = false, multiplicity = "1")
        Change change;

        @Override
        public int run() throws SQLException {
            return reschedule(job, change);
        }
    }

    /** What a reschedule changes: at least one of them. */
    static final class Change {
        @Option(
                names = "--due",
                paramLabel = "<when>",
                converter = DueTime.Converter.class,
                description = "now, +30s, +5m, +2h or an ISO-8601 time")
        DueTime due;

        @Option(names = "--priority", paramLabel = "<seconds>", description = "-86400 to 86400")
        Integer priority;
    }

    private int submit(Submit s) throws SQLException {
        DueTime when = s.due;
        String resource = s.resource;
        String key = s.key;
        // The policy's columns only when given: a producer on a database before V11 still submits.
        boolean policy = s.priority != 0 || s.dispatchKey != null;
        // And the trace context only when given, for a database before V12.
        boolean traced = s.traceparent != null;
        if (s.tracestate != null && !traced) {
            err.println("fenced-jobs submit: --tracestate needs --traceparent");
            return 2;
        }
        try (Connection c = db.connect();
                PreparedStatement ps = c.prepareStatement("INSERT INTO jobs (resource, payload, due_at, unique_key"
                        + (policy ? ", priority, dispatch_key" : "")
                        + (traced ? ", traceparent, tracestate" : "") + ") VALUES (?, ?::jsonb, " + when.sql() + ", ?"
                        + (policy ? ", ?, ?" : "")
                        + (traced ? ", ?, ?" : "") + ") ON CONFLICT (unique_key) DO NOTHING RETURNING id")) {
            ps.setString(1, resource);
            ps.setString(2, s.payload.text());
            int next = 3;
            if (when.absolute() != null) {
                ps.setObject(next++, when.absolute());
            } else {
                ps.setLong(next++, when.offset().toMillis());
            }
            ps.setString(next++, key);
            if (policy) {
                ps.setInt(next++, s.priority);
                ps.setString(next++, s.dispatchKey);
            }
            if (traced) {
                ps.setString(next++, s.traceparent);
                ps.setString(next, s.tracestate);
            }
            // A producer's login reads jobs only through my_jobs (its own), and of jobs only id and unique_key.
            try (ResultSet rs = ps.executeQuery()) {
                if (rs.next()) {
                    long id = rs.getLong(1);
                    try (PreparedStatement due = c.prepareStatement("SELECT due_at FROM my_jobs WHERE id = ?")) {
                        due.setLong(1, id);
                        try (ResultSet d = due.executeQuery()) {
                            out.println("Submitted job " + id + " for resource " + resource
                                    + (d.next() ? ", due " + d.getObject(1, OffsetDateTime.class) : ""));
                        }
                    }
                    return 0;
                }
            }
            try (PreparedStatement existing = c.prepareStatement(
                    "SELECT j.id, m.state FROM jobs j LEFT JOIN my_jobs m ON m.id = j.id WHERE j.unique_key = ?")) {
                existing.setString(1, key);
                try (ResultSet rs = existing.executeQuery()) {
                    rs.next();
                    String state = rs.getString(2);
                    out.println("Already submitted: job " + rs.getLong(1) + " has key " + key
                            + (state == null ? " (another login's)" : " (" + state + ")") + "; nothing inserted");
                    return 0;
                }
            }
        }
    }

    @SuppressWarnings("unchecked")
    private int journey(JobRef job) throws SQLException {
        Optional<Map<String, Object>> found;
        try (Connection c = db.connect();
                Connection consumer = consumerDb.connect()) {
            found = JobJourney.read(c, consumer, job.id, job.key);
        }
        if (found.isEmpty()) {
            err.println("No job " + (job.id != null ? "with id " + job.id : "with key " + job.key));
            return 1;
        }
        Map<String, Object> j = (Map<String, Object>) found.get().get("job");
        out.println("Job " + j.get("id") + (j.get("unique_key") == null ? "" : " (key " + j.get("unique_key") + ")")
                + ", resource " + j.get("resource") + ": " + j.get("state"));
        out.println("  created    " + j.get("created_at") + ", due " + j.get("due_at"));
        if (j.get("completed_at") != null) {
            out.println("  completed  " + j.get("completed_at") + " with token " + j.get("completed_by_token"));
        }
        if (j.get("cancelled_at") != null) {
            out.println("  cancelled  " + j.get("cancelled_at"));
        }
        if (j.get("traceparent") != null) {
            String traceparent = (String) j.get("traceparent");
            out.println("  trace      " + TraceContext.of(traceparent, null).traceId() + " (traceparent " + traceparent
                    + ")");
        }
        Object outbox = found.get().get("outbox");
        if (outbox instanceof Map<?, ?> o) {
            out.println("  outbox     row " + o.get("id") + ", token " + o.get("fencing_token") + ": "
                    + (o.get("publish_error") != null
                            ? "never published: " + o.get("publish_error")
                            : Boolean.TRUE.equals(o.get("published"))
                                    ? "published (the relay's position has passed it)"
                                    : "waiting for the relay"));
        } else {
            out.println("  outbox     " + outbox);
        }
        Object consumer = found.get().get("consumer");
        if (consumer instanceof Map<?, ?> parts) {
            parts.forEach((kind, value) -> {
                if (value instanceof Map<?, ?> p) {
                    out.println("  consumer   " + p.get("outcome") + " with token " + p.get("fencing_token") + " at "
                            + p.get("processed_at"));
                } else if (value instanceof List<?> rows) {
                    rows.forEach(row -> out.printf("  %-10s %s%n", kind, row));
                } else {
                    out.println("  consumer   " + value);
                }
            });
        } else {
            out.println("  consumer   " + consumer);
        }
        return 0;
    }

    private int cancel(JobRef job) throws SQLException {
        try (Connection c = db.connect()) {
            long id = controlled(c, (job.id != null ? "cancel_job(?)" : "cancel_job_by_key(?)"), job, null);
            try (PreparedStatement ps = c.prepareStatement("SELECT cancelled_at FROM my_jobs WHERE id = ?")) {
                ps.setLong(1, id);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    out.println("Job " + id + " is cancelled (since " + rs.getObject(1, OffsetDateTime.class)
                            + "); it will not be completed");
                    return 0;
                }
            }
        } catch (SQLException e) {
            return refused("cancel", e);
        }
    }

    private int reschedule(JobRef job, Change change) throws SQLException {
        DueTime when = change.due;
        try (Connection c = db.connect()) {
            String due = when == null ? "NULL::timestamptz" : when.sql();
            String call = (job.id != null ? "reschedule_job(?, " : "reschedule_job_by_key(?, ")
                    + due
                    + (change.priority == null ? ")" : ", " + change.priority + ")");
            long id = controlled(c, call, job, when);
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT due_at" + (change.priority == null ? "" : ", priority") + " FROM my_jobs WHERE id = ?")) {
                ps.setLong(1, id);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    out.println("Job " + id + " is now due " + rs.getObject(1, OffsetDateTime.class)
                            + (change.priority == null ? "" : ", priority " + rs.getInt(2) + " s"));
                    return 0;
                }
            }
        } catch (SQLException e) {
            return refused("reschedule", e);
        }
    }

    /** Calls one of the job-control functions (migration V9), which returns the job's id. */
    private static long controlled(Connection c, String call, JobRef job, DueTime when) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("SELECT " + call)) {
            ps.setObject(1, job.value());
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
            err.println("fenced-jobs " + command + ": "
                    + (newline < 0 ? message : message.substring(0, newline)).replaceFirst("^ERROR: ", ""));
            return 1;
        }
        throw e;
    }
}
