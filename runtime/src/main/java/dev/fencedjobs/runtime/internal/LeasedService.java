package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.runtime.RunningService;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;

/** What a started leased service (dispatcher, relay) offers its owner; the work is in {@link LeaderService}. */
public abstract class LeasedService implements RunningService {

    private final LeaderService service;

    protected LeasedService(LeaderService service) {
        this.service = service;
    }

    @Override
    public State state() {
        return switch (service.leadership().state()) {
            case LEADER -> State.LEADING;
            // With shards: leading while it holds any shard's lease.
            case FOLLOWER -> service.leadingAny() ? State.LEADING : State.FOLLOWING;
            case STOPPED -> State.STOPPED;
        };
    }

    /** The fencing token of the latest grant it held (it may have lost it since: {@link #state()} says). */
    public Optional<FencingToken> token() {
        return service.leadership().lastGrant().map(Grant::token);
    }

    @Override
    public int httpPort() {
        return service.httpPort();
    }

    @Override
    public boolean ready() {
        return service.ready();
    }

    @Override
    public Map<String, Object> status() {
        return service.status();
    }

    @Override
    public void awaitTermination() throws InterruptedException {
        service.awaitTermination();
    }

    @Override
    public boolean awaitTermination(Duration timeout) throws InterruptedException {
        return service.awaitTermination(timeout);
    }

    @Override
    public void close() {
        service.close();
    }
}
