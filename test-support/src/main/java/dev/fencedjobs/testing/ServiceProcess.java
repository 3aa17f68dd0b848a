package dev.fencedjobs.testing;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * A service started from its packaged jar as a separate OS process, so tests can SIGKILL and
 * SIGTERM it like an operator or a crash would. Output goes to a log file under target/.
 */
public final class ServiceProcess implements AutoCloseable {

    private final String name;
    private final Process process;
    private final Path log;

    private ServiceProcess(String name, Process process, Path log) {
        this.name = name;
        this.process = process;
        this.log = log;
    }

    public static ServiceProcess start(String name, Path jar, Map<String, String> environment, Path logDirectory) {
        return start(name, jar, environment, logDirectory, List.of("-Xmx128m"));
    }

    /** Starts the jar with the given JVM options (heap size, GC) instead of the default {@code -Xmx128m}. */
    public static ServiceProcess start(String name, Path jar, Map<String, String> environment, Path logDirectory, List<String> jvmOptions) {
        if (!Files.isRegularFile(jar)) {
            throw new IllegalStateException(jar + " does not exist: run the tests with 'mvn verify' (they need the packaged jar)");
        }
        try {
            Files.createDirectories(logDirectory);
            Path log = logDirectory.resolve(name + ".log");
            List<String> command = new ArrayList<>();
            command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
            command.addAll(jvmOptions);
            command.add("-jar");
            command.add(jar.toString());
            ProcessBuilder builder = new ProcessBuilder(command)
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.to(log.toFile()));
            builder.environment().putAll(environment);
            return new ServiceProcess(name, builder.start(), log);
        } catch (IOException e) {
            throw new UncheckedIOException("could not start " + name, e);
        }
    }

    public long pid() {
        return process.pid();
    }

    public String name() {
        return name;
    }

    public boolean isAlive() {
        return process.isAlive();
    }

    /** SIGKILL: no shutdown hook runs, the lease is not released. */
    public void kill() {
        process.destroyForcibly();
        waitFor();
    }

    /** SIGTERM: the service's shutdown hook runs. */
    public void terminate() {
        process.destroy();
    }

    public int waitFor() {
        try {
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor(10, TimeUnit.SECONDS);
            }
            return process.exitValue();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    public String output() {
        try {
            return Files.readString(log);
        } catch (IOException e) {
            return "";
        }
    }

    @Override
    public void close() {
        if (process.isAlive()) {
            process.destroyForcibly();
            waitFor();
        }
    }
}
