package dev.fencedjobs.testing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A service run as a separate OS process (from its packaged jar, or a main class on this JVM's
 * class path), so that tests and tools can SIGKILL, SIGTERM, SIGSTOP and SIGCONT it as an operator
 * or a crash would, and start it again under the same name. Its output goes either to {@code
 * <name>.log} in a directory (made anew by the first start, appended to by each start after it),
 * or to this process's standard output with the name in front of each line.
 *
 * <p>The one launcher of the tests, the chaos suite, the benchmarks and {@code run-local}.
 */
public final class ServiceProcess implements AutoCloseable {

    private static final int STOP_SECONDS = 30;

    /**
     * This JVM's {@code -XX:TieredStopAtLevel} option, if it has one, for the JVMs it starts: the test
     * suite runs with C1 only (the parent pom's {@code argLine}: no test runs long enough for C2's code
     * to pay for its compilation, which on two cores took the CPU a restarted broker needed to start),
     * and so do the servers and services its tests start. A benchmark run as published has no such
     * option, and neither have the services it starts.
     */
    static final List<String> COMPILATION_OF_THIS_JVM =
            java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                    .filter(a -> a.startsWith("-XX:TieredStopAtLevel="))
                    .reduce((first, last) -> last)
                    .map(List::of)
                    .orElse(List.of());

    /** How to start one: what to run, its environment, JVM options and where its output goes. */
    public static final class Spec {
        private final String name;
        private final List<String> program;
        private Map<String, String> environment = Map.of();
        private List<String> jvmOptions = List.of("-Xmx128m");
        private Path logDirectory;
        private PrintStream echo;
        private Consumer<String> lines = line -> {};

        private Spec(String name, List<String> program) {
            this.name = Objects.requireNonNull(name, "name");
            this.program = program;
        }

        public Spec environment(Map<String, String> environment) {
            this.environment = Map.copyOf(environment);
            return this;
        }

        /** Instead of the default {@code -Xmx128m}. */
        public Spec jvmOptions(List<String> jvmOptions) {
            this.jvmOptions = List.copyOf(jvmOptions);
            return this;
        }

        /** Output to {@code <name>.log} in {@code directory}: replaced by the first start, appended to by each start after it. */
        public Spec logTo(Path directory) {
            this.logDirectory = directory;
            this.echo = null;
            return this;
        }

        /** Output to {@code out}, each line behind the name. */
        public Spec echoTo(PrintStream out) {
            this.echo = out;
            this.logDirectory = null;
            return this;
        }

        /** Each line of the echoed output, as it comes, also to {@code lines} (on the echo's thread). */
        public Spec onLine(Consumer<String> lines) {
            this.lines = Objects.requireNonNull(lines, "lines");
            return this;
        }

        public ServiceProcess start() {
            ServiceProcess p = new ServiceProcess(this);
            p.start();
            return p;
        }
    }

    /** A service from its packaged jar. */
    public static Spec jar(String name, Path jar) {
        if (!Files.isRegularFile(jar)) {
            throw new IllegalStateException(
                    jar + " does not exist: build it first (./mvnw -DskipTests package; the tests need 'mvn verify')");
        }
        return new Spec(name, List.of("-jar", jar.toString()));
    }

    /** A service from its main class, on this JVM's class path. */
    public static Spec mainClass(String name, String mainClass) {
        return new Spec(name, List.of("-cp", System.getProperty("java.class.path"), mainClass));
    }

    /** The jar with {@code -Xmx128m}, its output in {@code logDirectory}. */
    public static ServiceProcess start(String name, Path jar, Map<String, String> environment, Path logDirectory) {
        return jar(name, jar).environment(environment).logTo(logDirectory).start();
    }

    /** The jar with the given JVM options (heap size, GC), its output in {@code logDirectory}. */
    public static ServiceProcess start(
            String name, Path jar, Map<String, String> environment, Path logDirectory, List<String> jvmOptions) {
        return jar(name, jar)
                .environment(environment)
                .jvmOptions(jvmOptions)
                .logTo(logDirectory)
                .start();
    }

    private final Spec spec;
    private Process process;
    /** Set when this side ends the process; a process that exits otherwise has crashed. */
    private boolean expectedExit;
    /** Where the latest start's output begins in the log file. */
    private long logOffset;

    private ServiceProcess(Spec spec) {
        this.spec = spec;
    }

