package dev.fencedjobs.chaos;

import dev.fencedjobs.lease.LeaseRow;
import dev.fencedjobs.runtime.internal.Envelope;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

/** Reads what a run left in the database and in the topic into a {@link History}. */
final class Recorder {

    private Recorder() {}

    /** Reads the tables; the connection must see both the dispatcher's and the consumer's tables. */
    static void readDatabase(Connection c, History h) throws SQLException {
        boolean autoCommit = c.getAutoCommit();
        c.setAutoCommit(false);
        try (Statement s = c.createStatement()) {
            s.setFetchSize(10_000);
            s.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
            try (ResultSet r = s.executeQuery(
                    "SELECT id, unique_key, resource, state, completed_by_token, " + micros("completed_at")
                            + ", dispatch_key, " + micros("due_at") + ", priority, shard FROM jobs ORDER BY id")) {
                while (r.next()) {
                    h.jobs.add(new History.Job(
                            r.getLong(1),
                            r.getString(2),
                            r.getString(3),
                            r.getString(4),
                            nullableLong(r, 5),
                            nullableLong(r, 6),
                            r.getString(7),
                            r.getLong(8),
                            r.getInt(9),
                            r.getInt(10)));
                }
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT dispatch_key, per_second, burst FROM dispatch_limits ORDER BY dispatch_key")) {
                while (r.next()) {
                    h.limits.add(new History.Limit(r.getString(1), r.getDouble(2), r.getDouble(3)));
                }
            }
            try (ResultSet r = s.executeQuery("SELECT id, job_id, resource, fencing_token,"
                    // Published: up to the position of the row's shard (docs/shards.md).
                    + " CASE WHEN id <= (SELECT p.published_through FROM outbox_position p WHERE p.role = shard_role('relay', outbox.shard))"
                    + " THEN 0 END,"
                    + " publish_error FROM outbox ORDER BY id")) {
                while (r.next()) {
                    h.outbox.add(new History.OutboxRow(
                            r.getLong(1),
                            r.getLong(2),
                            r.getString(3),
                            r.getLong(4),
                            nullableLong(r, 5),
                            r.getString(6)));
                }
            }
            try (ResultSet r = s.executeQuery("SELECT role, fencing_token, holder_id, " + micros("acquired_at")
                    + " FROM lease_takeover ORDER BY role, fencing_token")) {
                while (r.next()) {
                    h.takeovers.add(new History.Takeover(r.getString(1), r.getLong(2), r.getString(3), r.getLong(4)));
                }
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT name, cron, (extract(epoch FROM every) * 1000000)::bigint, time_zone, misfire, "
                            + micros("starts_at") + ", " + micros("next_fire_at")
                            + ", fired, skipped FROM schedules ORDER BY name")) {
                while (r.next()) {
                    h.schedules.add(new History.Schedule(
                            r.getString(1),
                            r.getString(2),
                            nullableLong(r, 3),
                            r.getString(4),
                            r.getString(5),
                            r.getLong(6),
                            nullableLong(r, 7),
                            r.getLong(8),
                            r.getLong(9)));
                }
            }
            try (ResultSet r = s.executeQuery("SELECT schedule_name, " + micros("first_fire_at") + ", "
                    + micros("last_fire_at") + ", occurrences, reason FROM schedule_skips ORDER BY id")) {
                while (r.next()) {
                    h.scheduleSkips.add(new History.ScheduleSkip(
                            r.getString(1), r.getLong(2), r.getLong(3), r.getLong(4), r.getString(5)));
                }
            }
            for (LeaseRow l : LeaseRow.all(s.getConnection())) {
                h.leases.add(new History.Lease(l.role(), l.holderId(), l.token().value()));
            }
            try (ResultSet r = s.executeQuery("SELECT id, job_id, resource, fencing_token, " + micros("applied_at")
                    + " FROM ledger ORDER BY id")) {
                while (r.next()) {
                    h.effects.add(
                            new History.Effect(r.getLong(1), r.getLong(2), r.getString(3), r.getLong(4), r.getLong(5)));
                }
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT job_id, resource, fencing_token, outcome FROM consumer_processed ORDER BY job_id")) {
                while (r.next()) {
                    h.processed.add(new History.Processed(r.getLong(1), r.getString(2), r.getLong(3), r.getString(4)));
                }
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT id, job_id, resource, fencing_token, highest_token, kafka_partition, kafka_offset"
                            + " FROM consumer_rejected ORDER BY id")) {
                while (r.next()) {
                    h.rejections.add(new History.Rejection(
                            r.getLong(1),
                            r.getLong(2),
                            r.getString(3),
                            r.getLong(4),
                            r.getLong(5),
                            r.getInt(6),
                            r.getLong(7)));
                }
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT id, kafka_partition, kafka_offset, job_id, reason FROM consumer_dead_letter ORDER BY id")) {
                while (r.next()) {
                    h.deadLetters.add(new History.DeadLetter(
                            r.getLong(1), r.getInt(2), r.getLong(3), nullableLong(r, 4), r.getString(5)));
                }
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT job_id, resource, outbox_id, highest_outbox_id, kafka_partition, kafka_offset"
                            + " FROM consumer_late ORDER BY id")) {
                while (r.next()) {
                    h.late.add(new History.Late(
                            r.getLong(1), r.getString(2), r.getLong(3), r.getLong(4), r.getInt(5), r.getLong(6)));
                }
            }
            try (ResultSet r = s.executeQuery(
                    "SELECT kind, job_id, resource, fencing_token, previous, kafka_partition, kafka_offset"
                            + " FROM consumer_reused ORDER BY id")) {
                while (r.next()) {
                    h.reused.add(new History.Reused(
                            r.getString(1),
                            r.getLong(2),
                            r.getString(3),
                            r.getLong(4),
                            r.getString(5),
                            r.getInt(6),
                            r.getLong(7)));
                }
            }
            c.commit();
        } finally {
            c.setAutoCommit(autoCommit);
        }
    }

    private static String micros(String column) {
        return "(extract(epoch FROM " + column + ") * 1000000)::bigint";
    }

    private static Long nullableLong(ResultSet r, int column) throws SQLException {
        long v = r.getLong(column);
        return r.wasNull() ? null : v;
    }

    /** Reads every committed record of the topic, as a read_committed consumer sees it. */
    static void readTopic(String bootstrapServers, String topic, History h, Duration timeout) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrapServers);
        p.put("group.id", "chaos-checker-" + UUID.randomUUID());
        p.put("enable.auto.commit", "false");
        p.put("isolation.level", "read_committed");
        p.put("max.poll.records", "5000");
        try (KafkaConsumer<String, byte[]> consumer =
                new KafkaConsumer<>(p, new StringDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic, timeout).stream()
                    .map(i -> new TopicPartition(topic, i.partition()))
                    .toList();
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions, timeout);
            long deadline = System.nanoTime() + timeout.toNanos();
            while (partitions.stream().anyMatch(tp -> consumer.position(tp, timeout) < end.get(tp))) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("could not read the whole topic within " + timeout);
                }
                for (ConsumerRecord<String, byte[]> r : consumer.poll(Duration.ofMillis(500))) {
                    h.topic.add(toRecord(r));
                }
            }
        }
    }

    static History.TopicRecord toRecord(ConsumerRecord<String, byte[]> r) {
        try {
            Envelope e = Envelope.parse(r.value());
            return new History.TopicRecord(
                    r.partition(),
                    r.offset(),
                    r.key(),
                    e.outboxId(),
                    e.jobId(),
                    e.resource(),
                    e.fencingToken().value());
        } catch (Envelope.InvalidEnvelope e) {
            return new History.TopicRecord(r.partition(), r.offset(), r.key(), null, null, null, null);
        }
    }
}
