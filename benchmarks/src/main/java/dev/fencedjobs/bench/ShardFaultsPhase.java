package dev.fencedjobs.bench;

import dev.fencedjobs.cli.ShardCommands;
import dev.fencedjobs.db.internal.Shards;
import dev.fencedjobs.lease.HolderId;
import dev.fencedjobs.testing.ServiceProcess;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;

/**
 * The shards' faults end to end (docs/shards.md), under a steady load of jobs due now, on a stack of
 * two dispatcher replicas and {@code -Dshards=} shards (at least 2):
 *
 * <ul>
 *   <li>{@code shard-kill}: SIGKILL of one dispatcher replica. The due-to-effect latency of the jobs
 *       of the shards it did not hold, in the seconds after the kill, beside the same figure for the
 *       same shards in as many seconds with no kill just before; and of the jobs of the shards it
 *       held, which wait for their takeover.
 *   <li>{@code reshard}: the shard count changed online, from the stack's count to twice it, then to
 *       half of it, then back (4: 8, 2, 4): how long the change took (set to in force), and the due-to-effect latency of
 *       the jobs due meanwhile (those whose resource moves to another shard, and the others), beside
 *       as many seconds with no change just before; every job applied once.
 * </ul>
 */
final class ShardFaultsPhase {

    private final BenchStack stack;
    private final E2eReport report;
    private final int trials;
    /** Jobs inserted a second (due at once, over {@link BenchStack#RESOURCES} resources). */
    private final int rate;
    /** How long each measured window lasts: after the kill, and the same with no kill before it. */
    private final Duration window;

    ShardFaultsPhase(BenchStack stack, E2eReport report, int trials, int rate, Duration window) {
        this.stack = stack;
        this.report = report;
        this.trials = trials;
        this.rate = rate;
        this.window = window;
    }

    /** The load, as the failover phase makes it: a batch of due jobs every 10 ms. */
    private Thread load(AtomicBoolean stop) {
        int perTick = Math.max(1, rate / 100);
        Thread t = new Thread(
                () -> {
                    try (Connection c = stack.owner();
                            Statement s = c.createStatement()) {
                        long next = System.nanoTime();
                        while (!stop.get()) {
                            s.executeUpdate(String.format(BenchStack.INSERT_DUE, perTick));
                            next += TimeUnit.MILLISECONDS.toNanos(10);
                            long wait = next - System.nanoTime();
                            if (wait > 0) {
                                TimeUnit.NANOSECONDS.sleep(wait);
                            }
                        }
                    } catch (Exception e) {
                        System.err.println("shard phase load: " + e);
                    }
                },
                "shard-phase-load");
        t.start();
        return t;
    }

