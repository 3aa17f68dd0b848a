package dev.fencedjobs.chaos;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * One service replica run from its packaged jar as an OS process, which the runner can SIGKILL,
 * SIGTERM, SIGSTOP and SIGCONT, and start again under the same name and database proxy. Its output
 * is appended to {@code <name>.log} across restarts.
 */
final class Service {

    final String name;
    final String kind;
    final TcpProxy proxy;
    private final Path jar;
    private final Map<String, String> environment;
    private final Path log;
    private final List<String> jvmOptions;
    private Process process;
    /** Set when the runner ends the process itself; a process that exits otherwise has crashed. */
    private volatile boolean expectedExit;

    Service(String name, String kind, Path jar, Map<String, String> environment, TcpProxy proxy, Path logDirectory, List<String> jvmOptions) {
        this.name = name;
        this.kind = kind;
        this.jar = jar;
        this.environment = environment;
        this.proxy = proxy;
        this.log = logDirectory.resolve(name + ".log");
        this.jvmOptions = jvmOptions;
    }

    synchronized void start() {
        if (!Files.isRegularFile(jar)) {
            throw new IllegalStateException(jar + " does not exist: build it first (./mvnw -DskipTests package)");
        }
        List<String> command = new java.util.ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.addAll(jvmOptions);
        command.add("-jar");
        command.add(jar.toString());
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
        builder.environment().putAll(environment);
        try {
            Files.writeString(log, "\n===== chaos: starting " + name + " at " + java.time.Instant.now() + " =====\n",
                    java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
            process = builder.start();
        } catch (IOException e) {
            throw new UncheckedIOException("could not start " + name, e);
        }
        expectedExit = false;
    }

    synchronized long pid() {
        return process == null ? -1 : process.pid();
    }

    synchronized boolean alive() {
        return process != null && process.isAlive();
    }

    /** True when the process ended without the runner ending it. */
    synchronized boolean crashed() {
        return process != null && !process.isAlive() && !expectedExit;
    }

    synchronized Integer exitCode() {
        return process == null || process.isAlive() ? null : process.exitValue();
    }

    /** SIGKILL: no shutdown hook, the lease is left to expire. */
    void kill() {
        Process p;
        synchronized (this) {
            expectedExit = true;
            p = process;
        }
        p.destroyForcibly();
        waitFor(p, 30);
    }

    /** SIGTERM, then waits for the graceful shutdown; returns the exit code. */
    int terminate() {
        Process p;
        synchronized (this) {
            expectedExit = true;
            p = process;
        }
        p.toHandle().destroy();
        if (!waitFor(p, 40)) {
            System.out.println("chaos: " + name + " did not stop within 40 s of SIGTERM; killing it");
            p.destroyForcibly();
            waitFor(p, 30);
        }
        return p.exitValue();
    }

    void pause() {
        signal("STOP");
    }

    void resume() {
        signal("CONT");
    }

    private void signal(String signal) {
        try {
            Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(pid())).inheritIO().start();
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

    private static boolean waitFor(Process p, int seconds) {
        try {
            return p.waitFor(seconds, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    @Override
    public String toString() {
        return name + " (pid " + pid() + ")";
    }
}
