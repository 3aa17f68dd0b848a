package dev.fencedjobs.runtime;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.util.function.Function;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The shared {@code main} of the services: read and validate the settings (a bad one exits with
 * code 2 and a one-line message), start, run until SIGTERM or Ctrl-C, stop gracefully.
 */
public final class ServiceMain {

    private static final Logger log = LoggerFactory.getLogger(ServiceMain.class);

    private ServiceMain() {}

    public static <C> void run(String name, Function<Settings, C> config, Function<C, ? extends RunningService> start) throws InterruptedException {
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
