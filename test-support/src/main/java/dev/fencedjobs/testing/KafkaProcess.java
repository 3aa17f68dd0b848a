package dev.fencedjobs.testing;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.Uuid;

/**
 * A single-node KRaft Kafka broker in a separate JVM ({@code kafka.Kafka}), on a fixed port and
 * log directory, so a test can stop it (SIGKILL) and start it again with its data intact.
 */
public final class KafkaProcess implements AutoCloseable {

    private final Path directory;
    private final Path config;
    private final int port;
    private Process process;

    public KafkaProcess() {
        this(0);
    }

    /**
     * A broker that tells clients to connect to {@code advertisedPort} on localhost instead of the
     * port it listens on (0: its own), so that a proxy there sees every client connection.
     */
    public KafkaProcess(int advertisedPort) {
        this(advertisedPort, null, List.of(), List.of());
    }

    /**
     * A broker with one more listener beside PLAINTEXT ({@code name://localhost:port}, its name also
     * its security protocol, e.g. {@code SASL_SSL://localhost:4242}), more broker settings, and more
     * arguments for {@code kafka-storage format} (SCRAM credentials, say).
     */
    public KafkaProcess(int advertisedPort, String extraListener, List<String> extraConfig, List<String> formatArgs) {
        this(1, 0, advertisedPort, 0, null, null, extraListener, extraConfig, formatArgs);
        start();
    }

    /**
     * Node {@code nodeId} of a cluster whose controllers are {@code voters}
     * ({@code 1@localhost:port,2@…}), on the given ports; formatted, not started.
     */
    static KafkaProcess member(
            String clusterId, int nodeId, int port, int controllerPort, String voters, List<String> extraConfig) {
        return new KafkaProcess(nodeId, port, 0, controllerPort, voters, clusterId, null, extraConfig, List.of());
    }

    private KafkaProcess(
            int nodeId,
            int listenPort,
            int advertisedPort,
            int controllerListenPort,
            String voters,
            String clusterId,
            String extraListener,
            List<String> extraConfig,
            List<String> formatArgs) {
        try {
            directory = Files.createTempDirectory("fj-kafka");
            port = listenPort == 0 ? freePort() : listenPort;
            int advertised = advertisedPort == 0 ? port : advertisedPort;
            int controllerPort = controllerListenPort == 0 ? freePort() : controllerListenPort;
            String extra = extraListener == null ? "" : "," + extraListener;
            String extraName = extraListener == null
                    ? ""
                    : "," + extraListener.substring(0, extraListener.indexOf(':')) + ":"
                            + extraListener.substring(0, extraListener.indexOf(':'));
            config = directory.resolve("server.properties");
            List<String> lines = new ArrayList<>(List.of(
                    "process.roles=broker,controller",
                    "node.id=" + nodeId,
                    voters == null
                            ? "controller.quorum.bootstrap.servers=localhost:" + controllerPort
                            : "controller.quorum.voters=" + voters,
                    "listeners=PLAINTEXT://localhost:" + port + extra + ",CONTROLLER://localhost:" + controllerPort,
                    "advertised.listeners=PLAINTEXT://localhost:" + advertised + extra + ",CONTROLLER://localhost:"
                            + controllerPort,
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT" + extraName,
                    "log.dirs=" + directory.resolve("data"),
                    "num.partitions=1",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "transaction.state.log.num.partitions=4",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false"));
            // Later lines win: a cluster's replication settings override the single node's above.
            lines.addAll(extraConfig);
            Files.writeString(config, String.join("\n", lines) + "\n");
            List<String> format = new ArrayList<>(List.of(
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    clusterId == null ? Uuid.randomUuid().toString() : clusterId,
                    "-c",
                    config.toString()));
            if (voters == null) {
                format.add("--standalone");
            }
            format.addAll(formatArgs);
            run(format, directory.resolve("format.log"), true);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The broker's configuration, log ({@code broker.log}) and data ({@code data/}). */
    public Path directory() {
        return directory;
    }

    public String bootstrapServers() {
        return "localhost:" + port;
    }

    /** The port the broker listens on. */
    public int port() {
        return port;
    }

    public synchronized void start() {
        launch();
        awaitListening();
    }

    /** Starts the process without waiting: a cluster's nodes must start together to elect a controller. */
    synchronized void launch() {
        if (process != null && process.isAlive()) {
            return;
        }
        process = run(List.of("kafka.Kafka", config.toString()), directory.resolve("broker.log"), false);
    }

    /**
     * Waits until the broker accepts connections. A broker that does not says why in the exception:
     * whether it exited (and with which code) or is still not listening, and the end of its log, as
     * the log's directory is removed with the cluster (ChaosIT once failed with only its path).
     */
    synchronized void awaitListening() {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!listening()) {
            if (System.nanoTime() > deadline || !process.isAlive()) {
                String state = process.isAlive()
                        ? "still not listening on port " + port + " after 60 s"
                        : "exited with code " + process.exitValue();
                Path log = directory.resolve("broker.log");
                throw new IllegalStateException(
                        "Kafka broker did not start: " + state + "; the end of " + log + ":\n" + tail(log, 40));
            }
            sleep(100);
        }
    }

    /** The last {@code lines} lines of {@code file}, or why they could not be read. */
    private static String tail(Path file, int lines) {
        try {
            List<String> all = Files.readAllLines(file, java.nio.charset.StandardCharsets.UTF_8);
            return String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size()));
        } catch (IOException | UncheckedIOException e) {
            return "(not readable: " + e + ")";
        }
    }

    /** SIGTERM: a controlled shutdown (the broker closes its logs cleanly). */
    public synchronized void stop() {
        signalStop();
        awaitStop();
    }

    /** Sends SIGTERM without waiting, so that a cluster's nodes stop together. */
    synchronized void signalStop() {
        if (process != null) {
            process.toHandle().destroy();
        }
    }

    /** Waits for a stop that {@link #signalStop()} began; SIGKILL after 60 s. */
    synchronized void awaitStop() {
        if (process != null) {
            try {
                if (!process.waitFor(60, TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                    process.waitFor(30, TimeUnit.SECONDS);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            process = null;
        }
    }

    /** SIGKILL: the broker vanishes without a controlled shutdown. */
    public synchronized void kill() {
        if (process != null) {
            process.destroyForcibly();
            try {
                process.waitFor(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            process = null;
        }
    }

    private boolean listening() {
        try (Socket ignored = new Socket("localhost", port)) {
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private static Process run(List<String> mainAndArgs, Path log, boolean wait) {
        try {
            List<String> command = new ArrayList<>(List.of(
                    Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-Xmx512m"));
            command.addAll(ServiceProcess.COMPILATION_OF_THIS_JVM);
            command.addAll(List.of("-cp", System.getProperty("java.class.path")));
            command.addAll(mainAndArgs);
            Process p = new ProcessBuilder(command)
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()))
                    .start();
            if (wait && (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0)) {
                throw new IllegalStateException(mainAndArgs.get(0) + " failed; see " + log);
            }
            return p;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** A port nothing listens on now. */
    public static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public synchronized void close() {
        kill();
        try (var files = Files.walk(directory)) {
            files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // A temp directory left behind is harmless.
        }
    }
}
