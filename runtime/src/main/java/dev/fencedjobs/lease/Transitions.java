package dev.fencedjobs.lease;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A {@link Leadership}'s transitions, each logged once at INFO with holder and token, and the
 * listeners told of each. Logged on the lease thread, which alone reads {@link #leaderToken}.
 */
final class Transitions {

    private static final Logger log = LoggerFactory.getLogger(Leadership.class);

    private final String role;
    private final String holderId;
    private final List<Runnable> listeners = new CopyOnWriteArrayList<>();
    /** The token last logged as held, or null: every transition is logged once. */
    private FencingToken leaderToken;

    Transitions(String role, String holderId) {
        this.role = role;
        this.holderId = holderId;
    }

    void listen(Runnable listener) {
        listeners.add(listener);
    }

    /** The token last logged as held; null when the last transition logged was to follower. */
    FencingToken leaderToken() {
        return leaderToken;
    }

    /** Logs the transition to {@code to} under {@code token}, and tells the listeners. */
    void log(Leadership.State to, FencingToken token, String reason) {
        Leadership.State from = leaderToken == null ? Leadership.State.FOLLOWER : Leadership.State.LEADER;
        leaderToken = to == Leadership.State.LEADER ? token : null;
        log.info("Lease {}: {} -> {} (holder {}, token {}): {}", role, from, to, holderId, token, reason);
        notifyListeners();
    }

    void notifyListeners() {
        for (Runnable listener : listeners) {
            listener.run();
        }
    }
}
