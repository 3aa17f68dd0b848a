package dev.fencedjobs.db.internal;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Who waits and why (docs/dispatch.md, "What you can see"), read with plain SQL for {@code
 * fenced-jobs status}, the dispatcher's {@code /status} and the dashboard: the rate limits with the
 * due jobs waiting behind each, the pauses, and the busiest keys at the head of the due backlog. Every count
 * stops at a cap, so that a backlog of millions costs a bounded read: the reader says "at least".
 */
public final class DispatchOverview {

    /** Each limit's count of due jobs stops here. */
    public static final int WAITING_CAP = 10_000;
    /** The busiest keys are counted among this many of the longest-due jobs. */
    public static final int HEAD = 10_000;
    /** Limits shown: those with the fewest tokens left first (the ones holding jobs back), then by key. */
    public static final int LIMITS_SHOWN = 20;

    public static final int KEYS_SHOWN = 5;
    /** The count of all due jobs stops here. */
    public static final int DUE_CAP = 100_000;
    /**
     * How many pending jobs are due now, counted up to {@link #DUE_CAP} entries of {@code
     * jobs_pending_due}: for the dashboard and the dispatcher's backlog gauge.
     */
    public static final String DUE_BACKLOG = "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE state = 'pending' "
            + "AND shard = ANY (shard_list()) AND due_at <= clock_timestamp() LIMIT " + DUE_CAP + ") due";

    /** {@link #DUE_BACKLOG} of one shard's jobs. */
    public static String dueBacklogOf(int shard) {
        return "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE state = 'pending' AND shard = " + shard
                + " AND due_at <= clock_timestamp() LIMIT " + DUE_CAP + ") due";
    }

    /**
     * The due jobs of the key that {@code key} names (an SQL expression), one row each, for a
     * count: the filter that {@code jobs_pending_key} serves.
     */
    public static String dueJobsOf(String key) {
        return "SELECT 1 FROM jobs j WHERE j.state = 'pending' AND j.shard = ANY (shard_list()) AND coalesce(j.dispatch_key, j.resource) = "
                + key
                + " AND j.due_at <= clock_timestamp()";
    }

    /** The limits shown: each one's definition, its tokens now, and its due jobs (up to the cap); and how many limits there are. */
    static final String LIMITS = "SELECT l.dispatch_key, l.per_second, l.burst, l.tokens_now, "
            + "(SELECT count(*) FROM (" + dueJobsOf("l.dispatch_key") + " LIMIT " + WAITING_CAP + ") d), l.total "
            + "FROM (SELECT dispatch_key, per_second, burst, count(*) OVER () AS total, "
            + "dispatch_limit_tokens(tokens, refilled_at, per_second, burst, clock_timestamp()) AS tokens_now FROM dispatch_limits "
            + "ORDER BY tokens_now, dispatch_key LIMIT " + LIMITS_SHOWN + ") l ORDER BY l.tokens_now, l.dispatch_key";
    /** The keys with the most jobs among the {@link #HEAD} longest-due, read in the plain path's index order, shard by shard. */
    static final String BUSIEST =
            "SELECT k, count(*), min(due_at) FROM (SELECT h.k, h.due_at FROM unnest(shard_list()) s "
                    + "CROSS JOIN LATERAL (SELECT coalesce(dispatch_key, resource) AS k, due_at, id FROM jobs "
                    + "WHERE state = 'pending' AND shard = s AND due_at <= clock_timestamp() ORDER BY due_at, id LIMIT "
                    + HEAD
                    + ") h ORDER BY h.due_at, h.id LIMIT " + HEAD + ") head "
                    + "GROUP BY k ORDER BY count(*) DESC, k LIMIT " + KEYS_SHOWN;
    /**
     * Due jobs held back right now: of keys whose bucket has less than one whole token, up to
     * {@link #WAITING_CAP} in all.
     */
    public static final String HELD = "SELECT count(*) FROM (SELECT 1 FROM dispatch_limits l "
            + "CROSS JOIN LATERAL (" + dueJobsOf("l.dispatch_key") + " LIMIT " + WAITING_CAP + ") d "
            + "WHERE dispatch_limit_tokens(l.tokens, l.refilled_at, l.per_second, l.burst, clock_timestamp()) < 1 LIMIT "
            + WAITING_CAP + ") held";

    /** The pauses shown: everything's first, then the keys paused longest. */
    public static final int PAUSES_SHOWN = 20;

    /** The pauses shown, each with its due jobs waiting (up to the cap), and how many there are. */
    static final String PAUSES =
            "SELECT p.dispatch_key, p.paused_by, p.paused_at, p.reason, count(*) OVER () AS total, "
                    + "extract(epoch FROM clock_timestamp() - p.paused_at)::float8 AS seconds, "
                    + "CASE WHEN p.dispatch_key IS NULL THEN NULL ELSE (SELECT count(*) FROM ("
                    + dueJobsOf("p.dispatch_key") + " LIMIT " + WAITING_CAP + ") d) END "
                    + "FROM dispatch_pauses p ORDER BY p.dispatch_key IS NOT NULL, p.paused_at, p.dispatch_key LIMIT "
                    + PAUSES_SHOWN;

