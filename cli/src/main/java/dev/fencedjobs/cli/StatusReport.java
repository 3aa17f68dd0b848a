package dev.fencedjobs.cli;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.db.internal.Shards;
import dev.fencedjobs.lease.LeaseRow;
import java.io.PrintStream;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.OffsetDateTime;
import java.util.List;

/** What {@code fenced-jobs status} prints, read with plain SQL an operator could run by hand. */
final class StatusReport {

    static final String HISTORY = "SELECT role, fencing_token, holder_id, acquired_at FROM ("
            + "SELECT *, row_number() OVER (PARTITION BY role ORDER BY fencing_token DESC) n FROM lease_takeover) t "
            + "WHERE n <= 5 ORDER BY role, fencing_token DESC";
    static final String JOBS = "SELECT count(*) FILTER (WHERE state = 'pending'), "
            + "count(*) FILTER (WHERE state = 'pending' AND due_at <= clock_timestamp()), count(*) FILTER (WHERE state = 'completed'), "
            + "count(*) FILTER (WHERE state = 'cancelled') FROM jobs";
    static final String SCHEDULES =
            "SELECT count(*), count(*) FILTER (WHERE paused), count(error), coalesce(sum(fired), 0), coalesce(sum(skipped), 0), "
                    + "min(next_fire_at) FILTER (WHERE NOT paused AND error IS NULL) FROM schedules";
    static final String OUTBOX = "SELECT (SELECT count(*) FROM outbox_unpublished), "
            + "coalesce(round(extract(epoch FROM clock_timestamp() - (SELECT min(completed_at) FROM outbox_unpublished))::numeric, 1), 0), "
            + "(SELECT count(*) FROM outbox WHERE publish_error IS NOT NULL)";
    static final String CONSUMER =
            "SELECT count(*) FILTER (WHERE outcome = 'applied'), count(*) FILTER (WHERE outcome = 'rejected'), "
                    + "(SELECT count(*) FROM consumer_dead_letter WHERE status IN ('dead', 'replay_requested')), (SELECT count(*) FROM ledger), "
                    + "(SELECT value FROM consumer_counters WHERE name = 'duplicates'), "
                    + "(SELECT count(*) FROM consumer_dead_letter WHERE status = 'replayed'), (SELECT count(*) FROM consumer_dead_letter WHERE status = 'discarded'), "
                    + "(SELECT count(*) FROM consumer_dead_letter WHERE reason LIKE 'unauthenticated%') "
                    + "FROM consumer_processed";
    static final String WAITING = "SELECT count(*), count(DISTINCT resource), "
            + "coalesce(round(extract(epoch FROM clock_timestamp() - min(first_failed_at))::numeric), 0), max(attempts) FROM consumer_waiting";

    private final Connection jobs;
    private final Connection consumer;
    private final PrintStream out;

    StatusReport(Connection jobs, Connection consumer, PrintStream out) {
        this.jobs = jobs;
        this.consumer = consumer;
        this.out = out;
    }

    void print() throws SQLException {
        try (Statement s = jobs.createStatement()) {
            Shards.ShardMap map = Shards.read(jobs);
            out.printf(
                    "Shards: %d (map generation %d)%s; shard n's leases are <role>/<n>, `fenced-jobs shards show` shows each one%n",
                    map.count(),
                    map.generation(),
                    map.draining() ? ", draining to " + map.target() + ": no job completes until the switch" : "");
            out.println("Leases:");
            List<LeaseRow> leases = LeaseRow.all(jobs);
            for (LeaseRow l : leases) {
                out.printf(
                        "  %-12s token %-6d holder %-32s %s%n",
                        l.role(),
                        l.token().value(),
                        l.holderId(),
                        l.live() ? "live, " + l.secondsLeft() + " s left" : "expired (no leader)");
            }
            if (leases.isEmpty()) {
                out.println("  none yet: no service has acquired a role");
            }
            out.println("Token history (latest 5 per role):");
            try (ResultSet rs = s.executeQuery(HISTORY)) {
                while (rs.next()) {
                    out.printf(
                            "  %-12s token %-6d holder %-32s acquired %s%n",
                            rs.getString(1), rs.getLong(2), rs.getString(3), rs.getObject(4, OffsetDateTime.class));
                }
            }
            try (ResultSet rs = s.executeQuery(JOBS)) {
                rs.next();
                out.printf(
                        "Jobs: %d pending (%d due now), %d completed, %d cancelled%n",
                        rs.getLong(1), rs.getLong(2), rs.getLong(3), rs.getLong(4));
            }
            dispatch();
            try (ResultSet rs = s.executeQuery(SCHEDULES)) {
                rs.next();
                out.printf(
                        "Schedules: %d (%d paused, %d with an error); %d occurrences fired, %d skipped; next fires %s%n",
                        rs.getLong(1),
                        rs.getLong(2),
                        rs.getLong(3),
                        rs.getLong(4),
                        rs.getLong(5),
                        rs.getObject(6) == null
                                ? "never"
                                : rs.getObject(6, OffsetDateTime.class).toString());
            }
            try (ResultSet rs = s.executeQuery(OUTBOX)) {
                rs.next();
                out.printf(
                        "Outbox: %d unpublished, oldest %s s; %d set aside with publish_error%n",
                        rs.getLong(1), rs.getBigDecimal(2), rs.getLong(3));
            }
        }
        Connection c = consumer != null ? consumer : jobs;
        consumer(c);
    }

