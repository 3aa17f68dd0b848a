package dev.fencedjobs.lease;

import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CopyOnWriteArrayList;

/** Leadership as a test sets it: a loop's steps see the grant it hands out, and its step-downs are recorded. */
public final class ScriptedGrants implements Grants {

    private final String role;
    private final List<Runnable> listeners = new CopyOnWriteArrayList<>();
    private final List<String> stepDowns = new ArrayList<>();
    private Grant grant;

    public ScriptedGrants(String role) {
        this.role = role;
    }

    /** Leads under {@code token} from now on, and tells the listeners. */
    public Grant lead(long token) {
        grant = new Grant(
                role,
                "test",
                FencingToken.of(token),
                OffsetDateTime.now(ZoneOffset.UTC).plusSeconds(10),
                Long.MAX_VALUE);
        listeners.forEach(Runnable::run);
        return grant;
    }

    /** Leads no longer (a renewal lost the lease), and tells the listeners. */
    public void lose() {
        grant = null;
        listeners.forEach(Runnable::run);
    }

    /** The reasons the loop gave for stepping down, in order. */
    public List<String> stepDowns() {
        return stepDowns;
    }

    @Override
    public Optional<Grant> current() {
        return Optional.ofNullable(grant);
    }

    @Override
    public void stepDown(Grant stale, String reason) {
        if (stale.equals(grant)) {
            grant = null;
            stepDowns.add(reason);
        }
    }

    @Override
    public void onChange(Runnable listener) {
        listeners.add(listener);
    }
}
