package dev.fencedjobs.bench;

import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.testing.CompletedJobs;
import dev.fencedjobs.testing.KafkaProcess;
import dev.fencedjobs.testing.TestKafka;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Upper bounds for the end-to-end rate, each with the whole machine to itself and nothing in the
 * way: no service, no lease renewals, no LISTEN, no purge, no waiting.
 *
 * <ul>
 *   <li>{@link #postgresOnly}: PostgreSQL doing only the row writes a job costs, in the services'
 *       batch sizes, with the four stages running at once on connections of their own (insert due
 *       jobs; complete them and write their outbox rows; read past the relay's position and move it;
 *       claim the ids, raise the fences and write the effect rows), the outbox rows handed from the
 *       third stage to the fourth in memory instead of through Kafka.
 *   <li>{@link #kafkaOnly}: Kafka doing only the produce and the consume: envelopes of the real size
 *       sent continuously with the relay's producer settings, read with {@code read_committed},
 *       parsed, and their offsets committed after each poll, as the consumer does.
 * </ul>
 *
 * Both run on the same machine as the system does, so the lower of the two is a bound: the system
 * needs both and they share the cores.
 */
final class PipelinedBound {

    private PipelinedBound() {}

    static final int DISPATCH_BATCH = 500;
    static final int RELAY_BATCH = 2000;

    /**
     * The dispatcher's batch as one statement (FencedJobBatches): a batch of due pending jobs that
     * also match {@code condition}, in due order, completed with token 1 and their outbox rows
     * written. The completion trigger accepts token 1 once {@link CompletedJobs#LEASE} has run.
     */
    static String completeDue(String condition) {
        return completeDue(condition, 0, 1);
    }

    /** {@link #completeDue(String)} of one shard's jobs, with its lease's token. */
    static String completeDue(String condition, int shard, long token) {
        return "WITH due AS (SELECT id FROM jobs WHERE state = 'pending' AND shard = " + shard
                + " AND due_at <= clock_timestamp() AND " + condition
                + " ORDER BY due_at, id LIMIT " + DISPATCH_BATCH + " FOR UPDATE SKIP LOCKED),"
                + " done AS (UPDATE jobs SET state = 'completed', completed_by_token = " + token
                + ", completed_at = clock_timestamp()"
                + " FROM due WHERE jobs.id = due.id RETURNING jobs.id, jobs.resource, jobs.payload, jobs.due_at, jobs.completed_at,"
                + " jobs.created_at)"
                + " INSERT INTO outbox (job_id, shard, resource, fencing_token, payload, due_at, completed_at, job_created_at)"
                + " SELECT id, " + shard + ", resource, " + token
                + ", payload, due_at, completed_at, created_at FROM done ORDER BY due_at, id";
    }

    /** Effect rows written per second over {@code seconds}, after {@code warmUpSeconds}. */
    static double postgresOnly(BenchPostgres pg, int warmUpSeconds, int seconds) throws Exception {
        String url = pg.freshDatabase("bound_pg");
        DatabaseConfig db = DatabaseConfig.of(url, pg.user(), pg.password())
                .withPoolSize(2)
                .withConnectTimeout(Duration.ofSeconds(5))
                .withServerTimeouts(Duration.ofSeconds(60), Duration.ofSeconds(10), Duration.ofSeconds(60));
        Database.migrate(db, Database.MIGRATIONS, Database.HISTORY_TABLE, 0);
        Database.migrate(db, FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE, 0);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Exception> failure = new AtomicReference<>();
        BlockingQueue<List<Object[]>> published = new ArrayBlockingQueue<>(4);
        List<Thread> stages = new ArrayList<>();
        stages.add(stage("bound-producer", failure, () -> {
            try (Connection c = connect(pg, url);
                    Statement s = c.createStatement()) {
                long inserted = 0;
                while (!stop.get()) {
                    // At most 50,000 jobs between INSERT and effect, as e2e's loader keeps them.
                    if (inserted - BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM ledger") >= 50_000) {
                        Thread.sleep(5);
                    } else {
                        inserted += s.executeUpdate(String.format(BenchStack.INSERT_DUE, 5000));
                    }
                }
            }
        }));
        stages.add(stage("bound-dispatcher", failure, () -> {
            try (Connection c = connect(pg, url);
                    Statement s = c.createStatement();
                    PreparedStatement guard = c.prepareStatement(
                            "SELECT fencing_token FROM leader_lease WHERE role = 'scheduler' FOR UPDATE");
                    // As the dispatcher does, each batch starts after the last job the one before completed
                    // (the jobs come due in insertion order here, so nothing is ever left behind it).
                    PreparedStatement complete =
                            c.prepareStatement(completeDue("(due_at, id) > (?, ?)") + " RETURNING job_id, due_at")) {
                // The completion trigger accepts only the scheduler lease's token: the loop holds token 1 of a lease of
                // its own.
                s.execute(CompletedJobs.LEASE);
                // The plan the dispatcher's batch runs with (FencedJobBatches: SET LOCAL enable_sort = off in
                // each batch): jobs_pending_due read in order. Without it, on this fresh database's jobs table,
                // with no statistics until autovacuum's first ANALYZE, PostgreSQL sorts every pending job under
                // the row locks: a window's rate then hung on when that ANALYZE came.
                s.execute("SET enable_sort = off");
                c.setAutoCommit(false);
                OffsetDateTime afterDue = OffsetDateTime.parse("2000-01-01T00:00:00Z");
                long afterId = 0;
                while (!stop.get()) {
                    try (ResultSet ignored = guard.executeQuery()) {
                        // The lease row lock, as the dispatcher's guard takes it.
                    }
                    complete.setObject(1, afterDue);
                    complete.setLong(2, afterId);
                    int n = 0;
                    try (ResultSet r = complete.executeQuery()) {
                        while (r.next()) {
                            n++;
                            OffsetDateTime due = r.getObject(2, OffsetDateTime.class);
                            int c0 = due.toInstant().compareTo(afterDue.toInstant());
                            if (c0 > 0 || (c0 == 0 && r.getLong(1) > afterId)) {
                                afterDue = due;
                                afterId = r.getLong(1);
                            }
                        }
                    }
                    c.commit();
                    if (n == 0) {
                        Thread.sleep(1);
                    }
                }
            }
        }));
        stages.add(stage("bound-relay", failure, () -> {
            try (Connection c = connect(pg, url);
                    // As the relay reads: its position first, then the rows after it, the position a value
                    // the planner sees (JooqOutboxStore).
                    PreparedStatement position =
                            c.prepareStatement("SELECT published_through FROM outbox_position WHERE role = 'relay'");
                    PreparedStatement read = c.prepareStatement(
                            "SELECT id, job_id, resource, fencing_token, payload::text, job_created_at FROM outbox"
                                    + " WHERE id > ? ORDER BY id LIMIT " + RELAY_BATCH);
                    PreparedStatement mark = c.prepareStatement(
                            "UPDATE outbox_position SET published_through = ?, updated_at = clock_timestamp()"
                                    + " WHERE role = 'relay' AND published_through < ?")) {
                while (!stop.get()) {
                    List<Object[]> rows = new ArrayList<>(RELAY_BATCH);
                    try (ResultSet p = position.executeQuery()) {
                        p.next();
                        read.setLong(1, p.getLong(1));
                    }
                    try (ResultSet r = read.executeQuery()) {
                        while (r.next()) {
                            rows.add(new Object[] {
                                r.getLong(2),
                                r.getString(3),
                                r.getLong(4),
                                r.getString(5),
                                r.getObject(6, OffsetDateTime.class)
                            });
                            mark.setLong(1, r.getLong(1));
                            mark.setLong(2, r.getLong(1));
                        }
                    }
                    if (rows.isEmpty()) {
                        Thread.sleep(1);
                        continue;
                    }
                    mark.executeUpdate();
                    while (!published.offer(rows, 100, TimeUnit.MILLISECONDS)) {
                        if (stop.get()) {
                            return;
                        }
                    }
                }
            }
        }));
        stages.add(stage("bound-consumer", failure, () -> {
            try (Connection c = connect(pg, url);
                    PreparedStatement claim = c.prepareStatement(
                            "INSERT INTO consumer_processed (job_id, job_created_at, resource, fencing_token, outcome,"
                                    + " processed_at) SELECT j, t0, r, t, 'applied', clock_timestamp()"
                                    + " FROM unnest(?::bigint[], ?::timestamptz[], ?::varchar[], ?::bigint[]) AS u(j, t0, r, t)"
                                    + " ON CONFLICT (job_id) DO NOTHING RETURNING job_id");
                    PreparedStatement fence = c.prepareStatement(
                            "INSERT INTO consumer_resource_fence (resource, highest_token, updated_at)"
                                    + " SELECT r, max(t), clock_timestamp() FROM unnest(?::varchar[], ?::bigint[]) AS u(r, t) GROUP BY r ORDER BY r"
                                    + " ON CONFLICT (resource) DO UPDATE SET highest_token = greatest(consumer_resource_fence.highest_token,"
                                    + " excluded.highest_token), updated_at = excluded.updated_at");
                    PreparedStatement effect = c.prepareStatement(
                            "INSERT INTO ledger (job_id, job_created_at, resource, fencing_token, payload, applied_at)"
                                    + " SELECT j, t0, r, t, p::jsonb, clock_timestamp()"
                                    + " FROM unnest(?::bigint[], ?::timestamptz[], ?::varchar[], ?::bigint[], ?::text[]) AS u(j, t0, r, t, p)")) {
                c.setAutoCommit(false);
                while (!stop.get()) {
                    List<Object[]> rows = published.poll(100, TimeUnit.MILLISECONDS);
                    if (rows == null) {
                        continue;
                    }
                    int n = rows.size();
                    Object[] ids = new Object[n];
                    Object[] created = new Object[n];
                    Object[] resources = new Object[n];
                    Object[] tokens = new Object[n];
                    Object[] payloads = new Object[n];
                    for (int i = 0; i < n; i++) {
                        ids[i] = rows.get(i)[0];
                        resources[i] = rows.get(i)[1];
                        tokens[i] = rows.get(i)[2];
                        payloads[i] = rows.get(i)[3];
                        created[i] = rows.get(i)[4];
                    }
                    claim.setArray(1, c.createArrayOf("bigint", ids));
                    claim.setArray(2, c.createArrayOf("timestamptz", created));
                    claim.setArray(3, c.createArrayOf("varchar", resources));
                    claim.setArray(4, c.createArrayOf("bigint", tokens));
                    try (ResultSet ignored = claim.executeQuery()) {
                        // Every id is new here; the claim is the cost being measured.
                    }
                    fence.setArray(1, c.createArrayOf("varchar", resources));
                    fence.setArray(2, c.createArrayOf("bigint", tokens));
                    fence.executeUpdate();
                    effect.setArray(1, c.createArrayOf("bigint", ids));
                    effect.setArray(2, c.createArrayOf("timestamptz", created));
                    effect.setArray(3, c.createArrayOf("varchar", resources));
                    effect.setArray(4, c.createArrayOf("bigint", tokens));
                    effect.setArray(5, c.createArrayOf("text", payloads));
                    effect.executeUpdate();
                    c.commit();
                }
            }
        }));
        stages.forEach(Thread::start);
        try (Connection c = connect(pg, url);
                Statement s = c.createStatement()) {
            return window(
                    stop,
                    failure,
                    stages,
                    warmUpSeconds,
                    seconds,
                    () -> BenchStack.scalar(s, "SELECT coalesce(max(id), 0) FROM ledger"),
                    s);
        } finally {
            // Gone at once: left, its half a million dead and live rows kept autovacuum busy through the
            // next window (measured: every second of it), which then ran slower than the first.
            pg.dropDatabase(url);
        }
    }

    /** Records consumed per second over {@code seconds}, after {@code warmUpSeconds}. */
    static double kafkaOnly(KafkaProcess kafka, int warmUpSeconds, int seconds) throws Exception {
        String topic = "bound-kafka";
        TestKafka.createTopic(kafka.bootstrapServers(), topic, BenchStack.PARTITIONS);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Exception> failure = new AtomicReference<>();
        AtomicLong consumed = new AtomicLong();
        List<Thread> stages = new ArrayList<>();
        stages.add(stage("bound-kafka-producer", failure, () -> {
            Properties p = new Properties();
            p.put("bootstrap.servers", kafka.bootstrapServers());
            p.put("enable.idempotence", "true");
            p.put("acks", "all");
            p.put("linger.ms", "2");
            p.put("batch.size", Integer.toString(256 * 1024));
            p.put("max.in.flight.requests.per.connection", "1");
            try (KafkaProducer<String, byte[]> producer =
                    new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
                OffsetDateTime now = OffsetDateTime.now(ZoneOffset.UTC);
                for (long id = 1; !stop.get(); id++) {
                    String resource = "account-" + id % BenchStack.RESOURCES;
                    Envelope e = new Envelope(
                            Envelope.VERSION,
                            id,
                            id,
                            resource,
                            FencingToken.of(1),
                            "{\"cents\": 100}",
                            now,
                            now,
                            now,
                            CompletedJobs.HOLDER,
                            now);
                    ProducerRecord<String, byte[]> record = new ProducerRecord<>(topic, resource, e.toJson());
                    record.headers().add(Envelope.JOB_ID_HEADER, Envelope.header(id));
                    record.headers().add(Envelope.TOKEN_HEADER, Envelope.header(1));
                    record.headers().add(Envelope.OUTBOX_ID_HEADER, Envelope.header(id));
                    record.headers().add(Envelope.VERSION_HEADER, Envelope.header(Envelope.VERSION));
                    // A send that fails ends the bound as any stage's failure does; its future is not waited for.
                    Future<RecordMetadata> unused = producer.send(record, (metadata, error) -> {
                        if (error != null) {
                            failure.compareAndSet(null, error);
                        }
                    });
                    // Stay a bounded distance ahead of the consumer, as the system's backlog does.
                    while (id - consumed.get() > 100_000 && !stop.get()) {
                        Thread.sleep(1);
                    }
                }
            }
        }));
        stages.add(stage("bound-kafka-consumer", failure, () -> {
            Properties p = new Properties();
            p.put("bootstrap.servers", kafka.bootstrapServers());
            p.put("group.id", "bound-kafka");
            p.put("enable.auto.commit", "false");
            p.put("isolation.level", "read_committed");
            p.put("auto.offset.reset", "earliest");
            p.put("max.poll.records", Integer.toString(RELAY_BATCH));
            try (KafkaConsumer<String, byte[]> consumer =
                    new KafkaConsumer<>(p, new StringDeserializer(), new ByteArrayDeserializer())) {
                consumer.subscribe(List.of(topic));
                while (!stop.get()) {
                    ConsumerRecords<String, byte[]> records = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<String, byte[]> r : records) {
                        Envelope.parse(r.value());
                    }
                    if (!records.isEmpty()) {
                        consumer.commitSync();
                        consumed.addAndGet(records.count());
                    }
                }
            }
        }));
        stages.forEach(Thread::start);
        return window(stop, failure, stages, warmUpSeconds, seconds, consumed::get, null);
    }

    private interface Counter {
        long get() throws Exception;
    }

    private interface Body {
        void run() throws Exception;
    }

    private static Thread stage(String name, AtomicReference<Exception> failure, Body body) {
        return new Thread(
                () -> {
                    try {
                        body.run();
                    } catch (Exception e) {
                        failure.compareAndSet(null, e);
                    }
                },
                name);
    }

    private static double window(
            AtomicBoolean stop,
            AtomicReference<Exception> failure,
            List<Thread> stages,
            int warmUpSeconds,
            int seconds,
            Counter counter,
            Statement server)
            throws Exception {
        try {
            warmUp(warmUpSeconds);
            long jit0 = BenchStack.ownCompilerTicks();
            long[] background0 = server == null ? null : BenchStack.backgroundWork(server);
            long wal0 = server == null ? 0 : BenchStack.scalar(server, BenchStack.WAL_BYTES);
            MachineCounters machine0 = MachineCounters.read();
            long c0 = counter.get();
            long t0 = System.nanoTime();
            // Each second: its rate, and whether an autovacuum worker ran (on any database of the server).
            int vacuuming = 0;
            List<Double> perSecond = new ArrayList<>(seconds);
            long last = c0;
            long lastAt = t0;
            for (int i = 0; i < seconds; i++) {
                Thread.sleep(1000L);
                long now = counter.get();
                long at = System.nanoTime();
                perSecond.add((now - last) / ((at - lastAt) / 1e9));
                last = now;
                lastAt = at;
                if (server != null
                        && BenchStack.scalar(
                                        server,
                                        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'")
                                > 0) {
                    vacuuming++;
                }
            }
            long c1 = counter.get();
            long t1 = System.nanoTime();
            long jit = BenchStack.ownCompilerTicks() - jit0;
            if (failure.get() != null) {
                throw failure.get();
            }
            double rate = (c1 - c0) / ((t1 - t0) / 1e9);
            String background = "";
            if (server != null) {
                long[] background1 = BenchStack.backgroundWork(server);
                long wal = BenchStack.scalar(server, BenchStack.WAL_BYTES) - wal0;
                background = String.format(
                        Locale.ROOT,
                        "; autovacuum at work in %d of its %d seconds, %d checkpoint(s), %,.0f MB of WAL",
                        vacuuming,
                        seconds,
                        background1[1] - background0[1],
                        wal / 1e6);
            }
            System.out.printf(
                    Locale.ROOT,
                    "   %,d in %.1f s: %,.0f per second (this JVM's JIT compilers meanwhile: %.1f s of CPU%s)%n",
                    c1 - c0,
                    (t1 - t0) / 1e9,
                    rate,
                    jit / 100.0,
                    background);
            List<Double> sorted = perSecond.stream().sorted().toList();
            System.out.printf(
                    Locale.ROOT,
                    "     its seconds: slowest %,.0f, median %,.0f, fastest %,.0f per second; %s%n",
                    sorted.get(0),
                    BenchSql.median(perSecond),
                    sorted.get(sorted.size() - 1),
                    MachineCounters.read().since(machine0));
            return rate;
        } finally {
            stop.set(true);
            for (Thread t : stages) {
                t.join();
            }
        }
    }

    /**
     * At least {@code seconds}, then until this JVM's JIT compilers are quiet
     * ({@link BenchStack#untilCompilersQuiet}): the stages run in this JVM, and a window that begins
     * while C2 still compiles them measures the compiler too, on two cores. (It is not what makes
     * the bound's windows differ by up to twice: see docs/performance.md.)
     */
    private static void warmUp(int seconds) throws InterruptedException {
        System.out.printf(
                Locale.ROOT,
                "   warmed up for %.0f s (this JVM's JIT compilers quiet)%n",
                BenchStack.untilCompilersQuiet(seconds, BenchStack::ownCompilerTicks));
    }

    private static Connection connect(BenchPostgres pg, String url) throws SQLException {
        return DriverManager.getConnection(url, pg.user(), pg.password());
    }
}
