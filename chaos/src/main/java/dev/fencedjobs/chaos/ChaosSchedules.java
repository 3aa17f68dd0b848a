package dev.fencedjobs.chaos;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.List;

/**
 * Schedules that fire through every fault: a fast interval (misfire policy all), a cron schedule
 * (latest), and one the runner pauses and resumes (skip). The checker's invariant "schedule
 * occurrences" finds each occurrence as exactly one job or one recorded skip.
 */
final class ChaosSchedules {

    static final List<String> NAMES = List.of("chaos-fast", "chaos-cron", "chaos-toggled");
    static final String TOGGLED = "chaos-toggled";

    private final ChaosCluster cluster;
    private final History history;
    private final RunLog log;

    ChaosSchedules(ChaosCluster cluster, History history, RunLog log) {
        this.cluster = cluster;
        this.history = history;
        this.log = log;
    }

    void start() throws SQLException {
        try (Connection c = cluster.owner();
                Statement s = c.createStatement()) {
            s.execute(
                    "INSERT INTO schedules (name, every, misfire, resource) VALUES ('chaos-fast', interval '250 milliseconds', 'all', 'sched-fast')");
            s.execute(
                    "INSERT INTO schedules (name, cron, misfire, resource) VALUES ('chaos-cron', '* * * * *', 'latest', 'sched-cron')");
            s.execute(
                    "INSERT INTO schedules (name, every, misfire, resource) VALUES ('chaos-toggled', interval '400 milliseconds', 'skip', 'sched-toggled')");
        }
        log.log("schedules: " + NAMES);
    }

    /** Pauses or resumes, and records the database time of each change for the checker. */
    void pause(List<String> names, boolean paused) throws SQLException {
        try (Connection c = cluster.owner();
                PreparedStatement ps =
                        c.prepareStatement("UPDATE schedules SET paused = ? WHERE name = ANY (?) AND paused <> ? "
                                + "RETURNING name, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")) {
            ps.setBoolean(1, paused);
            ps.setArray(2, c.createArrayOf("varchar", names.toArray()));
            ps.setBoolean(3, paused);
            try (ResultSet r = ps.executeQuery()) {
                while (r.next()) {
                    history.schedulePauses.add(new History.SchedulePause(r.getString(1), r.getLong(2), paused));
                    log.log((paused ? "paused" : "resumed") + " schedule " + r.getString(1));
                }
            }
        }
    }
}