    /** SIGKILL of one of two dispatcher replicas, {@code trials} times. */
    void kill() throws Exception {
        int shards = shardCount();
        System.out.printf(
                Locale.ROOT,
                "9. SIGKILL of one of 2 dispatcher replicas sharing %d shards, %d trials, %,d jobs/s due now;"
                        + " due-to-effect of the jobs due in the %d s after the kill, beside the %d s before it%n",
                shards,
                trials,
                rate,
                window.toSeconds(),
                window.toSeconds());
        AtomicBoolean stop = new AtomicBoolean();
        Thread load = load(stop);
        warmUp();
        List<long[]> quiet = new ArrayList<>(); // per trial: first, last job id of the window with no kill
        List<long[]> killed = new ArrayList<>();
        List<Set<Integer>> victimShards = new ArrayList<>();
        List<Double> takeovers = new ArrayList<>();
        try {
            for (int trial = 0; trial < trials; trial++) {
                String victim = trial % 2 == 0 ? "dispatcher-1" : "dispatcher-2";
                awaitBalanced(shards);
                Set<Integer> held = heldBy(stack.services().get(victim).pid());
                long a = maxJob();
                Thread.sleep(window.toMillis());
                long b = maxJob();
                // A takeover draws a token above every one of the family: the first job with one is the successor's.
                long tokens = stack.scalar(
                        "SELECT coalesce(max(fencing_token), 0) FROM leader_lease WHERE role LIKE 'scheduler%'");
                long signalledAt = System.currentTimeMillis();
                stack.services().get(victim).kill();
                Thread.sleep(window.toMillis());
                long c = maxJob();
                quiet.add(new long[] {a, b});
                killed.add(new long[] {b, c});
                victimShards.add(held);
                // The takeover: the first job of a shard it held completed after the kill.
                double takeover =
                        stack.scalar("SELECT coalesce((extract(epoch FROM min(completed_at)) * 1000)::bigint, 0)"
                                        + " FROM jobs WHERE id > " + b + " AND completed_by_token > " + tokens
                                        + " AND shard IN "
                                        + in(held))
                                - signalledAt;
                takeovers.add(takeover);
                System.out.printf(
                        Locale.ROOT,
                        "   trial %d: killed %s holding shards %s; its shards' first job after %.0f ms%n",
                        trial + 1,
                        victim,
                        held,
                        takeover);
                stack.restart(victim);
            }
            awaitBalanced(shards);
        } finally {
            stop.set(true);
            load.join();
        }
        awaitApplied(quiet.get(0)[0], killed.get(killed.size() - 1)[1]);
        try (Connection c = stack.owner();
                Statement s = c.createStatement()) {
            double[] others = latency(s, killed, victimShards, false);
            double[] othersQuiet = latency(s, quiet, victimShards, false);
            double[] victims = latency(s, killed, victimShards, true);
            System.out.printf(
                    Locale.ROOT,
                    "   shards it did not hold: p99 %.1f ms (max %.1f, %,d jobs); the same shards with no kill: p99 %.1f ms"
                            + " (max %.1f, %,d jobs); %.2f x%n",
                    others[2],
                    others[3],
                    (long) others[0],
                    othersQuiet[2],
                    othersQuiet[3],
                    (long) othersQuiet[0],
                    others[2] / othersQuiet[2]);
            System.out.printf(
                    Locale.ROOT,
                    "   shards it held: p99 %.1f ms (max %.1f, %,d jobs); their takeover %s%n",
                    victims[2],
                    victims[3],
                    (long) victims[0],
                    E2eReport.summary(takeovers));
            report.row(
                    "9. SIGKILL of one of 2 dispatchers (" + shards + " shards): jobs of the shards it did not hold",
                    String.format(Locale.ROOT, "p99 %.1f / max %.1f ms", others[2], others[3]),
                    String.format(
                            Locale.ROOT,
                            "the same shards with no kill, just before: p99 %.1f / max %.1f ms (%.2f x)",
                            othersQuiet[2],
                            othersQuiet[3],
                            others[2] / othersQuiet[2]));
            report.row(
                    "9. SIGKILL of one of 2 dispatchers (" + shards + " shards): jobs of the shards it held",
                    String.format(Locale.ROOT, "p99 %.1f / max %.1f ms", victims[2], victims[3]),
                    "their takeover " + E2eReport.summary(takeovers));
            report.put("shardKillOthersP99Ms", others[2]);
            report.put("shardKillOthersQuietP99Ms", othersQuiet[2]);
            report.put("shardKillHeldP99Ms", victims[2]);
            report.put("shardKillTakeoverMs", takeovers);
        }
    }

