package dev.fencedjobs.relay;

import dev.fencedjobs.db.HolderId;
import dev.fencedjobs.db.Ticker;
import dev.fencedjobs.runtime.LeaderService;
import dev.fencedjobs.runtime.LeasedService;
import dev.fencedjobs.runtime.Leadership;
import java.util.List;
import java.util.function.UnaryOperator;

/**
 * One relay replica: leadership of the {@code relay} role and the {@link RelayLoop} that
 * publishes the outbox while this replica leads, woken by {@code outbox_inserted} notifications.
 */
public final class Relay extends LeasedService {

    static final String OUTBOX_INSERTED = "outbox_inserted";

    private Relay(LeaderService service) {
        super(service);
    }

    public static Relay start(RelayConfig config) {
        return start(config, HolderId.generate(), Ticker.system(), UnaryOperator.identity(), UnaryOperator.identity(),
                UnaryOperator.identity());
    }

    /** A replica whose lease operations, outbox store and publisher pass through the given decorators. */
    static Relay start(RelayConfig config, String holderId, Ticker ticker, UnaryOperator<Leadership.LeaseOps> leaseOps,
            UnaryOperator<OutboxStore> store, UnaryOperator<Publisher> publisher) {
        LeaderService.Spec spec = new LeaderService.Spec("relay", RelayConfig.ROLE, holderId, config.service(), config.lease(),
                config.service().database().statementTimeout(), List.of(OUTBOX_INSERTED), ticker, leaseOps);
        return new Relay(LeaderService.start(spec, parts -> new RelayLoop(config, parts.leadership(),
                store.apply(new JooqOutboxStore(parts.dsl(), parts.lease())), publisher.apply(new KafkaPublisher(config)),
                parts.ticker(), parts.registry())));
    }
}
