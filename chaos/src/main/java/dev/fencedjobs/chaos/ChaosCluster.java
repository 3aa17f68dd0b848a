package dev.fencedjobs.chaos;

import dev.fencedjobs.cli.Bootstrap;
import dev.fencedjobs.consumer.ConsumerConfig;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.db.internal.Shards;
import dev.fencedjobs.lease.Lease;
import dev.fencedjobs.lease.LeaseRow;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.internal.ServiceEnvironment;
import dev.fencedjobs.testing.KafkaCluster;
import dev.fencedjobs.testing.StreamingPostgres;
import dev.fencedjobs.testing.TcpProxy;
import dev.fencedjobs.testing.TestKafka;
import java.io.IOException;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

/**
 * The system under test: a real PostgreSQL primary with a synchronous streaming standby, a real
 * Kafka cluster (three brokers, or one), and three dispatchers, two relays and two consumers from
 * their packaged jars, each service reaching the database through its own {@link TcpProxy} on a
 * multi-host URL with {@code targetServerType=primary}. A monitor starts again any service that
 * exits by itself and records it as a crash.
 */
final class ChaosCluster {

    static final String DATABASE = ChaosRun.DATABASE;
    static final String OWNER = ChaosRun.OWNER;
    static final String TOPIC = ChaosRun.TOPIC;
    static final int PARTITIONS = ChaosRun.PARTITIONS;

    private final ChaosRun.Options options;
    /** The relays sign with it and the consumers trust it; the forger signs its "relay's bug" records with it too. */
    final RecordTrust trust = RecordTrust.generate();

    private final Path out;
    private final RunLog log;
    final List<Service> services = new ArrayList<>();
    final List<String> crashes = new CopyOnWriteArrayList<>();
    StreamingPostgres postgres;
    KafkaCluster kafka;
    String ownerUrl;
    private Thread monitor;

    ChaosCluster(ChaosRun.Options options, RunLog log) {
        this.options = options;
        this.out = options.out();
        this.log = log;
    }

    void startServers() throws Exception {
        log.log("starting PostgreSQL (a primary and a synchronous standby) and "
                + (options.brokers() == 1 ? "a Kafka broker" : options.brokers() + " Kafka brokers"));
        postgres = new StreamingPostgres(StreamingPostgres.Replication.SYNCHRONOUS);
        postgres.executeOnPrimary("postgres", "CREATE ROLE " + OWNER + " LOGIN CREATEROLE PASSWORD '" + OWNER + "'");
        // The end-lease-session fault ends a service's session, as an operator's pg_terminate_backend would.
        postgres.executeOnPrimary("postgres", "GRANT pg_signal_backend TO " + OWNER);
        postgres.executeOnPrimary("postgres", "CREATE DATABASE " + DATABASE + " OWNER " + OWNER);
        ownerUrl = postgres.url(DATABASE);
        DatabaseConfig owner = DatabaseConfig.of(ownerUrl, OWNER, OWNER)
                .withPoolSize(2)
                .withConnectTimeout(Duration.ofSeconds(5))
                .withServerTimeouts(Duration.ofSeconds(30), Duration.ofSeconds(10), Duration.ofSeconds(30));
        Bootstrap.all(
                owner,
                Map.of(
                        Roles.DISPATCHER,
                        "dispatcher",
                        Roles.RELAY,
                        "relay",
                        Roles.CONSUMER,
                        "consumer",
                        Roles.PRODUCER,
                        "producer"),
                0);
        kafka = new KafkaCluster(options.brokers());
        TestKafka.createTopic(kafka.bootstrapServers(), TOPIC, PARTITIONS, (short) kafka.size());
    }

    void startServices() throws IOException {
        Path repo = options.repo();
        Path dispatcherJar = repo.resolve("dispatcher/target/fenced-jobs-dispatcher.jar");
        Path relayJar = repo.resolve("relay/target/fenced-jobs-relay.jar");
        Path consumerJar = repo.resolve("consumer/target/fenced-jobs-consumer.jar");
        for (int i = 1; i <= 3; i++) {
            addService("dispatcher-" + i, "dispatcher", dispatcherJar, Roles.DISPATCHER, "dispatcher", Map.of());
        }
        for (int i = 1; i <= 2; i++) {
            addService(
                    "relay-" + i,
                    "relay",
                    relayJar,
                    Roles.RELAY,
                    "relay",
                    Map.of(
                            RelayConfig.RETENTION,
                            "1000h",
                            RelayConfig.PARTITIONS,
                            Integer.toString(PARTITIONS),
                            RelayConfig.REPLICATION,
                            Integer.toString(kafka.size())));
        }
        for (int i = 1; i <= 2; i++) {
            addService(
                    "consumer-" + i,
                    "consumer",
                    consumerJar,
                    Roles.CONSUMER,
                    "consumer",
                    Map.of(ConsumerConfig.PROCESSED_RETENTION, "1000h"));
        }
        log.log("starting " + services.size() + " services: 3 dispatchers, 2 relays, 2 consumers");
        services.forEach(Service::start);
    }

