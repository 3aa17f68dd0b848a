package dev.fencedjobs.dispatcher;

import dev.fencedjobs.runtime.internal.ServiceMain;

/** {@code java -jar fenced-jobs-dispatcher.jar}: runs one replica until SIGTERM or Ctrl-C. */
public final class DispatcherMain {

    private DispatcherMain() {}

    public static void main(String[] args) throws InterruptedException {
        ServiceMain.run(
                "dispatcher",
                DispatcherConfig::from,
                config -> Dispatcher.builder(config).start());
    }
}
