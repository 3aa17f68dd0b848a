package dev.fencedjobs.local;

import dev.fencedjobs.cli.Bootstrap;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Roles;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.OpsAccess;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.internal.ServiceEnvironment;
import dev.fencedjobs.testing.ServiceProcess;
import dev.fencedjobs.testing.TestKafka;
import io.zonky.test.db.postgres.embedded.EmbeddedPostgres;
import java.io.IOException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.slf4j.LoggerFactory;

/**
 * {@code java -jar fenced-jobs-local.jar [--demo] [--demo-seconds N] [--exit-after-demo]}: the whole
 * system on a machine with only a JDK. An embedded PostgreSQL 17 and a KRaft Kafka broker run in
 * this JVM; two dispatcher replicas, a relay and a consumer run as separate processes, each under
 * its own least-privilege role. Their leadership changes and the applied effects are printed as
 * they happen; Ctrl-C stops everything.
 */
public final class LocalStack {

    static final String DATABASE = "fencedjobs";
    static final String OWNER = "fencedjobs";
    static final String OWNER_PASSWORD = "fencedjobs";
    static final Map<String, String> ROLE_PASSWORDS = Map.of(
            Roles.DISPATCHER,
            "dispatcher",
            Roles.RELAY,
            "relay",
            Roles.CONSUMER,
            "consumer",
            Roles.PRODUCER,
            "producer");

    private final EmbeddedPostgres postgres;
    private final KafkaClusterTestKit kafka;
    private final String jdbcUrl;
    /** A key pair for this run: the relay signs every record with it and the consumer trusts only it. */
    private final RecordTrust trust = RecordTrust.generate();

    private final List<Child> children = new CopyOnWriteArrayList<>();
    private int dispatchers;

    private LocalStack(EmbeddedPostgres postgres, KafkaClusterTestKit kafka, String jdbcUrl) {
        this.postgres = postgres;
        this.kafka = kafka;
        this.jdbcUrl = jdbcUrl;
    }

