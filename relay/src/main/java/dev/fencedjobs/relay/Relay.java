package dev.fencedjobs.relay;

import dev.fencedjobs.db.HolderId;
import dev.fencedjobs.db.Ticker;
import dev.fencedjobs.runtime.LeaderService;
import dev.fencedjobs.runtime.Leadership;
import dev.fencedjobs.runtime.ServiceMain;
import java.util.List;
import java.util.Map;
import java.util.function.UnaryOperator;

/**
 * One relay replica: leadership of the {@code relay} role and the {@link RelayLoop} that
 * publishes the outbox while this replica leads, woken by {@code outbox_inserted} notifications.
 */
public final class Relay implements ServiceMain.Running {

    static final String OUTBOX_INSERTED = "outbox_inserted";

    private final LeaderService service;

    private Relay(RelayConfig config, String holderId, Ticker ticker, UnaryOperator<Leadership.LeaseOps> leaseOps,
            UnaryOperator<OutboxStore> store, UnaryOperator<Publisher> publisher) {
        LeaderService.Spec spec = new LeaderService.Spec("relay", RelayConfig.ROLE, holderId, config.service(), config.lease(),
                config.service().database().statementTimeout(), List.of(OUTBOX_INSERTED), ticker, leaseOps);
        this.service = LeaderService.start(spec, parts -> new RelayLoop(config, parts.leadership(),
                store.apply(new JooqOutboxStore(parts.dsl(), parts.lease())), publisher.apply(new KafkaPublisher(config)),
                parts.ticker(), parts.registry()));
    }

    public static Relay start(RelayConfig config) {
        return start(config, HolderId.generate(), Ticker.system(), UnaryOperator.identity(), UnaryOperator.identity(),
                UnaryOperator.identity());
    }

    /** A replica whose lease operations, outbox store and publisher pass through the given decorators. */
    static Relay start(RelayConfig config, String holderId, Ticker ticker, UnaryOperator<Leadership.LeaseOps> leaseOps,
            UnaryOperator<OutboxStore> store, UnaryOperator<Publisher> publisher) {
        return new Relay(config, holderId, ticker, leaseOps, store, publisher);
    }

    public Leadership leadership() {
        return service.leadership();
    }

    public int httpPort() {
        return service.httpPort();
    }

    public boolean ready() {
        return service.ready();
    }

    Map<String, Object> status() {
        return service.status();
    }

    @Override
    public void awaitTermination() throws InterruptedException {
        service.awaitTermination();
    }

    @Override
    public void close() {
        service.close();
    }
}
