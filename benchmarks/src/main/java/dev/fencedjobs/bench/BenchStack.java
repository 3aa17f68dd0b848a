package dev.fencedjobs.bench;

import com.sun.management.OperatingSystemMXBean;
import dev.fencedjobs.cli.Bootstrap;
import dev.fencedjobs.consumer.ConsumerConfig;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.lease.LeaseRow;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.runtime.internal.ServiceEnvironment;
import dev.fencedjobs.testing.KafkaProcess;
import dev.fencedjobs.testing.ServiceProcess;
import dev.fencedjobs.testing.TcpProxy;
import dev.fencedjobs.testing.TestKafka;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.management.ManagementFactory;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.LocalDate;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.function.LongSupplier;

/**
 * The system as the end-to-end and soak benchmarks run it: a durable PostgreSQL 17 ({@link
 * BenchPostgres}), a Kafka broker in its own JVM, and two dispatchers, a relay and a consumer from
 * their packaged jars as separate processes, each service under a login role of its own (member of
 * its least-privilege role) so that pg_stat_statements counts each apart.
 */
final class BenchStack implements AutoCloseable {

    static final String HEAP = "-Xmx256m";
    static final String TOPIC = "fenced-jobs";
    static final int PARTITIONS = 6;
    static final int RESOURCES = 1000;
    /** {@code n} jobs due at once, spread over {@link #RESOURCES} resources, as a producer would insert them. */
    static final String INSERT_DUE = "INSERT INTO jobs (resource, payload, due_at) " + "SELECT 'account-' || mod(g, "
            + RESOURCES + "), '{\"cents\": 100}', clock_timestamp() FROM generate_series(1, %d) g";

    private final Path repo;
    /** The relay signs with it and the consumers trust it, as in production. */
    private final RecordTrust trust = RecordTrust.generate();

    private final String serviceLogLevel;
    private final Path logs;
    private final BenchPostgres pg;
    private final KafkaProcess kafka;
    private final Map<String, ServiceProcess> services = new LinkedHashMap<>();
    private final Map<String, Map<String, String>> environments = new HashMap<>();
    /** Each service's ops port, given to it (not read from its log: a quieter log level hides that line). */
    private final Map<String, Integer> opsPorts = new HashMap<>();

    private final Map<String, Integer> restarts = new HashMap<>();
    private final Map<String, TcpProxy> proxies = new HashMap<>();
    /** A service run from another build's jars than {@code repo}'s ({@link #reconfigure(String, Map, Path)}). */
    private final Map<String, Path> otherRepos = new HashMap<>();

    private final HttpClient http =
            HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    /** The first set-up's topic; later ones add their number. */
    private final String topicBase;
    /** The consumer's group, or null for the consumer's default. */
    private final String consumerGroup;
    /** Whether closing this stack stops the server and the broker: false for a {@link #sibling}. */
    private final boolean ownsServers;

    private String url;
    private String topic;
    private int setUps;

    BenchStack(Path repo, String serviceLogLevel, Path logs) throws Exception {
        this(repo, serviceLogLevel, logs, Map.of());
    }

    /** With {@code serverSettings} on the embedded PostgreSQL ({@link BenchPostgres#start(Map)}). */
    BenchStack(Path repo, String serviceLogLevel, Path logs, Map<String, String> serverSettings) throws Exception {
        this.repo = repo;
        this.serviceLogLevel = serviceLogLevel;
        this.logs = Files.createDirectories(logs);
        this.pg = BenchPostgres.start(serverSettings);
        this.kafka = new KafkaProcess();
        this.topicBase = TOPIC;
        this.consumerGroup = null;
        this.ownsServers = true;
        // Ctrl-C or SIGTERM of the benchmark stops its services, broker and server too, instead of
        // leaving them running without a parent.
        Runtime.getRuntime().addShutdownHook(stopOnExit);
    }

    private BenchStack(BenchStack host, String name) throws IOException {
        this.repo = host.repo;
        this.serviceLogLevel = host.serviceLogLevel;
        this.logs = Files.createDirectories(host.logs.resolve(name));
        this.pg = host.pg;
        this.kafka = host.kafka;
        this.topicBase = TOPIC + "-" + name;
        this.consumerGroup = "fenced-jobs-" + name;
        this.ownsServers = false;
        Runtime.getRuntime().addShutdownHook(stopOnExit);
    }

