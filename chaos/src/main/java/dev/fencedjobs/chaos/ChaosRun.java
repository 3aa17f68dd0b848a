package dev.fencedjobs.chaos;

import dev.fencedjobs.consumer.FencedConsumer;
import dev.fencedjobs.db.Database;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Roles;
import dev.fencedjobs.runtime.Envelope;
import dev.fencedjobs.testing.KafkaCluster;
import dev.fencedjobs.testing.StreamingPostgres;
import dev.fencedjobs.testing.TestKafka;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
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
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The fault-injection run. Starts a real PostgreSQL primary with a synchronous streaming standby, a
 * real Kafka cluster (three brokers, or one), three dispatchers, two relays and two consumers from
 * their packaged jars (each service reaching the database through its own {@link TcpProxy}, on a
 * multi-host URL with {@code targetServerType=primary}), inserts jobs with SQL the whole time, and injects a fault schedule drawn
 * from a seed. Then it stops the load, heals everything, waits for the system to drain, records the
 * database and the topic, and hands them to the {@link Checker}.
 *
 * <pre>
 * java -jar chaos/target/fenced-jobs-chaos.jar [--seconds N] [--seed S] [--rate JOBS_PER_S] [--lease DURATION_MS] [--faults K,K] [--brokers N]
 *                                               [--out DIR] [--record FILE] [--repo DIR]
 * java -jar chaos/target/fenced-jobs-chaos.jar --check FILE
 * </pre>
 */
public final class ChaosRun {

    /** Every kind of fault the schedule mixes; a run injects each at least once. */
    public enum Kind {
        KILL_DISPATCHER_LEADER("kill-dispatcher-leader"),
        KILL_RELAY_LEADER("kill-relay-leader"),
        KILL_CONSUMER("kill-consumer"),
        PAUSE_DISPATCHER_LEADER("pause-dispatcher-leader"),
        PAUSE_RELAY_LEADER("pause-relay-leader"),
        PARTITION_FROM_DATABASE("partition-from-db"),
        RESTART_POSTGRES("restart-postgres"),
        FAILOVER_POSTGRES("failover-postgres"),
        RESTART_KAFKA("restart-kafka"),
        GRACEFUL_RESTART("sigterm-restart"),
        KILL_BROKER("kill-broker", 3),
        MOVE_LEADERS("move-leaders", 3);

        public final String label;
        /** The fewest brokers the kind makes sense with. */
        final int brokers;

        Kind(String label) {
            this(label, 1);
        }

        Kind(String label, int brokers) {
            this.label = label;
            this.brokers = brokers;
        }

        /** Every kind a cluster of this many brokers can have. */
        static List<Kind> all(int brokers) {
            return Arrays.stream(values()).filter(k -> k.brokers <= brokers).toList();
        }
    }

    /** How a run is shaped. */
    public record Options(long seconds, long seed, int rate, long leaseMillis, Path out, Path record, Path repo, Duration drainTimeout,
            List<Kind> faults, int brokers) {

        public Options {
            faults = List.copyOf(faults);
            if (faults.isEmpty()) {
                throw new IllegalArgumentException("at least one kind of fault");
            }
            if (brokers != 1 && brokers != 3) {
                throw new IllegalArgumentException("--brokers must be 1 or 3, got " + brokers);
            }
            for (Kind k : faults) {
                if (k.brokers > brokers) {
                    throw new IllegalArgumentException(k.label + " needs --brokers " + k.brokers);
                }
            }
        }

        static Options defaults() {
            return new Options(120, System.nanoTime() & 0xffffff, 200, 5000, Path.of("target", "chaos"), null, Path.of("."),
                    Duration.ofMinutes(4), Kind.all(3), 3);
        }
    }

    /** Kinds by label, comma-separated: {@code pause-relay-leader,restart-kafka}. */
    static List<Kind> kinds(String labels) {
        List<Kind> kinds = new ArrayList<>();
        for (String label : labels.split(",")) {
            String l = label.strip();
            kinds.add(Arrays.stream(Kind.values()).filter(k -> k.label.equals(l)).findFirst()
                    .orElseThrow(() -> new IllegalArgumentException("unknown fault '" + l + "'; the kinds are "
                            + Arrays.stream(Kind.values()).map(k -> k.label).toList())));
        }
        return kinds;
    }