    /**
     * What a change of count that did not come into force left behind, printed before the failure:
     * the shards as {@code fenced-jobs shards show} prints them, the sessions that wait or run long,
     * and the services' warnings and errors since the change was asked for (a CI run keeps only
     * what the benchmark prints).
     */
    private void whyNoSwitch(long askedAtMillis) {
        System.out.println("   the change did not come into force; the shards now:");
        try (Connection c = stack.owner();
                Statement st = c.createStatement()) {
            ShardCommands.show(c, System.out);
            System.out.println("   sessions waiting, or in a statement or transaction for over a second:");
            try (ResultSet rs = st.executeQuery("SELECT pid, application_name, state, wait_event_type, wait_event,"
                    + " round(extract(epoch FROM clock_timestamp() - xact_start)::numeric, 1), left(query, 120)"
                    + " FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    + " AND (wait_event_type = 'Lock' OR clock_timestamp() - xact_start > interval '1 second')")) {
                while (rs.next()) {
                    System.out.printf(
                            Locale.ROOT,
                            "     %d %s %s %s/%s %s s: %s%n",
                            rs.getInt(1),
                            rs.getString(2),
                            rs.getString(3),
                            rs.getString(4),
                            rs.getString(5),
                            rs.getString(6),
                            String.valueOf(rs.getString(7)).replace('\n', ' '));
                }
            }
        } catch (SQLException e) {
            System.out.println("   (could not read them: " + e + ")");
        }
        String since = Instant.ofEpochMilli(askedAtMillis).toString();
        System.out.println("   the services' warnings and errors since the change was asked for (" + since + "):");
        try (var files = Files.list(stack.logs())) {
            for (Path log : files.sorted().toList()) {
                List<String> lines = Files.readAllLines(log).stream()
                        .filter(l -> (l.contains(" WARN ") || l.contains(" ERROR ")) && l.compareTo(since) >= 0)
                        .toList();
                for (String l : lines.subList(Math.max(0, lines.size() - 15), lines.size())) {
                    System.out.println(
                            "     " + log.getFileName() + ": " + (l.length() > 300 ? l.substring(0, 300) : l));
                }
            }
        } catch (IOException e) {
            System.out.println("   (could not read them: " + e + ")");
        }
    }

    /** The shard count from the stack's to twice it, to half of it, and back, under load (4: 8, 2, 4). */
    void reshard() throws Exception {
        int from = shardCount();
        List<Integer> steps = List.of(from * 2, Math.max(1, from / 2), from);
        System.out.printf(
                Locale.ROOT,
                "10. the shard count changed online %d -> %s, %,d jobs/s due now; due-to-effect of the jobs due during"
                        + " each change, beside %d s with no change before it%n",
                from,
                steps.stream().map(String::valueOf).collect(Collectors.joining(" -> ")),
                rate,
                window.toSeconds());
        AtomicBoolean stop = new AtomicBoolean();
        Thread load = load(stop);
        warmUp();
        List<Map<String, Object>> changes = new ArrayList<>();
        try (Connection c = stack.owner();
                Statement s = c.createStatement()) {
            int count = from;
            for (int to : steps) {
                awaitBalanced(count);
                long a = maxJob();
                Thread.sleep(window.toMillis());
                long b = maxJob();
                long started = System.nanoTime();
                s.execute("SELECT shards_set(" + to + ")");
                long asked = System.currentTimeMillis();
                try {
                    BenchStack.waitFor(
                            "the map of " + to + " shards in force",
                            () -> {
                                try (Connection c2 = stack.owner()) {
                                    Shards.ShardMap map = Shards.read(c2);
                                    return !map.draining() && map.count() == to;
                                } catch (SQLException e) {
                                    return false;
                                }
                            },
                            Duration.ofMinutes(2));
                } catch (IllegalStateException e) {
                    whyNoSwitch(asked);
                    throw e;
                }
                double switchMs = (System.nanoTime() - started) / 1e6;
                // The jobs due from the change's start to a second after it is in force.
                Thread.sleep(1000);
                long d = maxJob();
                awaitApplied(a, d);
                String moving = "shard_of(j.resource, " + count + ") <> shard_of(j.resource, " + to + ")";
                double[] moved = percentiles(s, b, d, moving);
                double[] stayed = percentiles(s, b, d, "NOT (" + moving + ")");
                double[] quiet = percentiles(s, a, b, "true");
                long applied = BenchStack.scalar(
                        s, "SELECT count(DISTINCT job_id) FROM ledger WHERE job_id > " + a + " AND job_id <= " + d);
                long effects =
                        BenchStack.scalar(s, "SELECT count(*) FROM ledger WHERE job_id > " + a + " AND job_id <= " + d);
                System.out.printf(
                        Locale.ROOT,
                        "   %d -> %d shards: in force after %.0f ms; jobs due meanwhile whose resource moves: p99 %.1f ms"
                                + " (max %.1f, %,d jobs), the others: p99 %.1f ms (max %.1f, %,d jobs); no change:"
                                + " p99 %.1f ms (max %.1f); %,d jobs, %,d effects%n",
                        count,
                        to,
                        switchMs,
                        moved[2],
                        moved[3],
                        (long) moved[0],
                        stayed[2],
                        stayed[3],
                        (long) stayed[0],
                        quiet[2],
                        quiet[3],
                        d - a,
                        effects);
                if (applied != d - a || effects != applied) {
                    throw new IllegalStateException("resharding " + count + " -> " + to + ": " + (d - a) + " jobs, "
                            + applied + " applied, " + effects + " effects");
                }
                Map<String, Object> change = new LinkedHashMap<>();
                change.put("from", count);
                change.put("to", to);
                change.put("inForceMs", Math.round(switchMs));
                change.put("movingP99Ms", BenchStack.round(moved[2]));
                change.put("movingMaxMs", BenchStack.round(moved[3]));
                change.put("stayingP99Ms", BenchStack.round(stayed[2]));
                change.put("noChangeP99Ms", BenchStack.round(quiet[2]));
                changes.add(change);
                report.row(
                        "10. resharding " + count + " -> " + to + " under load: jobs whose resource moves",
                        String.format(Locale.ROOT, "p99 %.1f / max %.1f ms", moved[2], moved[3]),
                        String.format(
                                Locale.ROOT,
                                "in force after %.0f ms; the others p99 %.1f ms; no change p99 %.1f ms",
                                switchMs,
                                stayed[2],
                                quiet[2]));
                count = to;
            }
        } finally {
            stop.set(true);
            load.join();
        }
        report.put("reshard", changes);
    }

    /** Ten seconds of the load before anything is measured: the first window after a start is no baseline. */
    private static void warmUp() throws InterruptedException {
        Thread.sleep(10_000);
    }

    private static double[] percentiles(Statement s, long after, long through, String condition) throws SQLException {
        return BenchSql.dueToEffect(s, "l.job_id > " + after + " AND l.job_id <= " + through + " AND " + condition);
    }

    /** Due-to-effect of the jobs in the windows, of the victim's shards in each or of the others. */
    private static double[] latency(Statement s, List<long[]> windows, List<Set<Integer>> victimShards, boolean held)
            throws SQLException {
        List<String> parts = new ArrayList<>();
        for (int i = 0; i < windows.size(); i++) {
            parts.add("(j.id > " + windows.get(i)[0] + " AND j.id <= " + windows.get(i)[1] + " AND "
                    + (held ? "" : "NOT ") + "j.shard IN " + in(victimShards.get(i)) + ")");
        }
        return BenchSql.dueToEffect(s, String.join(" OR ", parts));
    }

    private static String in(Set<Integer> shards) {
        return shards.isEmpty()
                ? "(-1)"
                : "(" + shards.stream().map(String::valueOf).collect(Collectors.joining(", ")) + ")";
    }

    private int shardCount() throws SQLException {
        try (Connection c = stack.owner()) {
            return Shards.read(c).count();
        }
    }

    private long maxJob() {
        return stack.scalar("SELECT coalesce(max(id), 0) FROM jobs");
    }

    /** Until every job after {@code after} through {@code through} has its effect (the bench's ids have no gaps). */
    private void awaitApplied(long after, long through) throws InterruptedException {
        BenchStack.waitFor(
                "every job through " + through + " applied",
                () -> stack.scalar("SELECT count(DISTINCT job_id) FROM ledger WHERE job_id > " + after
                                + " AND job_id <= " + through)
                        == through - after,
                Duration.ofMinutes(2));
    }

    /** The shards whose scheduler lease the process {@code pid} holds now. */
    private Set<Integer> heldBy(long pid) throws SQLException {
        Set<Integer> held = new TreeSet<>();
        for (Map.Entry<Integer, Long> e : holders().entrySet()) {
            if (e.getValue() == pid) {
                held.add(e.getKey());
            }
        }
        return held;
    }

    /** Each shard's live scheduler lease holder's pid. */
    private Map<Integer, Long> holders() throws SQLException {
        Map<Integer, Long> holders = new HashMap<>();
        try (Connection c = stack.owner();
                Statement s = c.createStatement();
                ResultSet r = s.executeQuery("SELECT s, l.holder_id FROM unnest(shard_list()) s"
                        + " JOIN leader_lease l ON l.role = shard_role('scheduler', s)"
                        + " WHERE l.expires_at > clock_timestamp()")) {
            while (r.next()) {
                holders.put(r.getInt(1), HolderId.pid(r.getString(2)));
            }
        }
        return holders;
    }

    /** Until both dispatcher replicas are ready and every shard is held, split as evenly as it can be. */
    private void awaitBalanced(int shards) throws InterruptedException {
        stack.awaitAllReady(Duration.ofSeconds(60));
        BenchStack.waitFor(
                "both dispatchers holding their share of " + shards + " shards",
                () -> {
                    try {
                        Map<Integer, Long> holders = holders();
                        if (holders.size() != shards) {
                            return false;
                        }
                        int share = (shards + 1) / 2;
                        for (String name : List.of("dispatcher-1", "dispatcher-2")) {
                            ServiceProcess p = stack.services().get(name);
                            long n = holders.values().stream()
                                    .filter(pid -> pid == p.pid())
                                    .count();
                            if (n < shards / 2 || n > share) {
                                return false;
                            }
                        }
                        return true;
                    } catch (SQLException e) {
                        return false;
                    }
                },
                Duration.ofSeconds(60));
    }
}
