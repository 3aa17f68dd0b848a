package dev.fencedjobs.chaos;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;

/**
 * Rate-limited keys through every fault (docs/dispatch.md): a backlog key that starts with a
 * backlog of due jobs, and tenant keys that the {@link LoadGenerator} names for a tenth of its jobs.
 * Each limit leaves half its rate spare, so the backlog is gone well before the drain even though
 * faults stop dispatching for seconds at a time. The checker's invariant "14 rate limits" counts
 * each key's completions per second of database time.
 */
final class ChaosLimits {

    static final String BACKLOG_KEY = "chaos-backlog";
    static final List<String> TENANTS = List.of("chaos-tenant-0", "chaos-tenant-1", "chaos-tenant-2");
    /** One job in this many from the load generator names a tenant key. */
    static final int TENANT_SHARE = 10;

    private final ChaosRun.Options options;
    private final ChaosCluster cluster;
    private final RunLog log;
    /** The unique keys of the backlog's jobs, acknowledged: part of what must not be lost. */
    final List<String> backlog = new ArrayList<>();

    ChaosLimits(ChaosRun.Options options, ChaosCluster cluster, RunLog log) {
        this.options = options;
        this.cluster = cluster;
        this.log = log;
    }

    /** Each tenant's share of the load is rate / 30 jobs a second: its limit is half again as much. */
    int tenantPerSecond() {
        return Math.max(2, options.rate() / 20);
    }

    /** Twice the backlog's rate times half the run: drained at its limit by the middle of the run. */
    int backlogPerSecond() {
        return Math.max(5, options.rate() / 5);
    }

    void start() throws SQLException {
        int backlogJobs = (int) Math.min(200_000, backlogPerSecond() * options.seconds() / 2);
        try (Connection c = cluster.owner()) {
            try (PreparedStatement s = c.prepareStatement(
                    "INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES (?, ?, ?)")) {
                s.setString(1, BACKLOG_KEY);
                s.setDouble(2, backlogPerSecond());
                s.setInt(3, backlogPerSecond() / 2);
                s.addBatch();
                for (String tenant : TENANTS) {
                    s.setString(1, tenant);
                    s.setDouble(2, tenantPerSecond());
                    s.setInt(3, Math.max(1, tenantPerSecond() / 2));
                    s.addBatch();
                }
                s.executeBatch();
            }
            // The backlog, due at once, with priorities from -60 to 60 s so that rank order is not due order.
            String prefix = "chaos-" + options.seed() + "-backlog-";
            try (PreparedStatement s = c.prepareStatement(
                    "INSERT INTO jobs (unique_key, resource, dispatch_key, priority, payload, due_at)"
                            + " SELECT ? || g, 'resource-' || (g % " + ChaosRun.RESOURCES
                            + "), ?, (g % 121) - 60, jsonb_build_object('key', ? || g), now()"
                            + " FROM generate_series(1, ?) g")) {
                s.setString(1, prefix);
                s.setString(2, BACKLOG_KEY);
                s.setString(3, prefix);
                s.setInt(4, backlogJobs);
                s.executeUpdate();
            }
            for (int g = 1; g <= backlogJobs; g++) {
                backlog.add(prefix + g);
            }
        }
        log.log("limits: " + BACKLOG_KEY + " " + backlogPerSecond() + "/s with a backlog of " + backlogJobs + " jobs; "
                + TENANTS + " " + tenantPerSecond() + "/s each, one load job in " + TENANT_SHARE + " among them");
    }
}