    static final String DATABASE = "fencedjobs";
    static final String OWNER = "fencedjobs";
    static final String TOPIC = "fenced-jobs";
    static final int PARTITIONS = 6;
    static final int RESOURCES = 50;
    static final long FORGED_JOB_BASE = 9_000_000_000_000L;

    private final Options options;
    private final Random random;
    private final History history = new History();
    private final long startNanos = System.nanoTime();
    private final List<Service> services = new ArrayList<>();
    private final List<String> crashes = new CopyOnWriteArrayList<>();
    private StreamingPostgres postgres;
    private KafkaCluster kafka;
    private String ownerUrl;
    private int forgeRounds;
    private volatile String configurationError;

    ChaosRun(Options options) {
        this.options = options;
        this.random = new Random(options.seed());
        this.history.seed = Long.toString(options.seed());
    }

    /** Runs the whole suite once and returns the checker's verdict (already printed). */
    public Checker.Result run() throws Exception {
        log("seed " + options.seed() + ", " + options.seconds() + " s of faults, " + options.rate() + " jobs/s, lease "
                + options.leaseMillis() + " ms, " + options.brokers() + " Kafka broker(s); logs in " + options.out().toAbsolutePath());
        Files.createDirectories(options.out());
        LoadGenerator load = null;
        Thread monitor = null;
        Checker.Result result = null;
        try {
            startServers();
            startServices();
            startSchedules();
            monitor = new Thread(this::watchForCrashes, "chaos-monitor");
            monitor.setDaemon(true);
            monitor.start();
            load = new LoadGenerator();
            load.start();
            forge();
            injectFaults();
            healAll();
            load.finish();
            pauseSchedules(SCHEDULES);
            log("load stopped: " + load.submitted.size() + " jobs inserted, schedules paused; draining");
            drain(load.submitted.size());
            stopServices();
            monitor.interrupt();
            history.submitted = load.submitted;
            history.crashes = List.copyOf(crashes);
            Recorder.readTopic(kafka.bootstrapServers(), TOPIC, history, Duration.ofMinutes(2));
            try (Connection c = owner()) {
                Recorder.readDatabase(c, history);
            }
            result = Checker.check(history);
        } finally {
            if (monitor != null) {
                monitor.interrupt();
            }
            if (load != null) {
                load.stop = true;
            }
            for (Service s : services) {
                if (s.alive()) {
                    s.kill();
                }
                s.proxy.close();
            }
            if (kafka != null && result != null && !result.ok()) {
                kafka.killAll();
                for (int i = 0; i < kafka.size(); i++) {
                    log("broker " + (i + 1) + " log and data kept in " + kafka.directory(i) + "; print the topic's batches and markers with"
                            + " java -cp fenced-jobs-chaos.jar dev.fencedjobs.chaos.LogDump " + kafka.directory(i).resolve("data") + " "
                            + TOPIC + " [OUTBOX_ID...]");
                }
            } else if (kafka != null) {
                kafka.close();
            }
            if (postgres != null) {
                postgres.close();
            }
        }
        if (options.record() != null || !result.ok()) {
            Path file = options.record() != null ? options.record() : options.out().resolve("history-" + options.seed() + ".json.gz");
            history.save(file);
            log("history saved to " + file.toAbsolutePath() + " (check it again with --check)");
        }
        report(result);
        return result;
    }

    static void report(Checker.Result result) {
        int shown = 0;
        for (Checker.Violation v : result.violations()) {
            if (shown++ == 50) {
                System.out.println("... and " + (result.violations().size() - 50) + " more violations");
                break;
            }
            System.out.println(v);
        }
        System.out.println(result.summary());
    }

    // ---------------------------------------------------------------- servers and services

