package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.Faults;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** {@code java -jar fenced-jobs-dispatcher.jar}: runs one replica until SIGTERM or Ctrl-C. */
public final class DispatcherMain {

    private static final Logger log = LoggerFactory.getLogger(DispatcherMain.class);

    private DispatcherMain() {}

    public static void main(String[] args) throws InterruptedException {
        DispatcherConfig config;
        try {
            config = DispatcherConfig.from(Settings.fromEnvironment());
        } catch (ConfigException e) {
            System.err.println("dispatcher: invalid configuration: " + e.getMessage());
            System.exit(2);
            return;
        }
        Dispatcher dispatcher;
        try {
            dispatcher = Dispatcher.start(config);
        } catch (RuntimeException e) {
            log.error("Dispatcher could not start: {}", Faults.describe(e));
            System.exit(1);
            return;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(dispatcher::close, "dispatcher-shutdown"));
        dispatcher.awaitTermination();
    }
}