    /**
     * A second pipeline on this stack's PostgreSQL server and broker, set up by its own {@link
     * #setUp}: a database, topic, consumer group, services and log directory ({@code name} under
     * this one's) of its own. Closing it stops only its services.
     */
    BenchStack sibling(String name) throws IOException {
        return new BenchStack(this, name);
    }

    private final Thread stopOnExit = new Thread(
            () -> {
                try {
                    stop();
                } catch (Exception e) {
                    System.err.println("stopping the benchmark's processes: " + e);
                }
            },
            "bench-stack-stop");
    private boolean stopped;

    BenchPostgres pg() {
        return pg;
    }

    KafkaProcess kafka() {
        return kafka;
    }

    String url() {
        return url;
    }

    Map<String, ServiceProcess> services() {
        return services;
    }

    /** {@link #TOPIC} for the first set-up, a topic of its own for each later one. */
    String topic() {
        return topic;
    }

    /**
     * A fresh database migrated and with its roles, the topic, and two dispatchers, a relay and a
     * consumer started with {@code extraEnvironment} added to each one's; returns once a first job
     * has gone all the way through.
     */
    void setUp(Map<String, String> extraEnvironment, int consumerPort) throws Exception {
        setUps++;
        topic = setUps == 1 ? topicBase : topicBase + "-" + setUps;
        url = pg.freshDatabase("e2e");
        DatabaseConfig owner = DatabaseConfig.of(url, pg.user(), pg.password())
                .withPoolSize(2)
                .withConnectTimeout(Duration.ofSeconds(5))
                .withServerTimeouts(Duration.ofSeconds(60), Duration.ofSeconds(10), Duration.ofSeconds(60));
        Bootstrap.all(owner, Bootstrap.everyRole("bench"), 0);
        try (Connection c = owner();
                Statement s = c.createStatement()) {
            // The shard count (docs/shards.md): -Dshards=, one by default, which every phase's figures
            // were made with; the throughput phase is also measured with more.
            s.execute("SELECT shards_set(" + SHARDS + ")");
            s.execute("SELECT shards_switch()");
            s.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
            for (String[] r : new String[][] {
                {"bench_dispatcher_1", Roles.DISPATCHER},
                {"bench_dispatcher_2", Roles.DISPATCHER},
                {"bench_relay", Roles.RELAY},
                {"bench_consumer", Roles.CONSUMER}
            }) {
                s.execute("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '" + r[0]
                        + "') THEN CREATE ROLE " + r[0] + " LOGIN PASSWORD 'bench'; END IF; END $$");
                s.execute("GRANT " + r[1] + " TO " + r[0]);
            }
        }
        TestKafka.createTopic(kafka.bootstrapServers(), topic, PARTITIONS);
        start("dispatcher-1", "dispatcher", "bench_dispatcher_1", extraEnvironment);
        start("dispatcher-2", "dispatcher", "bench_dispatcher_2", extraEnvironment);
        Map<String, String> relay = new HashMap<>(extraEnvironment);
        relay.put(RelayConfig.PARTITIONS, Integer.toString(PARTITIONS));
        start("relay", "relay", "bench_relay", relay);
        Map<String, String> consumer = new HashMap<>(extraEnvironment);
        consumer.put(ServiceConfig.HTTP_PORT, Integer.toString(consumerPort));
        if (consumerGroup != null) {
            consumer.put(ConsumerConfig.GROUP, consumerGroup);
        }
        start("consumer", "consumer", "bench_consumer", consumer);
        waitFor(
                "a scheduler and a relay leader of each shard",
                () -> liveLeases() == 2L * SHARDS,
                Duration.ofSeconds(60));
        // A first job through the whole pipeline: the consumer has joined its group.
        try (Connection c = owner();
                Statement s = c.createStatement()) {
            s.executeUpdate(String.format(INSERT_DUE, 1));
        }
        waitFor("the first effect", () -> scalar("SELECT count(*) FROM ledger") >= 1, Duration.ofMinutes(2));
    }