    private void startServers() throws Exception {
        log("starting PostgreSQL (a primary and a synchronous standby) and "
                + (options.brokers() == 1 ? "a Kafka broker" : options.brokers() + " Kafka brokers"));
        postgres = new StreamingPostgres(StreamingPostgres.Replication.SYNCHRONOUS);
        postgres.executeOnPrimary("postgres", "CREATE ROLE " + OWNER + " LOGIN CREATEROLE PASSWORD '" + OWNER + "'");
        postgres.executeOnPrimary("postgres", "CREATE DATABASE " + DATABASE + " OWNER " + OWNER);
        ownerUrl = postgres.url(DATABASE);
        DatabaseConfig owner = DatabaseConfig.of(ownerUrl, OWNER, OWNER).withPoolSize(2).withConnectTimeout(Duration.ofSeconds(5))
                .withServerTimeouts(Duration.ofSeconds(30), Duration.ofSeconds(10), Duration.ofSeconds(30));
        Database.migrate(owner, Database.MIGRATIONS, Database.HISTORY_TABLE, 0);
        Database.migrate(owner, FencedConsumer.MIGRATIONS, FencedConsumer.HISTORY_TABLE, 0);
        try (Connection c = owner()) {
            Roles.apply(c, Map.of(Roles.DISPATCHER, "dispatcher", Roles.RELAY, "relay", Roles.CONSUMER, "consumer", Roles.PRODUCER, "producer"));
        }
        kafka = new KafkaCluster(options.brokers());
        TestKafka.createTopic(kafka.bootstrapServers(), TOPIC, PARTITIONS, (short) kafka.size());
    }

    private void startServices() throws IOException {
        Path repo = options.repo();
        Path dispatcherJar = repo.resolve("dispatcher/target/fenced-jobs-dispatcher.jar");
        Path relayJar = repo.resolve("relay/target/fenced-jobs-relay.jar");
        Path consumerJar = repo.resolve("consumer/target/fenced-jobs-consumer.jar");
        for (int i = 1; i <= 3; i++) {
            addService("dispatcher-" + i, "dispatcher", dispatcherJar, Roles.DISPATCHER, "dispatcher", Map.of());
        }
        for (int i = 1; i <= 2; i++) {
            addService("relay-" + i, "relay", relayJar, Roles.RELAY, "relay",
                    Map.of("OUTBOX_RETENTION", "1000h", "KAFKA_TOPIC_PARTITIONS", Integer.toString(PARTITIONS),
                            "KAFKA_TOPIC_REPLICATION", Integer.toString(kafka.size())));
        }
        for (int i = 1; i <= 2; i++) {
            addService("consumer-" + i, "consumer", consumerJar, Roles.CONSUMER, "consumer", Map.of("PROCESSED_RETENTION", "1000h"));
        }
        log("starting " + services.size() + " services: 3 dispatchers, 2 relays, 2 consumers");
        services.forEach(Service::start);
    }

    private void addService(String name, String kind, Path jar, String role, String password, Map<String, String> extra) throws IOException {
        TcpProxy proxy = new TcpProxy(name, postgres.port(0), postgres.port(1));
        Map<String, String> env = new HashMap<>();
        env.put("DATABASE_URL", "jdbc:postgresql://" + proxy.hosts() + "/" + DATABASE + "?targetServerType=primary&hostRecheckSeconds=1");
        env.put("DATABASE_USER", role);
        env.put("DATABASE_PASSWORD", password);
        env.put("DATABASE_MIGRATE", "false");
        env.put("HTTP_PORT", "0");
        env.put("KAFKA_BOOTSTRAP_SERVERS", kafka.bootstrapServers());
        env.put("KAFKA_TOPIC", TOPIC);
        env.put("LEASE_DURATION", options.leaseMillis() + "ms");
        env.put("RENEW_INTERVAL", Math.max(100, options.leaseMillis() / 5) + "ms");
        env.putAll(extra);
        services.add(new Service(name, kind, jar, env, proxy, options.out(), List.of("-Xmx128m", "-XX:+UseSerialGC")));
    }