    public static void main(String[] args) throws Exception {
        boolean demo = false;
        boolean exitAfterDemo = false;
        int demoSeconds = 60;
        int demoRate = 50;
        java.nio.file.Path screenshots = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--demo" -> demo = true;
                case "--exit-after-demo" -> exitAfterDemo = true;
                case "--demo-seconds" -> {
                    if (i + 1 >= args.length || !args[i + 1].matches("\\d+")) {
                        usage("--demo-seconds needs a whole number of seconds");
                    }
                    demoSeconds = Integer.parseInt(args[++i]);
                }
                case "--demo-rate" -> {
                    if (i + 1 >= args.length || !args[i + 1].matches("[1-9]\\d{0,5}")) {
                        usage("--demo-rate needs a whole number of jobs a second, 1 to 999999");
                    }
                    demoRate = Integer.parseInt(args[++i]);
                }
                case "--screenshots" -> {
                    if (i + 1 >= args.length) {
                        usage("--screenshots needs a directory");
                    }
                    screenshots = java.nio.file.Path.of(args[++i]);
                }
                case "--help", "-h" -> {
                    System.out.println(USAGE);
                    return;
                }
                default -> usage("unknown option " + args[i]);
            }
        }
        LocalStack stack = start();
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime()
                .addShutdownHook(new Thread(
                        () -> {
                            stack.stop();
                            stopped.countDown();
                        },
                        "local-stack-stop"));
        if (demo) {
            boolean exact = new Demo(stack, Duration.ofSeconds(demoSeconds), demoRate, screenshots).run();
            if (exitAfterDemo) {
                System.exit(exact ? 0 : 1);
            }
            System.out.println("The stack keeps running; Ctrl-C stops it.");
        }
        stopped.await();
    }

    static final String USAGE =
            "usage: java -jar fenced-jobs-local.jar [--demo] [--demo-seconds N] [--demo-rate N] [--screenshots DIR]"
                    + " [--exit-after-demo]\n"
                    + "  --demo             submit a stream of jobs and, for a minute, kill the dispatcher leader now and then\n"
                    + "  --demo-seconds N   how long the demo runs (default 60)\n"
                    + "  --demo-rate N      jobs the demo submits a second (default 50)\n"
                    + "  --screenshots DIR  a few seconds before the demo ends, under load, screenshots of the consumer's and a\n"
                    + "                     dispatcher's dashboards (dashboard.png, dashboard-dispatcher.png; needs chromium)\n"
                    + "  --exit-after-demo  stop after the demo's summary; exit code 0 if every job had exactly one effect";

    private static void usage(String problem) {
        System.err.println("fenced-jobs-local: " + problem);
        System.err.println("Try --help.");
        System.exit(2);
    }

    static LocalStack start() throws Exception {
        System.out.println("Starting PostgreSQL 17 and a Kafka broker in this JVM...");
        EmbeddedPostgres postgres = EmbeddedPostgres.builder()
                .setServerConfig("max_connections", "100")
                .start();
        KafkaClusterTestKit kafka = TestKafka.startEmbedded();
        String adminUrl = "jdbc:postgresql://localhost:" + postgres.getPort() + "/postgres";
        try (Connection c = DriverManager.getConnection(adminUrl, "postgres", "");
                Statement s = c.createStatement()) {
            s.execute("CREATE ROLE " + OWNER + " LOGIN PASSWORD '" + OWNER_PASSWORD + "'");
            s.execute("CREATE DATABASE " + DATABASE + " OWNER " + OWNER);
        }
        String url = "jdbc:postgresql://localhost:" + postgres.getPort() + "/" + DATABASE;
        LocalStack stack = new LocalStack(postgres, kafka, url);
        DatabaseConfig owner = stack.database(OWNER, OWNER_PASSWORD);
        try (Connection c = DriverManager.getConnection(adminUrl, "postgres", "");
                Statement s = c.createStatement()) {
            s.execute("ALTER ROLE " + OWNER + " CREATEROLE");
        }
        Bootstrap.all(owner, ROLE_PASSWORDS, 0);
        stack.startDispatcher();
        stack.startDispatcher();
        stack.startChild("relay", "dev.fencedjobs.relay.RelayMain", Roles.RELAY);
        stack.startChild("consumer", "dev.fencedjobs.consumer.ConsumerMain", Roles.CONSUMER);
        stack.printBanner();
        new EffectWatcher(stack).start();
        return stack;
    }

    DatabaseConfig database(String user, String password) {
        return DatabaseConfig.of(jdbcUrl, user, password).withPoolSize(2);
    }

    Connection connect() throws SQLException {
        return DriverManager.getConnection(jdbcUrl, OWNER, OWNER_PASSWORD);
    }

    private void printBanner() {
        int port = postgres.getPort();
        System.out.println();
        System.out.println("fenced-jobs is running: 2 dispatchers, 1 relay, 1 consumer (separate processes).");
        System.out.println("  JDBC URL  " + jdbcUrl + "  (user " + OWNER + ", password " + OWNER_PASSWORD + ")");
        System.out.println("  psql      psql \"postgresql://" + OWNER + ":" + OWNER_PASSWORD + "@localhost:" + port
                + "/" + DATABASE + "\"");
        System.out.println("  producer  role " + Roles.PRODUCER + ", password " + ROLE_PASSWORDS.get(Roles.PRODUCER)
                + " (inserts jobs; reads, cancels and reschedules its own: my_jobs, cancel_job)");
        System.out.println("  Kafka     " + kafka.bootstrapServers()
                + ", topic fenced-jobs; each record signed by the relay with key "
                + trust.signingKeyId().orElseThrow() + " (made for this run), and the consumer applies no other");
        System.out.println(
                "  Submit    INSERT INTO jobs (resource, payload, due_at) VALUES ('account-1', '{\"cents\": 100}', clock_timestamp());");
        System.out.println(
                "  See       SELECT job_id, resource, fencing_token, applied_at FROM ledger ORDER BY id DESC LIMIT 5;");
        for (Child c : children) {
            System.out.println(String.format(
                    "  %-9s http://localhost:%d/  (%s: dashboard; /status, /metrics)",
                    c == children.get(0) ? "Dashboard" : "", c.httpPort(), c.name));
        }
        System.out.println("  Ctrl-C stops everything.");
        System.out.println();
    }

    Child startDispatcher() throws IOException {
        return startChild(
                "dispatcher-" + (++dispatchers), "dev.fencedjobs.dispatcher.DispatcherMain", Roles.DISPATCHER);
    }

    private Child startChild(String name, String mainClass, String role) throws IOException {
        // Port 0: the child binds a free port and logs it ("Ops endpoint on host:port"), read from its output. A port
        // picked here and bound by the child a moment later could be taken meanwhile (CI runs other servers beside
        // this), and that child would stop.
        Map<String, String> env = ServiceEnvironment.database(jdbcUrl, role, ROLE_PASSWORDS.get(role))
                .migrate(false)
                .httpPort(0)
                .kafka(kafka.bootstrapServers(), KafkaSettings.DEFAULT_TOPIC)
                .recordTrust(trust)
                .set(RelayConfig.PARTITIONS, "3")
                .set(OpsAccess.BIND_ADDRESS, "127.0.0.1")
                .lease(Duration.ofSeconds(5), Duration.ofSeconds(1))
                .toMap();
        CompletableFuture<Integer> port = new CompletableFuture<>();
        ServiceProcess process = ServiceProcess.mainClass(name, mainClass)
                .environment(env)
                .jvmOptions(List.of("-Xmx192m"))
                .echoTo(System.out)
                .onLine(line -> {
                    Matcher m = OPS_ENDPOINT.matcher(line);
                    if (m.find()) {
                        port.complete(Integer.parseInt(m.group(1)));
                    }
                })
                .start();
        Child child = new Child(name, process, port);
        children.add(child);
        return child;
    }

    List<Child> children() {
        return children;
    }

    String jdbcUrl() {
        return jdbcUrl;
    }

    void stop() {
        System.out.println(
                "Stopping: services first (they finish their work and release their leases), then Kafka and PostgreSQL.");
        for (Child c : children) {
            c.process.terminate();
        }
        for (Child c : children) {
            c.process.waitFor(Duration.ofSeconds(15));
        }
        // What the in-JVM broker logs while it stops says nothing about the stack. (Its directory is no
        // longer deleted under it by the test kit's shutdown hook: see TestKafka.startEmbedded.)
        for (String logger : new String[] {"kafka", "org.apache.kafka"}) {
            ((ch.qos.logback.classic.Logger) LoggerFactory.getLogger(logger))
                    .setLevel(ch.qos.logback.classic.Level.OFF);
        }
        try {
            kafka.close();
        } catch (Exception e) {
            System.err.println("stopping Kafka: " + e);
        }
        try {
            postgres.close();
        } catch (IOException e) {
            System.err.println("stopping PostgreSQL: " + e);
        }
    }

    /** The line a service logs once its ops endpoint listens (OpsServer). */
    private static final Pattern OPS_ENDPOINT = Pattern.compile("Ops endpoint on [^ ]*:([0-9]+):");

    /** A service process, its output shown with its name in front, and its ops endpoint. */
    static final class Child {
        final String name;
        final ServiceProcess process;
        private final CompletableFuture<Integer> port;

        Child(String name, ServiceProcess process, CompletableFuture<Integer> port) {
            this.name = name;
            this.process = process;
            this.port = port;
        }

        /**
         * Its ops endpoint's port (health, status and the dashboard at {@code /}), once it listens;
         * an exception when the process ended first or did not get there in a minute.
         */
        int httpPort() {
            long deadline = System.nanoTime() + TimeUnit.MINUTES.toNanos(1);
            while (true) {
                try {
                    return port.get(200, TimeUnit.MILLISECONDS);
                } catch (TimeoutException e) {
                    if (!process.isAlive()) {
                        throw new IllegalStateException(name + " exited with code " + process.exitCode()
                                + " before its ops endpoint listened; its output above says why");
                    }
                    if (System.nanoTime() > deadline) {
                        throw new IllegalStateException(name + "'s ops endpoint did not listen within a minute");
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException("interrupted waiting for " + name + "'s ops endpoint", e);
                } catch (ExecutionException e) {
                    throw new IllegalStateException(e.getCause());
                }
            }
        }
    }

    /** Prints the job and effect counts whenever they change. */
    static final class EffectWatcher extends Thread {
        private final LocalStack stack;

        EffectWatcher(LocalStack stack) {
            super("effect-watcher");
            setDaemon(true);
            this.stack = stack;
        }

        @Override
        public void run() {
            String last = "";
            Set<Child> reported = new HashSet<>();
            while (true) {
                try (Connection c = stack.connect();
                        Statement s = c.createStatement()) {
                    while (true) {
                        String now = Counts.read(s).line();
                        if (!now.equals(last)) {
                            System.out.println(String.format("%-13s| %s", "effects", now));
                            last = now;
                        }
                        for (Child child : stack.children()) {
                            if (child.process.crashed() && reported.add(child)) {
                                System.out.println(String.format(
                                        "%-13s| EXITED with code %d, not stopped by this stack: the system is not whole"
                                                + " (its output above says why)",
                                        child.name, child.process.exitCode()));
                            }
                        }
                        Thread.sleep(1000);
                    }
                } catch (SQLException e) {
                    sleepQuietly();
                } catch (InterruptedException e) {
                    return;
                }
            }
        }

        private static void sleepQuietly() {
            try {
                Thread.sleep(1000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
