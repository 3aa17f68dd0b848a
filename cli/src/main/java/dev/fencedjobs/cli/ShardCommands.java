package dev.fencedjobs.cli;

import dev.fencedjobs.db.internal.Shards;
import java.io.PrintStream;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/**
 * {@code fenced-jobs shards show|set}: the shard map (migration V13, R__shards.sql, docs/shards.md)
 * as an operator reads and changes it; the same as the SQL functions {@code shards_set} and
 * {@code shards_switch}.
 */
public final class ShardCommands {

    /** How often {@code set} asks for the switch while the map drains. */
    private static final Duration SWITCH_EVERY = Duration.ofMillis(50);

    private final ScheduleCommands.Connector db;
    private final PrintStream out;

    ShardCommands(ScheduleCommands.Connector db, PrintStream out) {
        this.db = db;
        this.out = out;
    }

    @Command(
            name = "shards",
            customSynopsis = "shards (show | set) ...",
            description = {
                "The shards: who holds each one, and how many there are.",
                "Each job belongs to the shard of its resource; each shard has a scheduler lease and a relay lease of its own, "
                        + "and the live replicas share them."
            })
    static final class Group {}

    /** The commands, under {@code shards}. */
    CommandLine commands() {
        return new CommandLine(new Group()).addSubcommand(new Show()).addSubcommand(new Set());
    }

    @Command(
            name = "show",
            customSynopsis = "shards show",
            description =
                    "The map in force, and per shard: the holder and token of its scheduler and relay leases, its due "
                            + "jobs and its unpublished outbox rows (each up to 100,000).")
    final class Show implements Cli.Action {
        @Override
        public int run() throws SQLException {
            try (Connection c = db.connect()) {
                show(c, out);
            }
            return 0;
        }
    }

    /** What {@code shards show} prints: the map, and each shard's leases, due jobs and unpublished rows. */
    public static void show(Connection c, PrintStream out) throws SQLException {
        Shards.ShardMap map = Shards.read(c);
        out.println("shard map generation " + map.generation() + ": " + map.count() + " shard"
                + (map.count() == 1 ? "" : "s")
                + (map.draining() ? ", draining to " + map.target() + " (nothing completes until the switch)" : ""));
        out.printf(
                "%-6s %-28s %-28s %10s %12s%n",
                "shard", "scheduler (holder token)", "relay (holder token)", "due", "unpublished");
        try (PreparedStatement ps = c.prepareStatement(SHOW);
                ResultSet rs = ps.executeQuery()) {
            while (rs.next()) {
                out.printf(
                        "%-6d %-28s %-28s %10d %12d%n",
                        rs.getInt(1),
                        holder(rs.getString(2), rs.getObject(3), rs.getBoolean(4)),
                        holder(rs.getString(5), rs.getObject(6), rs.getBoolean(7)),
                        rs.getLong(8),
                        rs.getLong(9));
            }
        }
    }

    private static String holder(String holder, Object token, boolean live) {
        if (holder == null) {
            return "(never held)";
        }
        String shortHolder = holder.length() > 16 ? holder.substring(0, 16) : holder;
        return live ? shortHolder + " " + token : "(none; last " + token + ")";
    }

    /** Per shard of the map in force: each lease as it stands, the due jobs (capped) and the unpublished rows. */
    static final String SHOW =
            "SELECT s, sl.holder_id, sl.fencing_token, coalesce(sl.expires_at > clock_timestamp(), false),"
                    + " rl.holder_id, rl.fencing_token, coalesce(rl.expires_at > clock_timestamp(), false),"
                    + " (SELECT count(*) FROM (SELECT 1 FROM jobs j WHERE j.state = 'pending' AND j.shard = s AND j.due_at <= clock_timestamp()"
                    + " LIMIT 100000) d),"
                    + " (SELECT count(*) FROM (SELECT 1 FROM outbox o WHERE o.shard = s AND o.id > coalesce((SELECT p.published_through"
                    + " FROM outbox_position p WHERE p.role = shard_role('relay', s)), 0) LIMIT 100000) u)"
                    + " FROM unnest(shard_list()) s"
                    + " LEFT JOIN leader_lease sl ON sl.role = shard_role('scheduler', s)"
                    + " LEFT JOIN leader_lease rl ON rl.role = shard_role('relay', s) ORDER BY s";