    /** The variables that give the relay its signing key and the consumer the relay's public key (the stack's default). */
    Map<String, String> recordTrustEnvironment() {
        return ServiceEnvironment.recordTrustVariables(trust);
    }

    /**
     * A service's JVM options: the heap, and those of {@code -DserviceJvm} (split at spaces), with
     * {@code {name}} standing for the name its log has (relay, relay.2, ...).
     */
    private static List<String> jvm(String name) {
        String extra = System.getProperty("serviceJvm", "");
        List<String> options = new ArrayList<>(List.of(HEAP));
        for (String o : extra.split(" ")) {
            if (!o.isBlank()) {
                options.add(o.replace("{name}", name));
            }
        }
        return options;
    }

    /** Starts a service; {@code extra} may name its {@code HTTP_PORT}, else it gets a free one, kept across restarts. */
    void start(String name, String kind, String user, Map<String, String> extra) {
        int port = extra.containsKey(ServiceConfig.HTTP_PORT)
                ? Integer.parseInt(extra.get(ServiceConfig.HTTP_PORT))
                : freePort();
        Map<String, String> env = ServiceEnvironment.database(url, user, "bench")
                .migrate(false)
                .httpPort(port)
                .kafka(kafka.bootstrapServers(), topic)
                .recordTrust(trust)
                .set("LOG_LEVEL", serviceLogLevel)
                .setAll(extra)
                .toMap();
        environments.put(name, env);
        opsPorts.put(name, port);
        services.put(name, ServiceProcess.start(name, jar(kind), env, logs, jvm(name)));
    }

    /** Starts {@code name} again with the same environment; a log per start: dispatcher-1.log, dispatcher-1.2.log, ... */
    void restart(String name) {
        int n = restarts.merge(name, 1, Integer::sum);
        services.put(
                name,
                ServiceProcess.start(
                        name + "." + (n + 1),
                        jar(otherRepos.getOrDefault(name, repo), name.replaceAll("-\\d+$", "")),
                        environments.get(name),
                        logs,
                        jvm(name + "." + (n + 1))));
    }

    /** As {@link #reconfigure(String, Map)}, and from now on run from the jars of the build in {@code from} (null: this one's). */
    void reconfigure(String name, Map<String, String> changes, Path from) {
        if (from == null) {
            otherRepos.remove(name);
        } else {
            otherRepos.put(name, from);
        }
        reconfigure(name, changes);
    }

    /** The services running now, by name. */
    List<String> serviceNames() {
        return List.copyOf(services.keySet());
    }

    /** Where the services' logs are: {@code <name>.log}, {@code <name>.2.log} after a restart, ... */
    Path logs() {
        return logs;
    }

    /**
     * Stops {@code name} (SIGTERM, waits) and starts it again with {@code changes} over its
     * environment, kept for its later restarts.
     */
    void reconfigure(String name, Map<String, String> changes) {
        Map<String, String> env = new HashMap<>(environments.get(name));
        env.putAll(changes);
        environments.put(name, env);
        ServiceProcess running = services.get(name);
        if (running.isAlive()) {
            running.terminate();
            running.waitFor();
        }
        restart(name);
    }

    /**
     * Puts {@code name} behind a {@link TcpProxy} of its own (all its database connections), kept
     * across its restarts, so a trial can partition it: the proxy holds bytes, neither end sees a reset.
     */
    TcpProxy behindProxy(String name) throws IOException {
        TcpProxy proxy = proxies.get(name);
        if (proxy == null) {
            URI pgUri = URI.create(url.substring("jdbc:".length()));
            proxy = new TcpProxy(name, pgUri.getPort());
            proxies.put(name, proxy);
            reconfigure(
                    name,
                    Map.of(
                            DatabaseConfig.URL,
                            "jdbc:postgresql://127.0.0.1:" + proxy.port(0) + pgUri.getRawPath()
                                    + (pgUri.getRawQuery() == null ? "" : "?" + pgUri.getRawQuery())));
        }
        return proxy;
    }

