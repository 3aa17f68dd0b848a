package dev.fencedjobs.dispatcher;

import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.lease.LeaseOps;
import dev.fencedjobs.testing.Gate;

/**
 * Pauses one dispatcher replica: once paused, its lease operations and its batches stop where
 * they stand until resumed; its worker keeps the grant it already took.
 */
final class PauseSwitch {

    private final Gate gate = new Gate();

    void pause() {
        gate.close();
    }

    void resume() {
        gate.open();
    }

    int blocked() {
        return gate.waiting();
    }

    LeaseOps lease(LeaseOps delegate) {
        return pausing(gate, delegate);
    }

    static LeaseOps pausing(Gate gate, LeaseOps delegate) {
        return dev.fencedjobs.lease.GatedLease.gated(gate, delegate);
    }

    JobBatches batches(JobBatches delegate) {
        return new ForwardingBatches(delegate) {
            @Override
            public BatchResult completeDue(Grant grant, int limit, Position after, String startKey) {
                gate.pass();
                return super.completeDue(grant, limit, after, startKey);
            }

            @Override
            public NextDue nextDue(Position after) {
                gate.pass();
                return super.nextDue(after);
            }
        };
    }
}
