package dev.fencedjobs.consumer;

import dev.fencedjobs.runtime.internal.ServiceMain;

/** {@code java -jar fenced-jobs-consumer.jar}: runs one consumer instance with the ledger effect. */
public final class ConsumerMain {

    private ConsumerMain() {}

    public static void main(String[] args) throws InterruptedException {
        ServiceMain.run(
                "consumer",
                ConsumerConfig::from,
                (ConsumerConfig config) ->
                        FencedConsumer.builder(config, new LedgerEffect()).start());
    }
}