    private Connection owner() throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", OWNER);
        p.setProperty("password", OWNER);
        p.setProperty("connectTimeout", "5");
        p.setProperty("socketTimeout", "60");
        return DriverManager.getConnection(ownerUrl, p);
    }

    private void watchForCrashes() {
        while (!Thread.currentThread().isInterrupted()) {
            for (Service s : services) {
                synchronized (s) {
                    if (s.crashed() && s.exitCode() == 2) {
                        configurationError = s.name + " refused its configuration (exit code 2); see " + options.out().resolve(s.name + ".log");
                        log(configurationError);
                        return;
                    }
                    if (s.crashed()) {
                        String crash = s.name + " exited by itself with code " + s.exitCode() + " at +" + elapsedSeconds() + " s; see "
                                + options.out().resolve(s.name + ".log");
                        log("CRASH: " + crash + "; starting it again");
                        crashes.add(crash);
                        s.start();
                    }
                }
            }
            try {
                Thread.sleep(500);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    // ---------------------------------------------------------------- faults

    private void injectFaults() throws Exception {
        List<Kind> kinds = options.faults();
        List<Kind> order = new ArrayList<>(kinds);
        Collections.shuffle(order, random);
        long end = startNanos + TimeUnit.SECONDS.toNanos(options.seconds());
        int n = 0;
        while (n < order.size() || System.nanoTime() < end) {
            Kind kind = n < order.size() ? order.get(n) : kinds.get(random.nextInt(kinds.size()));
            sleep(2000 + random.nextInt(4000));
            inject(kind);
            n++;
            if (n % 3 == 0) {
                pauseSchedules(List.of(TOGGLED_SCHEDULE), n % 2 == 1);
            }
            if (n % 4 == 0) {
                forge();
            }
        }
        log(n + " faults injected");
    }

    /**
     * Schedules that fire through every fault: a fast interval (misfire policy all), a cron
     * schedule (latest), and one the runner pauses and resumes (skip). The checker's invariant
     * "schedule occurrences" finds each occurrence as exactly one job or one recorded skip.
     */
    static final List<String> SCHEDULES = List.of("chaos-fast", "chaos-cron", "chaos-toggled");
    static final String TOGGLED_SCHEDULE = "chaos-toggled";

    private void startSchedules() throws SQLException {
        try (Connection c = owner(); Statement s = c.createStatement()) {
            s.execute("INSERT INTO schedules (name, every, misfire, resource) VALUES ('chaos-fast', interval '250 milliseconds', 'all', 'sched-fast')");
            s.execute("INSERT INTO schedules (name, cron, misfire, resource) VALUES ('chaos-cron', '* * * * *', 'latest', 'sched-cron')");
            s.execute("INSERT INTO schedules (name, every, misfire, resource) VALUES ('chaos-toggled', interval '400 milliseconds', 'skip', 'sched-toggled')");
        }
        log("schedules: " + SCHEDULES);
    }

    private void pauseSchedules(List<String> names) throws SQLException {
        pauseSchedules(names, true);
    }

    /** Pauses or resumes, and records the database time of each change for the checker. */
    private void pauseSchedules(List<String> names, boolean paused) throws SQLException {
        try (Connection c = owner();
                PreparedStatement ps = c.prepareStatement("UPDATE schedules SET paused = ? WHERE name = ANY (?) AND paused <> ? "
                        + "RETURNING name, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")) {
            ps.setBoolean(1, paused);
            ps.setArray(2, c.createArrayOf("varchar", names.toArray()));
            ps.setBoolean(3, paused);
            try (ResultSet r = ps.executeQuery()) {
                while (r.next()) {
                    history.schedulePauses.add(new History.SchedulePause(r.getString(1), r.getLong(2), paused));
                    log((paused ? "paused" : "resumed") + " schedule " + r.getString(1));
                }
            }
        }
    }

    private void inject(Kind kind) throws Exception {
        long at = elapsedMillis();
        long started = System.nanoTime();
        String target;
        switch (kind) {
            case KILL_DISPATCHER_LEADER, KILL_RELAY_LEADER, KILL_CONSUMER -> {
                Service s = kind == Kind.KILL_CONSUMER ? pick("consumer") : leader(kind == Kind.KILL_DISPATCHER_LEADER ? "scheduler" : "relay");
                target = s.toString();
                long down = 500 + random.nextInt(2500);
                log("fault " + kind.label + ": SIGKILL " + target + ", start again in " + down + " ms");
                s.kill();
                sleep(down);
                s.start();
            }
            case PAUSE_DISPATCHER_LEADER, PAUSE_RELAY_LEADER -> {
                Service s = leader(kind == Kind.PAUSE_DISPATCHER_LEADER ? "scheduler" : "relay");
                target = s.toString();
                long hold = options.leaseMillis() + 1000 + random.nextInt(4000);
                log("fault " + kind.label + ": SIGSTOP " + target + " for " + hold + " ms (lease " + options.leaseMillis() + " ms)");
                s.pause();
                sleep(hold);
                s.resume();
            }
            case PARTITION_FROM_DATABASE -> {
                boolean hitLeader = random.nextBoolean();
                Service s = hitLeader ? leader(random.nextBoolean() ? "scheduler" : "relay") : pick(null);
                target = s.toString();
                long hold = 1000 + random.nextInt((int) options.leaseMillis() * 2);
                log("fault " + kind.label + ": cut " + target + " off from PostgreSQL for " + hold + " ms");
                s.proxy.partition();
                sleep(hold);
                s.proxy.heal();
            }
            case RESTART_POSTGRES -> {
                long down = 500 + random.nextInt(3000);
                target = "postgresql primary";
                log("fault " + kind.label + ": stop the PostgreSQL primary (fast shutdown), start it again in " + down + " ms");
                postgres.restartPrimary(Duration.ofMillis(down));
            }
            case FAILOVER_POSTGRES -> {
                int from = postgres.primary();
                target = "postgresql primary (server " + from + ")";
                log("fault " + kind.label + ": SIGKILL the PostgreSQL primary (server " + from + "), promote the synchronous standby");
                postgres.killPrimary();
                postgres.promoteStandby();
                log("failover: server " + postgres.primary() + " promoted after " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started)
                        + " ms; rebuilding server " + from + " as its standby");
                postgres.rebuildStandby();
                log("failover: server " + from + " streams again, " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started)
                        + " ms after the kill");
            }
            case RESTART_KAFKA -> {
                boolean hard = random.nextBoolean();
                long down = 1000 + random.nextInt(5000);
                String all = kafka.size() == 1 ? "the broker" : "all " + kafka.size() + " brokers";
                target = "kafka, " + all + " (" + (hard ? "SIGKILL" : "SIGTERM") + ")";
                log("fault " + kind.label + ": stop " + all + " with " + (hard ? "SIGKILL" : "SIGTERM") + ", start again in " + down + " ms");
                if (hard) {
                    kafka.killAll();
                } else {
                    kafka.stopAll();
                }
                sleep(down);
                kafka.startAll();
            }
            case KILL_BROKER -> {
                int broker = random.nextInt(kafka.size());
                long down = 1000 + random.nextInt(5000);
                target = "kafka broker " + (broker + 1);
                log("fault " + kind.label + ": SIGKILL broker " + (broker + 1) + " of " + kafka.size() + ", start again in " + down + " ms");
                kafka.kill(broker);
                sleep(down);
                kafka.start(broker);
            }
            case MOVE_LEADERS -> {
                target = "kafka leaders of " + TOPIC;
                int moved = kafka.moveLeaders(TOPIC);
                log("fault " + kind.label + ": rotated every partition's replicas and elected the preferred leaders; " + moved + " of "
                        + PARTITIONS + " partitions changed leader");
            }
            case GRACEFUL_RESTART -> {
                Service s = pick(null);
                target = s.toString();
                log("fault " + kind.label + ": SIGTERM " + target + " and start it again");
                int code = s.terminate();
                if (!graceful(code)) {
                    crashes.add(s.name + " exited with code " + code + " after SIGTERM (a graceful stop exits 0 or 143)");
                }
                s.start();
            }
            default -> throw new IllegalStateException(kind.toString());
        }
        history.faults.add(new History.Fault(at, kind.label, target, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started)));
    }

    private void sleep(long millis) throws InterruptedException {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        long left;
        while ((left = end - System.nanoTime()) > 0) {
            if (configurationError != null) {
                throw new IllegalStateException(configurationError);
            }
            Thread.sleep(Math.min(200, TimeUnit.NANOSECONDS.toMillis(left) + 1));
        }
    }

    /** 143 is how a JVM that ran its shutdown hooks on SIGTERM exits (128 + 15). */
    private static boolean graceful(int exitCode) {
        return exitCode == 0 || exitCode == 143;
    }

    private Service pick(String kind) {
        List<Service> candidates = services.stream().filter(s -> kind == null || s.kind.equals(kind)).toList();
        return candidates.get(random.nextInt(candidates.size()));
    }

    /** The service process holding a live lease on the role, found by the pid in its holder id. */
    private Service leader(String role) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            try (Connection c = owner()) {
                java.util.Optional<dev.fencedjobs.db.LeaseRow> lease = dev.fencedjobs.db.LeaseRow.live(c, role);
                if (lease.isPresent()) {
                    for (Service service : services) {
                        if (service.pid() == lease.get().holderPid() && service.alive()) {
                            return service;
                        }
                    }
                }
            } catch (SQLException e) {
                // The database may still be coming back.
            }
            sleep(200);
        }
        throw new IllegalStateException("no live " + role + " leader for 60 s: the system is stuck; see the logs in " + options.out());
    }

    private void healAll() {
        for (Service s : services) {
            s.proxy.heal();
        }
        kafka.startAll();
    }

    // ---------------------------------------------------------------- forged input

    /**
     * Writes records the consumer must handle without the dispatcher: two malformed ones (dead
     * letters), a fresh record with a high token on a resource of its own (applied once), a copy of it
     * (a duplicate) and a record below that token (rejected as stale).
     */
    private void forge() throws Exception {
        int round = forgeRounds++;
        String resource = "forged-" + round;
        long fresh = FORGED_JOB_BASE + 2L * round;
        Properties p = new Properties();
        p.put("bootstrap.servers", kafka.bootstrapServers());
        p.put("acks", "all");
        p.put("delivery.timeout.ms", "60000");
        try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
            send(producer, "malformed", resource, "{\"version\":1,\"jobId\":".getBytes(StandardCharsets.UTF_8), null, null);
            send(producer, "malformed", resource, "{\"version\":1,\"resource\":\"x\"}".getBytes(StandardCharsets.UTF_8), null, null);
            send(producer, "fresh", resource, envelope(fresh, resource, 1_000_000), fresh, 1_000_000L);
            send(producer, "duplicate", resource, envelope(fresh, resource, 1_000_000), fresh, 1_000_000L);
            send(producer, "stale", resource, envelope(fresh + 1, resource, 999_999), fresh + 1, 999_999L);
        }
    }

    private static byte[] envelope(long jobId, String resource, long token) {
        OffsetDateTime now = OffsetDateTime.now(ZoneOffset.UTC);
        return new Envelope(Envelope.VERSION, jobId, jobId, resource, token, "{\"forged\":true}", now, now).toJson();
    }

    private void send(KafkaProducer<String, byte[]> producer, String kind, String resource, byte[] value, Long jobId, Long token) throws Exception {
        RecordMetadata m = producer.send(new ProducerRecord<>(TOPIC, resource, value)).get(90, TimeUnit.SECONDS);
        history.forged.add(new History.Forged(kind, m.partition(), m.offset(), jobId, resource, token));
    }

    // ---------------------------------------------------------------- drain and stop

    private void drain(int submitted) throws Exception {
        long forgedJobs = history.forged.stream().filter(f -> f.kind().equals("fresh") || f.kind().equals("stale")).count();
        long deadline = System.nanoTime() + options.drainTimeout().toNanos();
        long lastReport = 0;
        while (true) {
            long pending = -1;
            long unpublished = -1;
            long decided = -1;
            long scheduled = 0;
            try (Connection c = owner(); Statement s = c.createStatement();
                    ResultSet r = s.executeQuery("SELECT (SELECT count(*) FROM jobs WHERE state = 'pending'),"
                            + " (SELECT count(*) FROM outbox_unpublished),"
                            + " (SELECT count(*) FROM consumer_processed),"
                            + " (SELECT count(*) FROM jobs WHERE submitted_by LIKE 'schedule:%')")) {
                r.next();
                pending = r.getLong(1);
                unpublished = r.getLong(2);
                decided = r.getLong(3);
                scheduled = r.getLong(4);
            } catch (SQLException e) {
                log("drain: " + e.getMessage());
            }
            if (pending == 0 && unpublished == 0 && decided >= submitted + forgedJobs + scheduled) {
                log("drained: every job completed, published and decided by a consumer");
                return;
            }
            if (System.nanoTime() > deadline) {
                log("NOT DRAINED after " + options.drainTimeout().toSeconds() + " s: " + pending + " pending, " + unpublished
                        + " unpublished, " + decided + " of " + (submitted + forgedJobs + scheduled) + " decided; checking what is there");
                return;
            }
            if (System.nanoTime() - lastReport > TimeUnit.SECONDS.toNanos(10)) {
                lastReport = System.nanoTime();
                log("draining: " + pending + " pending, " + unpublished + " unpublished, " + decided + " of " + (submitted + forgedJobs + scheduled)
                        + " decided");
            }
            sleep(500);
        }
    }

    private void stopServices() throws InterruptedException {
        log("stopping the services with SIGTERM");
        List<Thread> stoppers = new ArrayList<>();
        for (Service s : services) {
            Thread t = new Thread(() -> {
                int code = s.terminate();
                if (!graceful(code)) {
                    crashes.add(s.name + " exited with code " + code + " after the final SIGTERM (a graceful stop exits 0 or 143)");
                }
            });
            t.start();
            stoppers.add(t);
        }
        for (Thread t : stoppers) {
            t.join();
        }
    }

    // ---------------------------------------------------------------- load

    /** Inserts jobs with plain SQL as the producer role, some due at once, some a few seconds out. */
    private final class LoadGenerator extends Thread {
        final List<String> submitted = new ArrayList<>();
        volatile boolean stop;
        private final Random loadRandom = new Random(options.seed() ^ 0x5DEECE66DL);
        private Connection connection;
        private long lastFailureReport = System.nanoTime() - TimeUnit.MINUTES.toNanos(1);

        LoadGenerator() {
            super("chaos-load");
            setDaemon(true);
        }

        @Override
        public void run() {
            int perTick = Math.max(1, options.rate() / 20);
            long next = System.nanoTime();
            long sequence = 0;
            while (!stop) {
                List<String> keys = new ArrayList<>(perTick);
                String[] resources = new String[perTick];
                Long[] delays = new Long[perTick];
                for (int i = 0; i < perTick; i++) {
                    keys.add("chaos-" + options.seed() + "-" + sequence++);
                    resources[i] = "resource-" + loadRandom.nextInt(RESOURCES);
                    delays[i] = loadRandom.nextInt(4) == 0 ? (long) loadRandom.nextInt(4000) : 0L;
                }
                insertUntilAcknowledged(keys, resources, delays);
                submitted.addAll(keys);
                next += TimeUnit.MILLISECONDS.toNanos(50);
                long wait = next - System.nanoTime();
                if (wait > 0) {
                    LockSupportSleep.nanos(wait);
                } else if (wait < -TimeUnit.SECONDS.toNanos(1)) {
                    next = System.nanoTime();
                }
            }
        }

        /**
         * The same batch is retried, under the same unique keys, until the database acknowledges it:
         * an INSERT whose commit was cut off may or may not have landed, and ON CONFLICT DO NOTHING
         * makes the retry safe either way.
         */
        private void insertUntilAcknowledged(List<String> keys, String[] resources, Long[] delays) {
            while (true) {
                try {
                    if (connection == null) {
                        Properties p = new Properties();
                        p.setProperty("user", Roles.PRODUCER);
                        p.setProperty("password", "producer");
                        p.setProperty("connectTimeout", "2");
                        p.setProperty("socketTimeout", "10");
                        connection = DriverManager.getConnection(ownerUrl, p);
                    }
                    try (PreparedStatement s = connection.prepareStatement(
                            "INSERT INTO jobs (unique_key, resource, payload, due_at)"
                                    + " SELECT k, r, jsonb_build_object('key', k), clock_timestamp() + d * interval '1 millisecond'"
                                    + " FROM unnest(?::varchar[], ?::varchar[], ?::bigint[]) AS t(k, r, d)"
                                    + " ON CONFLICT (unique_key) DO NOTHING")) {
                        s.setArray(1, connection.createArrayOf("varchar", keys.toArray()));
                        s.setArray(2, connection.createArrayOf("varchar", resources));
                        s.setArray(3, connection.createArrayOf("bigint", delays));
                        s.executeUpdate();
                    }
                    return;
                } catch (SQLException e) {
                    if (System.nanoTime() - lastFailureReport > TimeUnit.SECONDS.toNanos(5)) {
                        lastFailureReport = System.nanoTime();
                        log("load: insert failed, retrying the same batch: " + dev.fencedjobs.runtime.Faults.describe(e));
                    }
                    closeConnection();
                    LockSupportSleep.nanos(TimeUnit.MILLISECONDS.toNanos(200));
                }
            }
        }

        private void closeConnection() {
            if (connection != null) {
                try {
                    connection.close();
                } catch (SQLException ignored) {
                    // Gone already.
                }
                connection = null;
            }
        }

        void finish() throws InterruptedException {
            stop = true;
            join();
            closeConnection();
        }
    }

    private static final class LockSupportSleep {
        static void nanos(long nanos) {
            java.util.concurrent.locks.LockSupport.parkNanos(nanos);
        }
    }

    // ---------------------------------------------------------------- helpers

    private long elapsedMillis() {
        return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNanos);
    }

    private String elapsedSeconds() {
        return String.format("%.1f", elapsedMillis() / 1000.0);
    }

    private void log(String message) {
        System.out.println("chaos +" + elapsedSeconds() + "s " + message);
    }

}