    /** What the dispatcher's pause gauges show: paused keys, whether everything is, the longest pause's age. */
    public static final String PAUSE_SUMMARY = "SELECT count(dispatch_key), count(*) > count(dispatch_key), "
            + "coalesce(extract(epoch FROM clock_timestamp() - min(paused_at))::float8, 0) FROM dispatch_pauses";

    /** One pause: {@code key} null when everything is paused; {@code dueWaiting} null then, else at most {@link #WAITING_CAP}. */
    public record Pause(
            String key, String pausedBy, OffsetDateTime pausedAt, double seconds, String reason, Long dueWaiting) {}

    /** {@code shown} holds at most {@link #PAUSES_SHOWN} of the {@code count} pauses. */
    public record Pauses(int count, List<Pause> shown) {

        /** For {@code /dashboard.json}. */
        public Map<String, Object> toMap() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("count", count);
            List<Map<String, Object>> ps = new ArrayList<>();
            for (Pause p : shown) {
                Map<String, Object> e = new LinkedHashMap<>();
                e.put("key", p.key());
                e.put("pausedBy", p.pausedBy());
                e.put("pausedAt", p.pausedAt().toInstant().toString());
                e.put("seconds", Math.round(p.seconds()));
                e.put("reason", p.reason());
                e.put("dueWaiting", p.dueWaiting());
                ps.add(e);
            }
            m.put("shown", ps);
            m.put("dueWaitingCap", WAITING_CAP);
            return m;
        }
    }

    /** One limit as it stands. {@code dueWaiting} at most {@link #WAITING_CAP}. */
    public record Limit(String key, double perSecond, int burst, double tokens, long dueWaiting) {

        public boolean held() {
            return tokens < 1 && dueWaiting > 0;
        }
    }

    /** A key at the head of the due backlog: its jobs among the {@link #HEAD} longest-due, and its oldest due time. */
    public record BusyKey(String key, long dueJobs, OffsetDateTime oldestDue) {}

    /** {@code limits} holds at most {@link #LIMITS_SHOWN} of the {@code limitCount} limits. */
    public record Overview(int limitCount, List<Limit> limits, List<BusyKey> busiestKeys) {

        /** For {@code /status} and {@code /dashboard.json}. */
        public Map<String, Object> toMap() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("limitCount", limitCount);
            List<Map<String, Object>> ls = new ArrayList<>();
            for (Limit l : limits) {
                Map<String, Object> e = new LinkedHashMap<>();
                e.put("key", l.key());
                e.put("perSecond", l.perSecond());
                e.put("burst", l.burst());
                e.put("tokens", Math.round(l.tokens() * 100) / 100.0);
                e.put("dueWaiting", l.dueWaiting());
                e.put("held", l.held());
                ls.add(e);
            }
            m.put("limits", ls);
            m.put("dueWaitingCap", WAITING_CAP);
            List<Map<String, Object>> ks = new ArrayList<>();
            for (BusyKey k : busiestKeys) {
                Map<String, Object> e = new LinkedHashMap<>();
                e.put("key", k.key());
                e.put("dueJobs", k.dueJobs());
                e.put("oldestDue", k.oldestDue().toInstant().toString());
                ks.add(e);
            }
            m.put("busiestKeys", ks);
            m.put("busiestAmong", HEAD);
            return m;
        }
    }

    private DispatchOverview() {}

    /** Needs SELECT on {@code jobs} and {@code dispatch_limits}: the owner, an operator or {@code fj_dispatcher}. */
    public static Overview read(Connection c) throws SQLException {
        List<Limit> limits = new ArrayList<>();
        int limitCount = 0;
        try (PreparedStatement ps = c.prepareStatement(LIMITS);
                ResultSet rs = ps.executeQuery()) {
            while (rs.next()) {
                limits.add(new Limit(rs.getString(1), rs.getDouble(2), rs.getInt(3), rs.getDouble(4), rs.getLong(5)));
                limitCount = rs.getInt(6);
            }
        }
        List<BusyKey> busiest = new ArrayList<>();
        try (PreparedStatement ps = c.prepareStatement(BUSIEST);
                ResultSet rs = ps.executeQuery()) {
            while (rs.next()) {
                busiest.add(new BusyKey(rs.getString(1), rs.getLong(2), rs.getObject(3, OffsetDateTime.class)));
            }
        }
        return new Overview(limitCount, List.copyOf(limits), List.copyOf(busiest));
    }

    /** The pauses (docs/dispatch.md, "Pause and resume"); every login may read them (V15). */
    public static Pauses pauses(Connection c) throws SQLException {
        List<Pause> shown = new ArrayList<>();
        int count = 0;
        try (PreparedStatement ps = c.prepareStatement(PAUSES);
                ResultSet rs = ps.executeQuery()) {
            while (rs.next()) {
                long waiting = rs.getLong(7);
                shown.add(new Pause(
                        rs.getString(1),
                        rs.getString(2),
                        rs.getObject(3, OffsetDateTime.class),
                        rs.getDouble(6),
                        rs.getString(4),
                        rs.wasNull() ? null : waiting));
                count = rs.getInt(5);
            }
        }
        return new Pauses(count, List.copyOf(shown));
    }

    /** Due jobs held back by a limit now, up to {@link #WAITING_CAP}. */
    public static long held(Connection c) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(HELD);
                ResultSet rs = ps.executeQuery()) {
            rs.next();
            return rs.getLong(1);
        }
    }
}