    /** The time the next call of the switch is given: longer after a call that ran out of it (Shards.longerSwitchTimeout). */
    private Duration switchTimeout = Shards.SWITCH_TIMEOUT;

    /**
     * Runs {@code shards_switch()}; null when it could not have a lock (SQLSTATE 55P03: a long
     * producer transaction or a purge held the jobs table, or a batch its lease row) or ran out of
     * its time (57014: the next call is given twice as long), to be tried again after a pause.
     */
    private Shards.Switch switchOrWait(Connection c) throws SQLException {
        try {
            return Shards.trySwitch(c, switchTimeout);
        } catch (SQLException e) {
            if ("55P03".equals(e.getSQLState())) {
                pause();
                return null;
            }
            if ("57014".equals(e.getSQLState())) {
                switchTimeout = Shards.longerSwitchTimeout(switchTimeout);
                return null;
            }
            throw e;
        }
    }

    private static void pause() {
        try {
            Thread.sleep(SWITCH_EVERY.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Command(
            name = "set",
            customSynopsis = "shards set <count> [--wait <duration>]",
            description = {
                "Change the number of shards, online.",
                "The map drains: no job completes until the relays have published every record of the map in force; then the new "
                        + "count is put in force, pending jobs move to their new shards, and every scheduler lease ends, so that each "
                        + "shard's next token is above every token before. Waits for the switch (the dispatcher that holds shard 0 also "
                        + "makes it, so a drain finishes without this command). Giving the count in force cancels a drain."
            })
    final class Set implements Cli.Action {
        @Parameters(paramLabel = "<count>", description = "1 to 256")
        int count;

        @Option(
                names = "--wait",
                paramLabel = "<duration>",
                defaultValue = "PT60S",
                description = "how long to wait for the switch (ISO-8601, default PT60S)")
        Duration wait;

        @Override
        public int run() throws SQLException {
            if (count < 1 || count > 256) {
                throw new Cli.UsageException("shards set: a shard count is between 1 and 256, not " + count);
            }
            try (Connection c = db.connect()) {
                Shards.ShardMap before = Shards.read(c);
                try (PreparedStatement ps = c.prepareStatement("SELECT target_count FROM shards_set(?)")) {
                    ps.setInt(1, count);
                    ps.execute();
                }
                if (before.count() == count) {
                    out.println(
                            before.draining()
                                    ? "Cancelled the drain to " + before.target() + ": " + count
                                            + " shards stay in force"
                                    : "The map has " + count + " shards already; nothing to do");
                    return 0;
                }
                out.println("Draining: no job completes until every record of the " + before.count()
                        + "-shard map is published");
                long deadline = System.nanoTime() + wait.toNanos();
                long started = System.nanoTime();
                int waiting = 0;
                while (System.nanoTime() - deadline < 0) {
                    Shards.Switch r = switchOrWait(c);
                    if (r == null) {
                        continue;
                    }
                    if (r.count() == count && r.target() == null) {
                        // Switched here, or already by the dispatcher that holds shard 0.
                        out.printf(
                                "Switched to %d shards (generation %d) after %d ms%s%n",
                                count,
                                r.generation(),
                                Duration.ofNanos(System.nanoTime() - started).toMillis(),
                                r.switched() ? "; " + r.moved() + " pending jobs moved to another shard" : "");
                        return 0;
                    }
                    if (r.target() == null) {
                        throw new Cli.UsageException(
                                "shards set: the map was changed meanwhile to " + r.count() + " shards");
                    }
                    waiting = r.waiting();
                    pause();
                    if (Thread.currentThread().isInterrupted()) {
                        break;
                    }
                }
                out.println("Still draining after " + wait + ": " + waiting
                        + " shard(s) of the old map have records to publish "
                        + "(is a relay running?). Nothing completes meanwhile; the dispatcher that holds shard 0 switches as soon as "
                        + "they are published. `fenced-jobs shards set " + before.count() + "` cancels the drain.");
                return 1;
            }
        }
    }
}