    private void addService(String name, String kind, Path jar, String role, String password, Map<String, String> extra)
            throws IOException {
        TcpProxy proxy = new TcpProxy(name, postgres.port(0), postgres.port(1));
        Map<String, String> env = ServiceEnvironment.database(
                        "jdbc:postgresql://" + proxy.hosts() + "/" + DATABASE
                                + "?targetServerType=primary&hostRecheckSeconds=1",
                        role,
                        password)
                .migrate(false)
                .httpPort(0)
                .kafka(kafka.bootstrapServers(), TOPIC)
                .recordTrust(trust)
                .lease(
                        Duration.ofMillis(options.leaseMillis()),
                        Duration.ofMillis(Math.max(100, options.leaseMillis() / 5)))
                .setAll(extra)
                .toMap();
        services.add(new Service(name, kind, jar, env, proxy, out, List.of("-Xmx128m", "-XX:+UseSerialGC")));
    }

    /**
     * Terminates the session holding the sign of life of {@code role}'s current token (the leader's
     * lease session), and only that one; returns how many sessions it ended (0 when there was none,
     * as between a takeover and the new holder's lock).
     */
    int endLeaseSession(String role) throws SQLException {
        try (Connection c = owner();
                PreparedStatement s = c.prepareStatement(
                        "SELECT count(pg_terminate_backend(k.pid)) FROM pg_locks k JOIN leader_lease l ON l.role = ?"
                                + " WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2 AND k.classid = ?::bigint::oid"
                                + " AND k.objid = (l.fencing_token & 4294967295)::oid"
                                + " AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())")) {
            s.setString(1, role);
            s.setLong(2, Integer.toUnsignedLong(Lease.signOfLifeKey(role)));
            try (ResultSet r = s.executeQuery()) {
                r.next();
                return r.getInt(1);
            }
        }
    }

    /** The shard count in force. */
    int shardCount() throws SQLException {
        try (Connection c = owner()) {
            return Shards.read(c).count();
        }
    }

    /**
     * Asks for {@code count} shards and waits until the dispatcher that holds shard 0 has put them
     * in force (the drain, then {@code shards_switch}); returns the milliseconds it took.
     */
    long reshard(int count, Duration upTo) throws SQLException, InterruptedException {
        long started = System.nanoTime();
        try (Connection c = owner();
                Statement s = c.createStatement()) {
            s.execute("SELECT shards_set(" + count + ")");
        }
        long deadline = started + upTo.toNanos();
        while (System.nanoTime() < deadline) {
            try (Connection c = owner()) {
                Shards.ShardMap map = Shards.read(c);
                if (map.count() == count && !map.draining()) {
                    return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
                }
            } catch (SQLException e) {
                // The database may be coming back from another fault.
            }
            log.sleep(50);
        }
        throw new IllegalStateException("the shard map did not switch to " + count + " shards within " + upTo
                + ": no dispatcher finished the drain; see the logs in " + out);
    }