    /** What is paused (docs/dispatch.md, "Pause and resume"). */
    private void pauses() {
        DispatchOverview.Pauses pauses;
        try {
            pauses = DispatchOverview.pauses(jobs);
        } catch (SQLException e) {
            out.println("Paused: cannot read dispatch_pauses here (a schema before V15?): " + e.getMessage());
            return;
        }
        if (pauses.count() == 0) {
            out.println("Paused: nothing (fenced-jobs pause <key> | --all)");
            return;
        }
        out.printf(
                "Paused: %d%s, longest first:%n",
                pauses.count(),
                pauses.count() > pauses.shown().size() ? " (" + pauses.shown().size() + " shown)" : "");
        for (DispatchOverview.Pause p : pauses.shown()) {
            out.printf(
                    "  %-32s by %s for %d s%s%s%n",
                    p.key() == null ? "EVERYTHING" : p.key(),
                    p.pausedBy(),
                    Math.round(p.seconds()),
                    p.key() == null ? "" : ", due jobs waiting " + count(p.dueWaiting(), DispatchOverview.WAITING_CAP),
                    p.reason() == null ? "" : ": " + p.reason());
        }
    }

    /** The rate limits that hold jobs back and the keys at the head of the due backlog (docs/dispatch.md). */
    private void dispatch() {
        DispatchOverview.Overview o;
        try {
            o = DispatchOverview.read(jobs);
        } catch (SQLException e) {
            out.println(
                    "Rate limits: cannot read them here (a schema before V11, or a login without SELECT on dispatch_limits): "
                            + e.getMessage());
            return;
        }
        pauses();
        if (o.limitCount() == 0) {
            out.println("Rate limits: none (fenced-jobs limit set <key> --per-second <n>)");
        } else {
            out.printf(
                    "Rate limits: %d%s, fewest tokens first (due jobs counted up to %,d):%n",
                    o.limitCount(),
                    o.limitCount() > o.limits().size() ? " (" + o.limits().size() + " shown)" : "",
                    DispatchOverview.WAITING_CAP);
            for (DispatchOverview.Limit l : o.limits()) {
                out.printf(
                        "  %-32s %10s/s burst %-6d tokens %8.2f  due jobs waiting %s%s%n",
                        l.key(),
                        l.perSecond(),
                        l.burst(),
                        l.tokens(),
                        count(l.dueWaiting(), DispatchOverview.WAITING_CAP),
                        l.held() ? "  HELD" : "");
            }
        }
        if (o.busiestKeys().isEmpty()) {
            out.println("Busiest keys: no job is due");
        } else {
            out.printf("Busiest keys among the %,d longest-due jobs:%n", DispatchOverview.HEAD);
            for (DispatchOverview.BusyKey k : o.busiestKeys()) {
                out.printf("  %-32s %,8d due, the oldest due since %s%n", k.key(), k.dueJobs(), k.oldestDue());
            }
        }
    }

    /** A count that stops at {@code cap}: "10,000 or more" there. */
    static String count(long n, long cap) {
        return n >= cap ? String.format("%,d or more", n) : String.format("%,d", n);
    }

    private void consumer(Connection c) throws SQLException {
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(CONSUMER)) {
            rs.next();
            out.printf(
                    "Consumer: %d applied (%d ledger rows), %d duplicates absorbed, %d stale rejected; "
                            + "%d dead letters to act on (%d replayed, %d discarded: fenced-jobs dead-letters list); "
                            + "%d unauthenticated records refused (dead-letters list --reason unauthenticated)%n",
                    rs.getLong(1),
                    rs.getLong(4),
                    rs.getLong(5),
                    rs.getLong(2),
                    rs.getLong(3),
                    rs.getLong(6),
                    rs.getLong(7),
                    rs.getLong(8));
            try (ResultSet w = s.executeQuery(WAITING)) {
                w.next();
                if (w.getLong(1) == 0) {
                    out.printf("Patient retries: nothing waiting%n");
                } else {
                    out.printf(
                            "Patient retries: %d records of %d resources waiting, the oldest failing for %d s, up to %d tries so far%n",
                            w.getLong(1), w.getLong(2), w.getLong(3), w.getLong(4));
                }
            }
        } catch (SQLException e) {
            out.println(
                    "Consumer: no consumer tables here (set CONSUMER_DATABASE_URL if they live in another database)");
        } finally {
            if (consumer != null) {
                consumer.close();
            }
        }
    }
}