    private static int freePort() {
        try {
            return KafkaProcess.freePort();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private Path jar(String kind) {
        return jar(repo, kind);
    }

    private static Path jar(Path from, String kind) {
        return from.resolve(kind + "/target/fenced-jobs-" + kind + ".jar");
    }

    /**
     * Waits until every running service answers 200 on {@code /health/ready}: its ops server is up
     * and, for a dispatcher, its start-up warm-up is over.
     */
    void awaitAllReady(Duration timeout) throws InterruptedException {
        waitFor(
                "every service to report ready",
                () -> services.keySet().stream().allMatch(this::ready),
                timeout);
    }

    private boolean ready(String name) {
        if (!services.get(name).isAlive()) {
            return false;
        }
        try {
            HttpResponse<Void> r = http.send(
                    HttpRequest.newBuilder(URI.create("http://localhost:" + opsPorts.get(name) + "/health/ready"))
                            .timeout(Duration.ofSeconds(2))
                            .build(),
                    HttpResponse.BodyHandlers.discarding());
            return r.statusCode() == 200;
        } catch (IOException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Date, machine, Java, PostgreSQL and broker, for the head of a report. */
    Map<String, Object> machine() throws SQLException {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("date", LocalDate.now(ZoneOffset.UTC).toString());
        m.put("cores", Runtime.getRuntime().availableProcessors());
        m.put(
                "memoryGiB",
                Math.round(((OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean()).getTotalMemorySize()
                        / (1024.0 * 1024 * 1024)));
        m.put("java", System.getProperty("java.version"));
        m.put("postgres", pg.describe());
        m.put(
                "kafka",
                "Apache Kafka 4.3 KRaft broker, a separate JVM (kafka.Kafka, -Xmx512m), " + PARTITIONS + " partitions");
        m.put("serviceHeap", HEAP);
        return m;
    }

    /** One decimal, for reports. */
    static double round(double v) {
        return Math.round(v * 10) / 10.0;
    }

    Connection owner() throws SQLException {
        return DriverManager.getConnection(url, pg.user(), pg.password());
    }

    /** The stack's shard count, {@code -Dshards=} (1 by default). */
    static final int SHARDS = Integer.getInteger("shards", 1);

    long liveLeases() {
        try (Connection c = owner()) {
            return LeaseRow.all(c).stream().filter(LeaseRow::live).count();
        } catch (SQLException e) {
            throw new IllegalStateException("reading leader_lease", e);
        }
    }

    long scalar(String sql) {
        try (Connection c = owner();
                Statement s = c.createStatement()) {
            return scalar(s, sql);
        } catch (SQLException e) {
            throw new IllegalStateException(sql, e);
        }
    }

    /**
     * A thread that inserts due jobs, 5,000 at a time, whenever fewer than 50,000 are between INSERT
     * and effect, so that the pipeline never starves, until {@code stop}; a failure ends it and is
     * left in {@code failure}. Started by the caller.
     */
    Thread saturatingLoader(String name, AtomicBoolean stop, AtomicReference<Exception> failure) {
        return new Thread(
                () -> {
                    try (Connection c = owner();
                            Statement s = c.createStatement()) {
                        long inserted = scalar(s, "SELECT count(*) FROM jobs");
                        while (!stop.get()) {
                            if (inserted - scalar(s, "SELECT coalesce(max(id), 0) FROM ledger") < 50_000) {
                                inserted += s.executeUpdate(String.format(INSERT_DUE, 5_000));
                            } else {
                                Thread.sleep(20);
                            }
                        }
                    } catch (Exception e) {
                        failure.set(e);
                    }
                },
                name);
    }

    static long scalar(Statement s, String sql) throws SQLException {
        try (ResultSet r = s.executeQuery(sql)) {
            r.next();
            return r.getLong(1);
        }
    }

    static void waitFor(String what, BooleanSupplier condition, Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("timed out after " + timeout + " waiting for " + what);
            }
            Thread.sleep(200);
        }
    }

    /**
     * Waits for autovacuum to be quiet for 5 s (at most 5 minutes) and takes a checkpoint, so that
     * what follows measures the pipeline rather than the clean-up of what came before.
     */
    void settle() throws Exception {
        try (Connection c = pg.admin();
                Statement s = c.createStatement()) {
            long started = System.nanoTime();
            int quiet = 0;
            while (quiet < 5 && System.nanoTime() - started < TimeUnit.MINUTES.toNanos(5)) {
                quiet = scalar(s, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'") == 0
                        ? quiet + 1
                        : 0;
                Thread.sleep(1000);
            }
            s.execute("CHECKPOINT");
            System.out.printf(
                    Locale.ROOT,
                    "   settled in %.0f s (autovacuum finished, checkpoint taken)%n",
                    (System.nanoTime() - started) / 1e9);
        }
    }

    /** Autovacuum and autoanalyze runs on this database's tables, and checkpoints, so far. */
    /** {@link #backgroundWork(Statement)} on this stack's server. */
    long[] backgroundWork() {
        try (Connection c = owner();
                Statement s = c.createStatement()) {
            return backgroundWork(s);
        } catch (SQLException e) {
            throw new IllegalStateException("reading the server's background work", e);
        }
    }

    /** The bytes of WAL the server has written since its statistics were last reset. */
    static final String WAL_BYTES = "SELECT wal_bytes::bigint FROM pg_stat_wal";

    static long[] backgroundWork(Statement s) throws SQLException {
        long vacuums =
                scalar(s, "SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables");
        long checkpoints;
        try {
            checkpoints = scalar(s, "SELECT num_timed + num_requested FROM pg_stat_checkpointer");
        } catch (SQLException beforePostgres17) {
            checkpoints = scalar(s, "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter");
        }
        return new long[] {vacuums, checkpoints};
    }

    static long peakRssMb(long pid) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc", Long.toString(pid), "status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("\\D", "")) / 1024;
                }
            }
        } catch (Exception e) {
            // Not Linux, or the process is gone.
        }
        return -1;
    }

    /**
     * Each component's CPU in microseconds per unit of work (a job, a record) between two readings of
     * {@link #cpuTicksByComponent} (clock ticks are 10 ms); a component absent from the first counts nothing.
     */
    static Map<String, Long> cpuMicrosecondsEach(Map<String, Long> before, Map<String, Long> after, long units) {
        Map<String, Long> each = new TreeMap<>();
        after.forEach((component, ticks) -> each.put(
                component,
                Math.round((ticks - before.getOrDefault(component, ticks)) * 10_000.0 / Math.max(1, units))));
        return each;
    }

    /** Each component's share of the machine's CPU, in % to a tenth, between two readings of {@link #cpuTicksByComponent} {@code seconds} apart. */
    static Map<String, Double> cpuShare(Map<String, Long> before, Map<String, Long> after, double seconds) {
        Map<String, Double> share = new LinkedHashMap<>();
        after.forEach((component, ticks) ->
                share.put(component, cpuShare(ticks - before.getOrDefault(component, 0L), seconds)));
        return share;
    }

    /** {@code ticks} of CPU as a share of the machine's over {@code seconds}, in % to a tenth. */
    static double cpuShare(long ticks, double seconds) {
        double capacityTicks = 100.0 * Runtime.getRuntime().availableProcessors() * seconds;
        return Math.round(1000.0 * ticks / capacityTicks) / 10.0;
    }

    /**
     * CPU time (clock ticks, 100 per second on Linux) of every process on the machine, summed by
     * component: PostgreSQL (postmaster and backends), the broker, each service, this benchmark
     * (the loader). Empty where there is no /proc.
     */
    static Map<String, Long> cpuTicksByComponent() {
        Map<String, Long> ticks = new TreeMap<>();
        forEachComponent((component, dir) -> {
            // With the children it has reaped, which for the postmaster are the backends that ended (the
            // services' pools retire connections after HikariCP's idle timeout and 30-minute lifetime;
            // without these a long run lost most of PostgreSQL's CPU time).
            ticks.merge(component, cpuTicks(Files.readString(dir.resolve("stat")), true), Long::sum);
        });
        return ticks;
    }

    /**
     * The CPU clock ticks of a {@code /proc/<pid>/stat} or {@code .../task/<tid>/stat} line: utime
     * and stime, and with {@code reaped} also cutime and cstime (the children it has waited for).
     */
    private static long cpuTicks(String stat, boolean reaped) {
        String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        long ticks = Long.parseLong(f[11]) + Long.parseLong(f[12]);
        return reaped ? ticks + Long.parseLong(f[13]) + Long.parseLong(f[14]) : ticks;
    }

    /**
     * Sleeps at least {@code minSeconds}, then until the JIT compilers whose CPU {@code ticks}
     * counts are quiet (under 5 % of a core over 5 s), at most {@code -DwarmUpMaxSeconds} (180
     * unless set; CI's short mode sets 10) in all. Returns the seconds it took.
     */
    static double untilCompilersQuiet(long minSeconds, LongSupplier ticks) throws InterruptedException {
        return untilCompilersQuiet(minSeconds, warmUpMaxSeconds(), ticks);
    }

    /** {@code -DwarmUpMaxSeconds}: the most a warm-up waits for quiet JIT compilers (180 unless set). */
    static long warmUpMaxSeconds() {
        return Long.getLong("warmUpMaxSeconds", 180);
    }

    /** As {@link #untilCompilersQuiet(long, LongSupplier)}, at most {@code maxSeconds}. */
    static double untilCompilersQuiet(long minSeconds, long maxSeconds, LongSupplier ticks)
            throws InterruptedException {
        return untilCompilersQuiet(minSeconds, maxSeconds, ticks, Thread::sleep);
    }

    /** What a warm-up does for a given time: sleep while the load runs elsewhere, or offer the load itself. */
    interface WarmUpStep<E extends Exception> {
        void run(long millis) throws E;
    }

    /** As {@link #untilCompilersQuiet(long, long, LongSupplier)}, running {@code step} instead of sleeping. */
    static <E extends Exception> double untilCompilersQuiet(
            long minSeconds, long maxSeconds, LongSupplier ticks, WarmUpStep<E> step) throws E {
        long started = System.nanoTime();
        long most = Duration.ofSeconds(maxSeconds).toNanos();
        step.run(Math.min(minSeconds * 1000, most / 1_000_000));
        long quietTicks = Math.round(0.05 * 100 * 5);
        long before = ticks.getAsLong();
        while (System.nanoTime() - started < most) {
            step.run(5_000);
            long now = ticks.getAsLong();
            if (now - before <= quietTicks) {
                break;
            }
            before = now;
        }
        return (System.nanoTime() - started) / 1e9;
    }

    /**
     * CPU clock ticks the JIT compiler threads of the services' JVMs and the broker's have used: a
     * JVM started for a measurement compiles for a minute or more on two cores, and that CPU comes
     * out of the pipeline's.
     */
    static long compilerTicks() {
        long[] ticks = {0};
        forEachComponent((component, dir) -> {
            if (component.equals("postgresql") || component.equals("benchmark and loader")) {
                return;
            }
            ticks[0] += compilerTicks(dir);
        });
        return ticks[0];
    }

    /** CPU clock ticks this JVM's JIT compiler threads have used (0 without /proc). */
    static long ownCompilerTicks() {
        try {
            return compilerTicks(Path.of("/proc/self"));
        } catch (Exception e) {
            return 0;
        }
    }

    private static long compilerTicks(Path process) throws IOException {
        long ticks = 0;
        try (var tasks = Files.list(process.resolve("task"))) {
            for (Path task : (Iterable<Path>) tasks::iterator) {
                try {
                    String stat = Files.readString(task.resolve("stat"));
                    String thread = stat.substring(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
                    if (thread.startsWith("C1 CompilerThre") || thread.startsWith("C2 CompilerThre")) {
                        ticks += cpuTicks(stat, false);
                    }
                } catch (IOException ended) {
                    // A compiler thread the JVM stopped while being read.
                }
            }
        }
        return ticks;
    }

    private interface ComponentProcess {
        void read(String component, Path procDir) throws Exception;
    }

    /**
     * The postmasters of the PostgreSQL servers this JVM started ({@link BenchPostgres}): theirs and their
     * backends are this run's PostgreSQL processes.
     */
    private static final Set<Long> OWN_SERVERS = ConcurrentHashMap.newKeySet();

    /** {@code postmasterPid} is a server this run started: its processes count as this run's PostgreSQL. */
    static void ownServer(long postmasterPid) {
        OWN_SERVERS.add(postmasterPid);
    }

    /**
     * This JVM, the processes it started (services, brokers) and the servers it started with their backends.
     * Another run's stack on the same machine (CI runs two benchmarks at once) is not this run's: counted by
     * name alone, its services' CPU fell into this run's figures, and a window in which it stopped came out
     * negative.
     */
    private static Set<Long> ownProcesses() {
        Set<Long> own = new HashSet<>();
        ProcessHandle self = ProcessHandle.current();
        own.add(self.pid());
        self.descendants().forEach(p -> own.add(p.pid()));
        for (long postmaster : OWN_SERVERS) {
            own.add(postmaster);
            ProcessHandle.of(postmaster).ifPresent(h -> h.descendants().forEach(p -> own.add(p.pid())));
        }
        return own;
    }

    /**
     * Each process of this run (the stack and this one: {@link #ownProcesses}), by its component, with its
     * {@code /proc} directory; one that ends while read is skipped. With a server this run did not start
     * ({@code FJ_BENCH_POSTGRES_URL}), every PostgreSQL process on the machine counts, as it is the only way
     * to see that server's.
     */
    private static void forEachComponent(ComponentProcess each) {
        long self = ProcessHandle.current().pid();
        Set<Long> own = ownProcesses();
        boolean ownServer = !OWN_SERVERS.isEmpty();
        try (var dirs = Files.list(Path.of("/proc"))) {
            for (Path dir : (Iterable<Path>) dirs::iterator) {
                String name = dir.getFileName().toString();
                if (!name.chars().allMatch(Character::isDigit)) {
                    continue;
                }
                try {
                    String cmd = new String(Files.readAllBytes(dir.resolve("cmdline")), StandardCharsets.UTF_8)
                            .replace('\0', ' ');
                    String component = Long.parseLong(name) == self
                            ? "benchmark and loader"
                            : cmd.contains("fenced-jobs-dispatcher.jar")
                                    ? "dispatchers"
                                    : cmd.contains("fenced-jobs-relay.jar")
                                            ? "relay"
                                            : cmd.contains("fenced-jobs-consumer.jar")
                                                    ? "consumer"
                                                    : cmd.contains("kafka.Kafka")
                                                            ? "kafka broker"
                                                            : cmd.startsWith("postgres")
                                                                            || cmd.contains("/bin/postgres")
                                                                    ? "postgresql"
                                                                    : null;
                    boolean ours = own.contains(Long.parseLong(name)) || (!ownServer && "postgresql".equals(component));
                    if (component != null && ours) {
                        each.read(component, dir);
                    }
                } catch (Exception gone) {
                    // The process ended while being read.
                }
            }
        } catch (IOException e) {
            // No /proc: nothing to read.
        }
    }

    /** CPU clock ticks (user and system) of each of this stack's services, by name; a service not running counts nothing. */
    Map<String, Long> serviceCpuTicks() {
        Map<String, Long> ticks = new TreeMap<>();
        services.forEach((name, process) -> {
            try {
                ticks.put(
                        name,
                        cpuTicks(Files.readString(Path.of("/proc", Long.toString(process.pid()), "stat")), false));
            } catch (Exception gone) {
                // Not Linux, or the process ended.
            }
        });
        return ticks;
    }

    /** SIGTERM to every service, and waits for each to exit. */
    void stopServices() {
        services.values().forEach(ServiceProcess::terminate);
        services.values().forEach(ServiceProcess::waitFor);
        services.clear();
        proxies.values().forEach(TcpProxy::close);
        proxies.clear();
    }

    @Override
    public void close() throws Exception {
        try {
            Runtime.getRuntime().removeShutdownHook(stopOnExit);
        } catch (IllegalStateException shuttingDown) {
            // The hook is running or about to: it stops the same things, once.
        }
        stop();
    }

    private synchronized void stop() throws Exception {
        if (stopped) {
            return;
        }
        stopped = true;
        new ArrayList<>(services.values()).forEach(ServiceProcess::close);
        new ArrayList<>(proxies.values()).forEach(TcpProxy::close);
        if (ownsServers) {
            kafka.close();
            pg.close();
        }
    }
}
