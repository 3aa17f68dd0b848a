package dev.fencedjobs.db.internal;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * One job's way from the producer's row to its effect, as this database holds it, read with plain
 * SQL for {@code fenced-jobs journey}: the job's row; its outbox row and whether the relay's
 * position has passed it; and, where the consumer's tables are (in the same database or another)
 * and the login may read them, what the consumer did with it. Every lookup is by the job's id, through an index
 * where the table has one, and at most {@link #ROWS_SHOWN} rows of each kind.
 */
public final class JobJourney {

    /** Rows shown of each kind of consumer record (stale, late, waiting, dead letters, reuses). */
    public static final int ROWS_SHOWN = 5;

    /** A consumer table and the columns shown of its rows for a job, newest first. */
    private record ConsumerRows(String kind, String table, String columns, String order) {}

    private static final List<ConsumerRows> CONSUMER_ROWS = List.of(
            new ConsumerRows(
                    "stale",
                    "consumer_rejected",
                    "fencing_token, highest_token, topic, kafka_partition, kafka_offset, rejected_at",
                    "id"),
            new ConsumerRows(
                    "late",
                    "consumer_late",
                    "fencing_token, outbox_id, highest_outbox_id, topic, kafka_partition, kafka_offset, seen_at",
                    "id"),
            new ConsumerRows(
                    "waiting", "consumer_waiting", "attempts, first_failed_at, next_attempt_at, last_error", "seq"),
            new ConsumerRows(
                    "dead letter",
                    "consumer_dead_letter",
                    "id, status, reason, topic, kafka_partition, kafka_offset, dead_lettered_at",
                    "id"),
            new ConsumerRows(
                    "reused",
                    "consumer_reused",
                    "kind, fencing_token, previous, topic, kafka_partition, kafka_offset, seen_at",
                    "id"));

    private JobJourney() {}

    /**
     * The journey of the job with this id, or with this unique key when {@code id} is null; empty
     * when there is no such job. Each part is a map of column to value, or a string that says why
     * it is not shown.
     *
     * @param c the database of {@code jobs} and {@code outbox}
     * @param consumerDb where the consumer's tables are; {@code c} when they are in the same database
     * @throws SQLException also when this login may not read {@code jobs}
     */
    public static Optional<Map<String, Object>> read(Connection c, Connection consumerDb, Long id, String key)
            throws SQLException {
        if (!readable(c, "jobs")) {
            throw new SQLException("this login may not read the table jobs (run as the owner or an operator's login)");
        }
        Map<String, Object> job;
        try (PreparedStatement ps =
                c.prepareStatement("SELECT id, unique_key, resource, state, created_at, due_at, completed_at, "
                        + "completed_by_token, cancelled_at, traceparent FROM jobs WHERE "
                        + (id != null ? "id = ?" : "unique_key = ?"))) {
            ps.setObject(1, id != null ? id : key);
            List<Map<String, Object>> rows = rows(ps);
            if (rows.isEmpty()) {
                return Optional.empty();
            }
            job = rows.get(0);
        }
        long jobId = ((Number) job.get("id")).longValue();
        Map<String, Object> journey = new LinkedHashMap<>();
        journey.put("job", job);
        journey.put("outbox", outbox(c, jobId, (String) job.get("state")));
        journey.put("consumer", consumer(consumerDb, jobId));
        return Optional.of(journey);
    }

    private static Object outbox(Connection c, long jobId, String state) throws SQLException {
        if (!readable(c, "outbox") || !readable(c, "outbox_position")) {
            return "not shown: this login may not read outbox and outbox_position";
        }
        try (PreparedStatement ps = c.prepareStatement("SELECT o.id, o.fencing_token, o.completed_at, o.publish_error, "
                + "o.id <= coalesce(p.published_through, 0) AS published FROM outbox o "
                + "LEFT JOIN outbox_position p ON p.role = 'relay' WHERE o.job_id = ?")) {
            ps.setLong(1, jobId);
            List<Map<String, Object>> rows = rows(ps);
            if (!rows.isEmpty()) {
                return rows.get(0);
            }
        }
        return switch (state) {
            case "pending" -> "none yet: the job is pending";
            case "cancelled" -> "none: the job was cancelled";
            default -> "none: purged OUTBOX_RETENTION after the job's completion";
        };
    }

    /**
     * What the consumer whose tables are in {@code c} did with the job: the map {@link #read} puts
     * under {@code consumer}, or a string that says why it is not shown. For a consumer's own page,
     * whose database may not hold {@code jobs}.
     */
    public static Object consumer(Connection c, long jobId) throws SQLException {
        if (!readable(c, "consumer_processed")) {
            return "not shown: the consumer's tables are not in this database (set CONSUMER_DATABASE_URL), or this login may not read them";
        }
        Map<String, Object> consumer = new LinkedHashMap<>();
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT outcome, fencing_token, processed_at FROM consumer_processed WHERE job_id = ?")) {
            ps.setLong(1, jobId);
            List<Map<String, Object>> rows = rows(ps);
            consumer.put(
                    "processed", rows.isEmpty() ? "not yet, or purged after the consumer's retention" : rows.get(0));
        }
        for (ConsumerRows kind : CONSUMER_ROWS) {
            if (!readable(c, kind.table())) {
                continue;
            }
            try (PreparedStatement ps = c.prepareStatement("SELECT " + kind.columns() + " FROM " + kind.table()
                    + " WHERE job_id = ? ORDER BY " + kind.order() + " DESC LIMIT " + ROWS_SHOWN)) {
                ps.setLong(1, jobId);
                List<Map<String, Object>> rows = rows(ps);
                if (!rows.isEmpty()) {
                    consumer.put(kind.kind(), rows);
                }
            }
        }
        return consumer;
    }

    /** Whether {@code table} is in this database and this login may read it. */
    public static boolean readable(Connection c, String table) throws SQLException {
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT " + Database.readable(table))) {
            rs.next();
            return rs.getBoolean(1);
        }
    }

    private static List<Map<String, Object>> rows(PreparedStatement ps) throws SQLException {
        List<Map<String, Object>> rows = new ArrayList<>();
        try (ResultSet rs = ps.executeQuery()) {
            ResultSetMetaData meta = rs.getMetaData();
            while (rs.next()) {
                Map<String, Object> row = new LinkedHashMap<>();
                for (int i = 1; i <= meta.getColumnCount(); i++) {
                    Object value = rs.getObject(i);
                    row.put(
                            meta.getColumnLabel(i),
                            value instanceof Timestamp ? rs.getObject(i, OffsetDateTime.class) : value);
                }
                rows.add(row);
            }
        }
        return rows;
    }
}
