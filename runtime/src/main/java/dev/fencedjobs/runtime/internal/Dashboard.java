package dev.fencedjobs.runtime.internal;

import static dev.fencedjobs.db.internal.Database.readable;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.db.internal.JobJourney;
import dev.fencedjobs.lease.LeaseRow;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.LongSupplier;
import javax.sql.DataSource;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the ops endpoint's page at {@code /} shows ({@code /dashboard.json}), read from the service's
 * own database with the plain SQL of {@code fenced-jobs status}: each role's holder and token, the
 * takeover timeline, the due backlog, the outbox lag and, from a consumer, its lag, over the last
 * minutes; dead letters and stale rejections; the pauses, the rate limits and the busiest keys ({@link
 * DispatchOverview}). Each part shows when its tables are in this database and this service's role
 * may read them; the consumer lag only on the consumer's own page.
 *
 * <p>The series are sampled on the server from the service's start, every {@link #SAMPLE_EVERY},
 * and the last {@link #KEPT_FOR} of them kept, so that a page opened during an incident shows what
 * led to it. A sample is a few index reads: the due backlog (capped), the outbox lag, and the jobs
 * completed since the previous sample ({@code jobs_completed_at}); a consumer adds what it applied
 * and its due-to-effect latency from memory ({@link ConsumerSide}).
 */
public final class Dashboard implements AutoCloseable {

    static final Duration SAMPLE_EVERY = Duration.ofSeconds(5);
    static final Duration KEPT_FOR = Duration.ofMinutes(10);
    /** Ten minutes of samples. */
    static final int SAMPLES = (int) (KEPT_FOR.toMillis() / SAMPLE_EVERY.toMillis());
    /**
     * The jobs whose {@code completed_at} (the clock when their batch's statement ran) falls between
     * the previous sample's time and this one's, both one second behind the database's clock so that
     * a batch still committing is counted in the next sample instead of in none; at most a million.
     */
    static final String COMPLETED = "SELECT t.upto, (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE state = 'completed'"
            + " AND completed_at > coalesce(?, t.upto - interval '5 seconds') AND completed_at <= t.upto LIMIT 1000000) c),"
            + " extract(epoch FROM t.upto - coalesce(?, t.upto - interval '5 seconds'))"
            + " FROM (SELECT clock_timestamp() - interval '1 second' AS upto) t";

    private static final Logger log = LoggerFactory.getLogger(Dashboard.class);

    static final String VISIBLE =
            "SELECT " + readable("leader_lease") + ", " + readable("lease_takeover") + ", " + readable("jobs") + ", "
                    + readable("outbox_position") + ", " + readable("consumer_dead_letter") + ", "
                    + readable("consumer_rejected") + ", "
                    + readable("dispatch_limits");
    static final String TIMELINE = "SELECT role, fencing_token, holder_id, acquired_at FROM lease_takeover "
            + "WHERE acquired_at > clock_timestamp() - interval '1 day' ORDER BY acquired_at DESC, role LIMIT 30";
    /** Counted up to {@link DispatchOverview#DUE_CAP}: the page says "at least". */
    static final String BACKLOG = DispatchOverview.DUE_BACKLOG;
    /** The relay's position: the outbox rows after it are unpublished ({@link #outboxLag}). */
    /** Each shard's relay position (docs/shards.md): shard, published_through. */
    static final String RELAY_POSITIONS = "SELECT s, coalesce(p.published_through, 0) FROM unnest(shard_list()) s"
            + " LEFT JOIN outbox_position p ON p.role = shard_role('relay', s) ORDER BY s";

    static final String DEAD_LETTERS = "SELECT count(*) FILTER (WHERE status IN ('dead', 'replay_requested')), "
            + "count(*) FILTER (WHERE status = 'replayed'), count(*) FILTER (WHERE status = 'discarded') FROM consumer_dead_letter";
    static final String STALE = "SELECT count(*), max(rejected_at) FROM consumer_rejected";

    private final String service;
    private final DataSource dataSource;
    private final ConsumerSide consumer;
    private final ArrayDeque<Map<String, Object>> samples = new ArrayDeque<>();
    private final Thread sampler;
    private volatile boolean closed;
    /** The sampler's own: the database time the last count of completed jobs reached, and the consumer's count then. */
    private OffsetDateTime completedUpTo;

    private long appliedBefore = -1;
    private long appliedBeforeNanos;

    /**
     * What a consumer's page adds to the samples, from the consumer's memory.
     *
     * @param lag its records behind the end of its partitions
     * @param applied the effects it applied since it started
     * @param dueToEffect the time from each applied job's due time to the commit of its effect
     */
    public record ConsumerSide(LongSupplier lag, LongSupplier applied, LatencyWindow dueToEffect) {}

    /**
     * Starts sampling; {@link #close()} stops it.
     *
     * @param consumer a consumer's own series, or null for a service that is not a consumer
     */
    public Dashboard(String service, DataSource dataSource, ConsumerSide consumer) {
        this(service, dataSource, consumer, true);
    }

    /** Without {@code sampling}, nothing samples but {@link #sampleOnce()} (tests). */
    Dashboard(String service, DataSource dataSource, ConsumerSide consumer, boolean sampling) {
        this.service = service;
        this.dataSource = dataSource;
        this.consumer = consumer;
        if (sampling) {
            sampler = new Thread(this::sample, "dashboard-" + service);
            sampler.setDaemon(true);
            sampler.start();
        } else {
            sampler = null;
        }
    }

    /** What {@code /dashboard.json} answers. */
    public Map<String, Object> snapshot() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("service", service);
        out.put("at", Instant.now().toString());
        try (Connection c = dataSource.getConnection();
                Statement s = c.createStatement()) {
            boolean[] v = visibility(s);
            out.put("roles", v[0] ? leases(c, v[2], v[3]) : null);
            out.put("timeline", v[1] ? timeline(s) : null);
            out.put("deadLetters", v[4] ? deadLetters(s) : null);
            out.put("staleRejected", v[5] ? stale(s) : null);
            out.put(
                    "dispatch",
                    v[2] && v[6] ? orNull(() -> DispatchOverview.read(c).toMap()) : null);
            out.put("pauses", v[2] ? orNull(() -> DispatchOverview.pauses(c).toMap()) : null);
            out.put("error", null);
        } catch (SQLException | RuntimeException e) {
            out.put("error", "database: " + Faults.describe(e));
        }
        synchronized (samples) {
            out.put("samples", new ArrayList<>(samples));
        }
        out.put("sampleEverySeconds", SAMPLE_EVERY.toSeconds());
        out.put("keptMinutes", KEPT_FOR.toMinutes());
        out.put("consumer", consumer != null);
        return out;
    }

    /**
     * Where one job is (what {@code /dashboard/job?id=…} or {@code ?key=…} answers): its row, its
     * outbox row and whether the relay's position has passed it, what the consumer did with it and
     * its trace id ({@link JobJourney}), as far as this service's database holds them. A consumer
     * whose tables are in a database of their own shows only its part, by id.
     */
    public Map<String, Object> job(String id, String key) {
        Map<String, Object> out = new LinkedHashMap<>();
        Long jobId;
        try {
            jobId = id == null || id.isBlank() ? null : Long.valueOf(id.trim());
        } catch (NumberFormatException e) {
            out.put("error", "a job id is a number: " + id);
            return out;
        }
        if (jobId == null && (key == null || key.isBlank())) {
            out.put("error", "give a job id or a unique key");
            return out;
        }
        try (Connection c = dataSource.getConnection()) {
            if (JobJourney.readable(c, "jobs")) {
                Optional<Map<String, Object>> found = JobJourney.read(c, c, jobId, key);
                if (found.isEmpty()) {
                    out.put("error", "no job " + (jobId != null ? "with id " + jobId : "with key " + key));
                    return out;
                }
                out.putAll(found.get());
                Object traceparent = ((Map<?, ?>) found.get().get("job")).get("traceparent");
                out.put(
                        "traceId",
                        traceparent == null
                                ? null
                                : TraceContext.of((String) traceparent, null).traceId());
            } else if (jobId != null && JobJourney.readable(c, "consumer_processed")) {
                out.put("job", null);
                out.put("consumer", JobJourney.consumer(c, jobId));
            } else {
                out.put(
                        "error",
                        jobId == null
                                ? "this service's database has no jobs table to find a key in (the consumer's own page finds jobs by id)"
                                : "this service's database holds neither jobs nor the consumer's tables (or its role may not read them)");
            }
        } catch (SQLException | RuntimeException e) {
            out.put("error", "database: " + Faults.describe(e));
        }
        return jsonReady(out);
    }

    /** Times as ISO-8601 instants, in maps and lists at any depth: what the page shows. */
    @SuppressWarnings("unchecked")
    private static <T> T jsonReady(T value) {
        if (value instanceof OffsetDateTime t) {
            return (T) t.toInstant().toString();
        }
        if (value instanceof Map<?, ?> m) {
            Map<Object, Object> copy = new LinkedHashMap<>();
            m.forEach((k, v) -> copy.put(k, jsonReady(v)));
            return (T) copy;
        }
        if (value instanceof List<?> l) {
            return (T) l.stream().map(Dashboard::jsonReady).toList();
        }
        return value;
    }

    private void sample() {
        try {
            while (!closed) {
                sampleOnce();
                Thread.sleep(SAMPLE_EVERY.toMillis());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Takes one sample and keeps it, dropping those older than {@link #KEPT_FOR}. Called by one thread at a time. */
    void sampleOnce() {
        Map<String, Object> sample = new LinkedHashMap<>();
        sample.put("at", Instant.now().toString());
        sample.put("dueBacklog", null);
        sample.put("outboxLagSeconds", null);
        sample.put("completedPerSecond", null);
        try (Connection c = dataSource.getConnection();
                Statement s = c.createStatement()) {
            boolean[] v = visibility(s);
            // Each on its own: one that fails (a grant the role lacks, a timeout) leaves the others.
            if (v[2]) {
                sample.put("dueBacklog", orNull(() -> single(s, BACKLOG).longValue()));
                sample.put("completedPerSecond", orNull(() -> completedPerSecond(c)));
            }
            if (v[3]) {
                sample.put("outboxLagSeconds", orNull(() -> outboxLag(s)));
            }
        } catch (SQLException | RuntimeException e) {
            log.debug("dashboard sample failed: {}", Faults.describe(e));
        }
        sample.put("consumerLag", consumer == null ? null : consumer.lag().getAsLong());
        sample.put("appliedPerSecond", consumer == null ? null : appliedPerSecond());
        LatencyWindow.Summary latency =
                consumer == null ? null : consumer.dueToEffect().drain();
        // No job applied in the window: no latency to show, rather than a latency of 0.
        boolean some = latency != null && latency.count() > 0;
        sample.put("dueToEffectP50Seconds", some ? round(latency.p50Seconds()) : null);
        sample.put("dueToEffectP99Seconds", some ? round(latency.p99Seconds()) : null);
        sample.put("dueToEffectMaxSeconds", some ? round(latency.maxSeconds()) : null);
        synchronized (samples) {
            samples.addLast(sample);
            while (samples.size() > SAMPLES) {
                samples.removeFirst();
            }
        }
    }

    /**
     * How long the oldest unpublished outbox row has waited, in seconds to a tenth; 0 when none
     * has. The view {@code outbox_unpublished} written out (the roles may read its tables, not the
     * view), in two statements: each shard's position read first and written into the second as a literal,
     * which the planner sees, so it reads the rows after it through the primary key. With the
     * position in a subquery, the planner takes a third of the table to be after it and reads all
     * of it, every sample (an hour of rows with the default {@code OUTBOX_RETENTION}).
     */
    static Double outboxLag(Statement s) throws SQLException {
        List<String> afterPositions = new ArrayList<>();
        try (ResultSet rs = s.executeQuery(RELAY_POSITIONS)) {
            while (rs.next()) {
                afterPositions.add("(shard = " + rs.getInt(1) + " AND id > " + rs.getLong(2) + ")");
            }
        }
        if (afterPositions.isEmpty()) {
            return 0.0;
        }
        double seconds = single(
                        s,
                        "SELECT coalesce(extract(epoch FROM clock_timestamp() - min(completed_at)), 0) FROM outbox WHERE "
                                + String.join(" OR ", afterPositions))
                .doubleValue();
        return Math.round(seconds * 10) / 10.0;
    }

    /** Jobs completed per second since the previous sample ({@link #COMPLETED}), one decimal. */
    private Double completedPerSecond(Connection c) throws SQLException {
        try (java.sql.PreparedStatement p = c.prepareStatement(COMPLETED)) {
            p.setObject(1, completedUpTo);
            p.setObject(2, completedUpTo);
            try (ResultSet rs = p.executeQuery()) {
                rs.next();
                completedUpTo = rs.getObject(1, OffsetDateTime.class);
                double seconds = rs.getDouble(3);
                return seconds <= 0 ? null : Math.round(rs.getLong(2) / seconds * 10) / 10.0;
            }
        }
    }

    /** Effects this consumer applied per second since the previous sample; null at the first. */
    private Double appliedPerSecond() {
        long applied = consumer.applied().getAsLong();
        long now = System.nanoTime();
        Double rate = appliedBefore < 0 || now == appliedBeforeNanos
                ? null
                : Math.round((applied - appliedBefore) * 1e10 / (now - appliedBeforeNanos)) / 10.0;
        appliedBefore = applied;
        appliedBeforeNanos = now;
        return rate;
    }

    /** Seconds to the millisecond. */
    private static double round(double seconds) {
        return Math.round(seconds * 1000) / 1000.0;
    }

    private interface Query<T> {
        T run() throws SQLException;
    }

    private static <T> T orNull(Query<T> query) {
        try {
            return query.run();
        } catch (SQLException | RuntimeException e) {
            log.debug("dashboard query failed: {}", Faults.describe(e));
            return null;
        }
    }

    private static boolean[] visibility(Statement s) throws SQLException {
        try (ResultSet rs = s.executeQuery(VISIBLE)) {
            rs.next();
            boolean[] v = new boolean[7];
            for (int i = 0; i < v.length; i++) {
                v[i] = rs.getBoolean(i + 1);
            }
            return v;
        }
    }

    /** The first column of the query's row; null for none. */
    private static Number single(Statement s, String sql) throws SQLException {
        try (ResultSet rs = s.executeQuery(sql)) {
            return rs.next() ? (Number) rs.getObject(1) : null;
        }
    }

    /**
     * Every lease (each shard's its own role: docs/shards.md), and what waits for each shard's
     * holder where this service may read it: the shard's due jobs (up to 100,000) for a scheduler
     * lease, its unpublished outbox rows for a relay lease.
     */
    private static List<Map<String, Object>> leases(Connection c, boolean jobs, boolean outbox) throws SQLException {
        Map<String, Long> due = jobs ? orEmpty(() -> perShard(c, SHARD_DUE, "scheduler")) : Map.of();
        Map<String, Long> unpublished = outbox ? orEmpty(() -> perShard(c, SHARD_UNPUBLISHED, "relay")) : Map.of();
        List<Map<String, Object>> roles = new ArrayList<>();
        for (LeaseRow l : LeaseRow.all(c)) {
            Map<String, Object> r = new LinkedHashMap<>();
            r.put("role", l.role());
            r.put("holder", l.holderId());
            r.put("token", l.token().value());
            r.put("live", l.live());
            r.put("expiresInSeconds", l.secondsLeft());
            if (due.containsKey(l.role())) {
                r.put("dueJobs", due.get(l.role()));
            }
            if (unpublished.containsKey(l.role())) {
                r.put("unpublished", unpublished.get(l.role()));
            }
            roles.add(r);
        }
        return roles;
    }

    /** Each shard's due jobs, up to 100,000: shard, count. */
    static final String SHARD_DUE =
            "SELECT s, (SELECT count(*) FROM (SELECT 1 FROM jobs j WHERE j.state = 'pending' AND j.shard = s"
                    + " AND j.due_at <= clock_timestamp() LIMIT 100000) d) FROM unnest(shard_list()) s";
    /** Each shard's unpublished outbox rows, up to 100,000: shard, count. */
    static final String SHARD_UNPUBLISHED =
            "SELECT s, (SELECT count(*) FROM (SELECT 1 FROM outbox o WHERE o.shard = s AND o.id >"
                    + " coalesce((SELECT p.published_through FROM outbox_position p WHERE p.role = shard_role('relay', s)), 0)"
                    + " LIMIT 100000) u) FROM unnest(shard_list()) s";

    private static Map<String, Long> perShard(Connection c, String sql, String role) throws SQLException {
        Map<String, Long> byRole = new LinkedHashMap<>();
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery(sql)) {
            while (rs.next()) {
                int shard = rs.getInt(1);
                byRole.put(shard == 0 ? role : role + "/" + shard, rs.getLong(2));
            }
        }
        return byRole;
    }

    private static Map<String, Long> orEmpty(Query<Map<String, Long>> query) {
        Map<String, Long> m = orNull(query);
        return m == null ? Map.of() : m;
    }

    private static List<Map<String, Object>> timeline(Statement s) throws SQLException {
        List<Map<String, Object>> events = new ArrayList<>();
        try (ResultSet rs = s.executeQuery(TIMELINE)) {
            while (rs.next()) {
                Map<String, Object> e = new LinkedHashMap<>();
                e.put("role", rs.getString(1));
                e.put("token", rs.getLong(2));
                e.put("holder", rs.getString(3));
                e.put(
                        "acquiredAt",
                        rs.getObject(4, OffsetDateTime.class).toInstant().toString());
                events.add(e);
            }
        }
        return events;
    }

    private static Map<String, Object> deadLetters(Statement s) throws SQLException {
        try (ResultSet rs = s.executeQuery(DEAD_LETTERS)) {
            rs.next();
            Map<String, Object> d = new LinkedHashMap<>();
            d.put("toActOn", rs.getLong(1));
            d.put("replayed", rs.getLong(2));
            d.put("discarded", rs.getLong(3));
            return d;
        }
    }

    private static Map<String, Object> stale(Statement s) throws SQLException {
        try (ResultSet rs = s.executeQuery(STALE)) {
            rs.next();
            Map<String, Object> d = new LinkedHashMap<>();
            d.put("count", rs.getLong(1));
            OffsetDateTime last = rs.getObject(2, OffsetDateTime.class);
            d.put("last", last == null ? null : last.toInstant().toString());
            return d;
        }
    }

    @Override
    public void close() {
        closed = true;
        if (sampler != null) {
            sampler.interrupt();
        }
    }
}
