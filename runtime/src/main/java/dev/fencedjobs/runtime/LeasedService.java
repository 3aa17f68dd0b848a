package dev.fencedjobs.runtime;

import java.util.Map;

/** What a started leased service (dispatcher, relay) offers its owner; the work is in {@link LeaderService}. */
public abstract class LeasedService implements ServiceMain.Running {

    private final LeaderService service;

    protected LeasedService(LeaderService service) {
        this.service = service;
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

    public Map<String, Object> status() {
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
