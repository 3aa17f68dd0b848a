package dev.fencedjobs.lease;

import java.util.Optional;

/** The lease operations {@link Leadership} needs; {@link LeaseSession} (with the fast path) or {@link Lease} provides them. */
public interface LeaseOps {
    Optional<Grant> acquireOrRenew();

    boolean release(FencingToken token);

    /**
     * The current holder as a follower sees it; empty when not known. A follower sleeps until
     * its lease expires instead of asking every renewal interval, and so takes over the moment
     * a killed leader's lease expires; with the fast path it also waits for the holder's
     * session to end, when the holder shows a sign of life.
     */
    default Optional<Lease.Holder> holder() {
        return Optional.empty();
    }

    /** Takes over from {@code token}, whose holder's session ended; empty when the token moved on. */
    default Optional<Grant> takeOver(FencingToken token) {
        return Optional.empty();
    }
}
