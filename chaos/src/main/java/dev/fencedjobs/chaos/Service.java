package dev.fencedjobs.chaos;

import dev.fencedjobs.testing.ServiceProcess;
import dev.fencedjobs.testing.TcpProxy;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

/**
 * One service replica of the run: its process (a {@link ServiceProcess} from its packaged jar,
 * which the runner can SIGKILL, SIGTERM, SIGSTOP and SIGCONT and start again under the same name,
 * its output appended to {@code <name>.log}), its kind and the database proxy it reaches
 * PostgreSQL through.
 */
final class Service {

    private static final Duration GRACE = Duration.ofSeconds(40);

    final String name;
    final String kind;
    final TcpProxy proxy;
    private final ServiceProcess.Spec spec;
    private ServiceProcess process;

    Service(
            String name,
            String kind,
            Path jar,
            Map<String, String> environment,
            TcpProxy proxy,
            Path logDirectory,
            List<String> jvmOptions) {
        this.name = name;
        this.kind = kind;
        this.proxy = proxy;
        this.spec = ServiceProcess.jar(name, jar)
                .environment(environment)
                .jvmOptions(jvmOptions)
                .logTo(logDirectory);
    }

    synchronized void start() {
        if (process == null) {
            process = spec.start();
        } else {
            process.start();
        }
    }

    synchronized long pid() {
        return process == null ? -1 : process.pid();
    }

    synchronized boolean alive() {
        return process != null && process.isAlive();
    }

    /** True when the process ended without the runner ending it. */
    synchronized boolean crashed() {
        return process != null && process.crashed();
    }

    synchronized Integer exitCode() {
        return process == null ? null : process.exitCode();
    }

    private synchronized ServiceProcess process() {
        return process;
    }

    /** SIGKILL: no shutdown hook, the lease is left to expire. */
    void kill() {
        process().kill();
    }

    /** SIGTERM, then waits for the graceful stop (SIGKILL after 40 s); returns the exit code. */
    int terminate() {
        return process().stop(GRACE);
    }

    void pause() {
        process().pause();
    }

    void resume() {
        process().resume();
    }

    @Override
    public String toString() {
        return name + " (pid " + pid() + ")";
    }
}