    /** Starts it (again, after it ended: same name, environment and output). */
    public synchronized void start() {
        if (process != null && process.isAlive()) {
            throw new IllegalStateException(spec.name + " is still running (pid " + process.pid() + ")");
        }
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.addAll(spec.jvmOptions);
        command.addAll(COMPILATION_OF_THIS_JVM);
        command.addAll(spec.program);
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        builder.environment().putAll(spec.environment);
        try {
            if (spec.logDirectory != null) {
                Files.createDirectories(spec.logDirectory);
                if (process == null) {
                    Files.deleteIfExists(log());
                }
                Files.writeString(
                        log(),
                        "===== starting " + spec.name + " at " + Instant.now() + " =====\n",
                        StandardOpenOption.CREATE,
                        StandardOpenOption.APPEND);
                logOffset = Files.size(log());
                builder.redirectOutput(ProcessBuilder.Redirect.appendTo(log().toFile()));
            }
            process = builder.start();
        } catch (IOException e) {
            throw new UncheckedIOException("could not start " + spec.name, e);
        }
        expectedExit = false;
        if (spec.echo != null) {
            pump(process, spec.name, spec.echo, spec.lines);
        }
    }

    private static void pump(Process process, String name, PrintStream out, Consumer<String> lines) {
        Thread pump = new Thread(
                () -> {
                    try (BufferedReader r = new BufferedReader(
                            new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                        String line;
                        while ((line = r.readLine()) != null) {
                            out.println(String.format("%-13s| %s", name, line));
                            lines.accept(line);
                        }
                    } catch (IOException e) {
                        // The process is gone.
                    }
                },
                "pump-" + name);
        pump.setDaemon(true);
        pump.start();
    }

    public String name() {
        return spec.name;
    }

    /** The log file, when the output goes to one. */
    public Path log() {
        return spec.logDirectory == null ? null : spec.logDirectory.resolve(spec.name + ".log");
    }

    public synchronized long pid() {
        return process == null ? -1 : process.pid();
    }

    public synchronized boolean isAlive() {
        return process != null && process.isAlive();
    }

    /** True when the process ended without this side ending it. */
    public synchronized boolean crashed() {
        return process != null && !process.isAlive() && !expectedExit;
    }

    /** The exit code, or null while it runs (or never ran). */
    public synchronized Integer exitCode() {
        return process == null || process.isAlive() ? null : process.exitValue();
    }

    private synchronized Process ending() {
        expectedExit = true;
        return process;
    }

    /** SIGKILL: no shutdown hook runs, the lease is not released. Waits for the process to end. */
    public void kill() {
        Process p = ending();
        p.destroyForcibly();
        waitFor(p, Duration.ofSeconds(STOP_SECONDS));
    }

    /** SIGTERM: the service's shutdown hook runs. Does not wait. */
    public void terminate() {
        ending().destroy();
    }

    /**
     * SIGTERM, then waits up to {@code grace} for the graceful stop, and SIGKILLs it after that;
     * returns the exit code.
     */
    public int stop(Duration grace) {
        terminate();
        return waitFor(grace);
    }

    /** SIGSTOP: the process holds still, its sockets open. */
    public void pause() {
        signal("STOP");
    }

    /** SIGCONT. */
    public void resume() {
        signal("CONT");
    }

    private void signal(String signal) {
        try {
            Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(pid()))
                    .inheritIO()
                    .start();
            if (!kill.waitFor(10, TimeUnit.SECONDS) || kill.exitValue() != 0) {
                throw new IllegalStateException("kill -" + signal + " " + pid() + " failed");
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** Waits for the process to end (SIGKILL after 30 s) and returns its exit code. */
    public int waitFor() {
        return waitFor(Duration.ofSeconds(STOP_SECONDS));
    }

    /** Waits up to {@code grace} for the process to end, SIGKILLs it after that, and returns its exit code. */
    public int waitFor(Duration grace) {
        Process p;
        synchronized (this) {
            p = process;
        }
        if (!waitFor(p, grace)) {
            System.out.println(spec.name + " did not stop within " + grace.toSeconds() + " s; killing it");
            ending().destroyForcibly();
            waitFor(p, Duration.ofSeconds(STOP_SECONDS));
        }
        return p.exitValue();
    }

    private static boolean waitFor(Process p, Duration timeout) {
        try {
            return p.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** What it wrote to its log file since its latest start; empty when its output is echoed instead. */
    public String output() {
        Path file = log();
        if (file == null) {
            return "";
        }
        long from;
        synchronized (this) {
            from = logOffset;
        }
        try (InputStream in = Files.newInputStream(file)) {
            in.skipNBytes(from);
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "";
        }
    }

    @Override
    public void close() {
        if (isAlive()) {
            kill();
        }
    }

    @Override
    public String toString() {
        return spec.name + " (pid " + pid() + ")";
    }
}