    Connection owner() throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", OWNER);
        p.setProperty("password", OWNER);
        p.setProperty("connectTimeout", "5");
        p.setProperty("socketTimeout", "60");
        return DriverManager.getConnection(ownerUrl, p);
    }

    /**
     * Pauses {@code key} as an operator does ({@code dispatch_pauses}), holds it, and resumes it: in
     * the resume's transaction, the pause still standing, it reads the database's clock, then
     * deletes the row. Each step is tried again while the database cannot be reached (up to a
     * minute), so that no pause outlives the run.
     */
    History.KeyPause pauseKey(String key, Duration hold) throws SQLException, InterruptedException {
        // A try whose commit went through unacknowledged leaves the row: the next one reads it.
        long pausedAt = retried(() -> {
            try (Connection c = owner();
                    PreparedStatement s =
                            c.prepareStatement("WITH made AS (INSERT INTO dispatch_pauses (dispatch_key, reason)"
                                    + " VALUES (?, 'chaos') ON CONFLICT (dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING"
                                    + " RETURNING paused_at)"
                                    + " SELECT (extract(epoch FROM paused_at) * 1000000)::bigint FROM made UNION ALL"
                                    + " SELECT (extract(epoch FROM paused_at) * 1000000)::bigint FROM dispatch_pauses"
                                    + " WHERE dispatch_key = ? AND NOT EXISTS (SELECT 1 FROM made)")) {
                s.setString(1, key);
                s.setString(2, key);
                try (ResultSet rs = s.executeQuery()) {
                    rs.next();
                    return rs.getLong(1);
                }
            }
        });
        Thread.sleep(hold.toMillis());
        // The clock read by the last try that got that far: when a try's commit went through
        // unacknowledged, the next finds nothing to delete and that try's clock stands.
        long[] read = {Long.MIN_VALUE};
        long checkedAt = retried(() -> {
            try (Connection c = owner()) {
                c.setAutoCommit(false);
                long before = read[0];
                try (Statement s = c.createStatement();
                        ResultSet rs =
                                s.executeQuery("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")) {
                    rs.next();
                    read[0] = rs.getLong(1);
                }
                int deleted;
                try (PreparedStatement s = c.prepareStatement("DELETE FROM dispatch_pauses WHERE dispatch_key = ?")) {
                    s.setString(1, key);
                    deleted = s.executeUpdate();
                }
                c.commit();
                return deleted == 0 && before != Long.MIN_VALUE ? before : read[0];
            }
        });
        return new History.KeyPause(key, pausedAt, checkedAt);
    }

    private interface SqlCall {
        long call() throws SQLException;
    }

    private static long retried(SqlCall call) throws SQLException, InterruptedException {
        long giveUpAt = System.nanoTime() + TimeUnit.MINUTES.toNanos(1);
        while (true) {
            try {
                return call.call();
            } catch (SQLException e) {
                if (System.nanoTime() > giveUpAt) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
    }

    /** Starts the monitor that restarts a crashed service. */
    void watch() {
        monitor = new Thread(this::watchForCrashes, "chaos-monitor");
        monitor.setDaemon(true);
        monitor.start();
    }

    void stopWatching() {
        if (monitor != null) {
            monitor.interrupt();
        }
    }

    private void watchForCrashes() {
        while (!Thread.currentThread().isInterrupted()) {
            for (Service s : services) {
                synchronized (s) {
                    if (s.crashed() && s.exitCode() == 2) {
                        log.stop(s.name + " refused its configuration (exit code 2); see "
                                + out.resolve(s.name + ".log"));
                        return;
                    }
                    if (s.crashed()) {
                        String crash = s.name + " exited by itself with code " + s.exitCode() + " at +"
                                + log.elapsedSeconds() + " s; see " + out.resolve(s.name + ".log");
                        log.log("CRASH: " + crash + "; starting it again");
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

    /** 143 is how a JVM that ran its shutdown hooks on SIGTERM exits (128 + 15). */
    static boolean graceful(int exitCode) {
        return exitCode == 0 || exitCode == 143;
    }

    Service pick(String kind, Random random) {
        List<Service> candidates = services.stream()
                .filter(s -> kind == null || s.kind.equals(kind))
                .toList();
        return candidates.get(random.nextInt(candidates.size()));
    }

    /** The service process holding a live lease on the role, found by the pid in its holder id. */
    Service leader(String role) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            try (Connection c = owner()) {
                Optional<LeaseRow> lease = LeaseRow.live(c, role);
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
            log.sleep(200);
        }
        throw new IllegalStateException(
                "no live " + role + " leader for 60 s: the system is stuck; see the logs in " + out);
    }

    void healAll() {
        for (Service s : services) {
            s.proxy.heal();
        }
        kafka.startAll();
    }

    void stopServices() throws InterruptedException {
        log.log("stopping the services with SIGTERM");
        List<Thread> stoppers = new ArrayList<>();
        for (Service s : services) {
            Thread t = new Thread(() -> {
                int code = s.terminate();
                if (!graceful(code)) {
                    crashes.add(s.name + " exited with code " + code
                            + " after the final SIGTERM (a graceful stop exits 0 or 143)");
                }
            });
            t.start();
            stoppers.add(t);
        }
        for (Thread t : stoppers) {
            t.join();
        }
    }

    /** Kills what still runs; keeps the brokers' data for a failed run. */
    void close(boolean keepKafka) {
        stopWatching();
        for (Service s : services) {
            if (s.alive()) {
                s.kill();
            }
            s.proxy.close();
        }
        if (kafka != null && keepKafka) {
            kafka.killAll();
            for (int i = 0; i < kafka.size(); i++) {
                log.log("broker " + (i + 1) + " log and data kept in " + kafka.directory(i)
                        + "; print the topic's batches and markers with"
                        + " java -cp fenced-jobs-chaos.jar dev.fencedjobs.chaos.LogDump "
                        + kafka.directory(i).resolve("data") + " "
                        + TOPIC + " [OUTBOX_ID...]");
            }
        } else if (kafka != null) {
            kafka.close();
        }
        if (postgres != null) {
            postgres.close();
        }
    }
}
