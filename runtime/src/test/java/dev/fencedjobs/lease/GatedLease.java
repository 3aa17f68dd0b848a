package dev.fencedjobs.lease;

import dev.fencedjobs.testing.Gate;
import java.util.Optional;

/** A replica's lease statements behind a {@link Gate}: closing it stops them as SIGSTOP would, its sessions kept. */
public final class GatedLease {

    private GatedLease() {}

    public static LeaseOps gated(Gate gate, LeaseOps delegate) {
        return new LeaseOps() {
            @Override
            public Optional<Grant> acquireOrRenew() {
                gate.pass();
                return delegate.acquireOrRenew();
            }

            @Override
            public boolean release(FencingToken token) {
                gate.pass();
                return delegate.release(token);
            }

            @Override
            public Optional<Lease.Holder> holder() {
                gate.pass();
                return delegate.holder();
            }

            @Override
            public Optional<Grant> takeOver(FencingToken token) {
                gate.pass();
                return delegate.takeOver(token);
            }
        };
    }
}
