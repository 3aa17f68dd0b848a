package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.RunningService;
import java.util.function.Function;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The shared {@code main} of the services: read and validate the settings (a bad one exits with
 * code 2 and a one-line message), start, run until SIGTERM or Ctrl-C, stop gracefully.
 */
public final class ServiceMain {

    /** The services' logging configuration, in this jar: the library jars ship no {@code logback.xml}. */
    static final String LOGGING = "dev/fencedjobs/service-logback.xml";

    private ServiceMain() {}

    public static <C> void run(String name, Function<Settings, C> config, Function<C, ? extends RunningService> start)
            throws InterruptedException {
        // Before the first logger: a process with a logback.xml of its own (run-local, the tools) or
        // told which one to use keeps it.
        if (System.getProperty("logback.configurationFile") == null
                && ServiceMain.class.getClassLoader().getResource("logback.xml") == null) {
            System.setProperty("logback.configurationFile", LOGGING);
        }
        Logger log = LoggerFactory.getLogger(ServiceMain.class);
        C parsed;
        try {
            parsed = config.apply(Settings.fromEnvironment());
        } catch (ConfigException e) {
            System.err.println(name + ": invalid configuration: " + e.getMessage());
            System.exit(2);
            return;
        }
        RunningService service;
        try {
            service = start.apply(parsed);
        } catch (ConfigException e) {
            System.err.println(name + ": invalid configuration: " + e.getMessage());
            System.exit(2);
            return;
        } catch (RuntimeException e) {
            log.error("{} could not start: {}", name, Faults.describe(e));
            System.exit(1);
            return;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(service::close, name + "-shutdown"));
        service.awaitTermination();
    }
}
