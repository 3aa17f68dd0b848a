package dev.fencedjobs.relay;

import dev.fencedjobs.runtime.internal.ServiceMain;

/** {@code java -jar fenced-jobs-relay.jar}: runs one relay replica until SIGTERM or Ctrl-C. */
public final class RelayMain {

    private RelayMain() {}

    public static void main(String[] args) throws InterruptedException {
        ServiceMain.run(
                "relay", RelayConfig::from, config -> Relay.builder(config).start());
    }
}
