package dev.fencedjobs.runtime.internal;

import dev.fencedjobs.db.internal.Shards;
import dev.fencedjobs.lease.LeaseSession;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import org.jooq.exception.DataAccessException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Keeps a replica's {@link ShardSlot}s in step with the shard map and its share of the shards
 * (docs/shards.md), on a thread of its own, every renewal interval and whenever the map changes:
 *
 * <ol>
 *   <li>reads the map: a slot for each shard in force is started, one for a shard the map no
 *       longer has is stopped (its worker finishes, its lease is released);
 *   <li>shows this replica alive: a session-level advisory lock on a session of its own, which
 *       PostgreSQL lets go the moment the replica's process dies; the live replicas of the role are
 *       counted by those locks, so a dead one stops counting at once;
 *   <li>computes the share ({@link ShardShare}): each slot's lease thread takes a free or offered
 *       shard only below it, and the excess is given up ({@code Leadership#yieldLease});
 *   <li>for the dispatcher, while the map drains and this replica holds shard 0, calls {@code
 *       shards_switch()} until the new count is in force.
 * </ol>
 */
final class ShardKeeper {

    private static final Logger log = LoggerFactory.getLogger(ShardKeeper.class);
    /** How often a drain is checked on while this replica holds shard 0. */
    private static final Duration DRAIN_CHECK = Duration.ofMillis(50);

    private final LeaderService.Spec spec;
    private final ServiceRuntime runtime;
    private final Function<LeaderService.Parts, LeaderService.Worker> workerFactory;
    private final ConcurrentSkipListMap<Integer, ShardSlot> slots = new ConcurrentSkipListMap<>();
    private final Wakeup wakeup = new Wakeup();
    private final Thread thread;
    private final LeaseSession.Connections presenceSessions;
    private final int presenceKey;
    private final int presenceId = ThreadLocalRandom.current().nextInt();

    private volatile boolean stopped;
    /** Set once {@link #start} has started the first slots: later ones start as they are made. */
    private volatile boolean started;

    private volatile ShardShare share = new ShardShare(1, 1);
    private volatile Shards.ShardMap map = new Shards.ShardMap(0, 1, null);
    /** The keeper thread's own. */
    private Connection presence;

    ShardKeeper(
            LeaderService.Spec spec,
            ServiceRuntime runtime,
            Function<LeaderService.Parts, LeaderService.Worker> workerFactory) {
        this.spec = spec;
        this.runtime = runtime;
        this.workerFactory = workerFactory;
        this.presenceSessions = runtime.sessions("presence");
        this.presenceKey = ("fenced-jobs replicas " + spec.role()).hashCode();
        this.thread = new Thread(this::run, spec.service() + "-shards");
        thread.setDaemon(true);
        // Shard 0 is always there: it is the role's lease as before shards, and its holder does the housekeeping.
        slots.put(0, newSlot(0));
    }

    private ShardSlot newSlot(int shard) {
        return new ShardSlot(spec, shard, runtime, () -> mayTake(), workerFactory);
    }

    /** Reads the map and starts the slots before the first lease attempt, then keeps them. */
    void start() {
        try {
            turn();
        } catch (RuntimeException e) {
            log.warn(
                    "{}: reading the shard map failed; starting with shard 0 and trying again: {}",
                    spec.service(),
                    Faults.describe(e));
        }
        for (ShardSlot slot : slots.values()) {
            slot.start();
        }
        started = true;
        thread.start();
    }

    void wake() {
        wakeup.signal();
    }

    Collection<ShardSlot> slots() {
        return slots.values();
    }

    ShardSlot first() {
        return slots.get(0);
    }

    /** The slot whose lease is {@code role}; null for none. */
    ShardSlot slot(String role) {
        return Shards.shardOf(spec.role(), role).map(slots::get).orElse(null);
    }

    private int leading() {
        int n = 0;
        for (ShardSlot slot : slots.values()) {
            if (slot.leading()) {
                n++;
            }
        }
        return n;
    }

    private boolean mayTake() {
        return share.mayTake(leading());
    }

    private void run() {
        boolean finishing = false;
        long fullTurnAt = System.nanoTime();
        while (!stopped) {
            try {
                // While this replica finishes a drain: the switch alone every 50 ms, the whole turn (the map, the
                // replicas, the shares) at the renewal interval as ever; every other replica waits for the switch's
                // notification.
                if (finishing
                        && System.nanoTime() - fullTurnAt
                                < spec.lease().renewInterval().toNanos()) {
                    finishing = finishes() && finishDrain();
                } else {
                    fullTurnAt = System.nanoTime();
                    finishing = turn();
                }
                turnFailureShownAt = 0;
            } catch (RuntimeException e) {
                // While the map drains, no job completes until the holder of shard 0 switches it: look again soon.
                finishing = map.draining() && finishes();
                Duration next = finishing ? DRAIN_CHECK : spec.lease().renewInterval();
                long now = System.nanoTime();
                if (turnFailureShownAt == 0 || now - turnFailureShownAt > TimeUnit.SECONDS.toNanos(5)) {
                    turnFailureShownAt = now;
                    log.warn("{}: shard keeping failed, next turn in {}: {}", spec.service(), next, Faults.describe(e));
                } else {
                    log.debug(
                            "{}: shard keeping failed, next turn in {}: {}", spec.service(), next, Faults.describe(e));
                }
                dropPresence();
            }
            try {
                wakeup.await((finishing ? DRAIN_CHECK : spec.lease().renewInterval()).toNanos(), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    /** One turn; true while the map drains and this replica finishes it. */
    private boolean turn() {
        Shards.ShardMap now = runtime.dsl().connectionResult(Shards::read);
        map = now;
        reconcile(now);
        int replicas = countReplicas();
        ShardShare s = new ShardShare(now.count(), replicas);
        share = s;
        List<Integer> holdings = holdings(now);
        int held = leading();
        int excess = s.excess(held, holdings);
        if (excess > 0) {
            List<ShardSlot> mine = new ArrayList<>();
            for (ShardSlot slot : slots.descendingMap().values()) {
                if (slot.leading()) {
                    mine.add(slot);
                }
            }
            for (ShardSlot slot : mine.subList(0, Math.min(excess, mine.size()))) {
                slot.giveUp("holds " + held + " of " + now.count() + " shards with " + replicas
                        + " live replicas (share " + s.share() + "): gives shard " + slot.shard + " up");
            }
        }
        if (s.mayTake(held)) {
            // Offered shards may be waiting: a release notification comes once.
            for (ShardSlot slot : slots.values()) {
                if (!slot.leading()) {
                    slot.leadership.attemptNow();
                }
            }
        }
        return now.draining() && finishes() && finishDrain();
    }

    /** Whether this replica puts a new count in force: a dispatcher's, while it holds shard 0. */
    private boolean finishes() {
        return spec.finishesDrains() && slots.get(0).leading();
    }

    private void reconcile(Shards.ShardMap now) {
        for (int s = 1; s < now.count(); s++) {
            if (!slots.containsKey(s) && !stopped) {
                ShardSlot slot = newSlot(s);
                slots.put(s, slot);
                if (started) {
                    slot.start();
                }
                log.info(
                        "{}: shard {} of {} (map generation {}): following its lease {}",
                        spec.service(),
                        s,
                        now.count(),
                        now.generation(),
                        slot.role);
            }
        }
        for (ShardSlot slot :
                List.copyOf(slots.tailMap(Math.max(1, now.count())).values())) {
            slots.remove(slot.shard);
            slot.stopWork();
            slot.finish(spec.config().shutdownTimeout());
            log.info(
                    "{}: shard {} is not in the map any more (generation {}, {} shards): stopped",
                    spec.service(),
                    slot.shard,
                    now.generation(),
                    now.count());
        }
    }

    /** The live replicas of the role, by their presence locks; this one's taken first if it is not held. */
    private int countReplicas() {
        try {
            if (presence == null) {
                presence = presenceSessions.open();
                presence.setAutoCommit(true);
                try (PreparedStatement ps = presence.prepareStatement("SELECT pg_try_advisory_lock(?, ?)")) {
                    ps.setInt(1, presenceKey);
                    ps.setInt(2, presenceId);
                    ps.execute();
                }
            }
            try (PreparedStatement ps = presence.prepareStatement(
                    "SELECT count(*) FROM pg_locks k WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2"
                            + " AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                            + " AND k.classid = ?::bigint::oid")) {
                ps.setLong(1, Integer.toUnsignedLong(presenceKey));
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    return Math.max(1, rs.getInt(1));
                }
            }
        } catch (SQLException e) {
            dropPresence();
            throw new IllegalStateException("presence session: " + e.getMessage(), e);
        }
    }

    private void dropPresence() {
        Connection c = presence;
        presence = null;
        if (c != null) {
            try {
                c.close();
            } catch (SQLException e) {
                log.debug("closing the presence session: {}", e.toString());
            }
        }
    }

    /** How many of the map's shards each holder of a live lease holds. */
    private List<Integer> holdings(Shards.ShardMap now) {
        List<String> roles = new ArrayList<>();
        for (int s : now.shards()) {
            roles.add(Shards.role(spec.role(), s));
        }
        return runtime.dsl()
                .fetch(
                        "SELECT count(*)::int FROM leader_lease WHERE role = ANY (?) AND expires_at > clock_timestamp() GROUP BY holder_id",
                        (Object) roles.toArray(String[]::new))
                .getValues(0, Integer.class);
    }

    /** One call of the switch; whether the map still drains (the call failed, or the relays still publish). */
    private boolean finishDrain() {
        try {
            Duration timeout = switchTimeout;
            Shards.Switch r = runtime.dsl().connectionResult(c -> Shards.trySwitch(c, timeout));
            switchFailingSince = 0;
            switchTimeout = Shards.SWITCH_TIMEOUT;
            if (r.switched()) {
                switchFailureShownAt = 0;
                log.info(
                        "{}: the shard map switched to {} shards (generation {}); {} pending jobs moved to another shard",
                        spec.service(),
                        r.count(),
                        r.generation(),
                        r.moved());
                // The next turn is a whole one: the new map's slots at once.
                wakeup.signal();
            }
            return !r.switched() && r.target() != null;
        } catch (RuntimeException e) {
            // Tried again every 50 ms. A lock it could not have (55P03: a batch past its guard, a renewal in flight, a
            // producer's long transaction) is the expected contention: shown once the switch has kept failing for 5 s.
            // Any other failure at once. Then one every 5 s (a switch that keeps failing holds every job of the map).
            long now = System.nanoTime();
            if (switchFailingSince == 0) {
                switchFailingSince = now;
            }
            String state = e instanceof DataAccessException d ? d.sqlState() : null;
            boolean lockBusy = "55P03".equals(state);
            if ("57014".equals(state)) {
                // Its pending jobs to move grow while the map drains: the same time again would not do.
                switchTimeout = Shards.longerSwitchTimeout(switchTimeout);
                log.warn(
                        "{}: shards_switch ran out of its time; the next call is given {}: {}",
                        spec.service(),
                        switchTimeout,
                        Faults.describe(e));
                return true;
            }
            boolean show = switchFailureShownAt == 0
                    ? !lockBusy || now - switchFailingSince > SWITCH_FAILURE_EVERY
                    : now - switchFailureShownAt > SWITCH_FAILURE_EVERY;
            if (show) {
                switchFailureShownAt = now;
                log.warn(
                        "{}: shards_switch failed, trying again every 50 ms (no job completes meanwhile): {}",
                        spec.service(),
                        Faults.describe(e));
            } else {
                log.debug("{}: shards_switch failed, trying again: {}", spec.service(), Faults.describe(e));
            }
            return true;
        }
    }

    private static final long SWITCH_FAILURE_EVERY = TimeUnit.SECONDS.toNanos(5);

    /** When a failed turn was last shown (System.nanoTime), 0 since the last turn that did not fail. */
    private long turnFailureShownAt;

    /** The time the next call of the switch is given: {@link Shards#SWITCH_TIMEOUT}, longer after calls that ran out of it. */
    private Duration switchTimeout = Shards.SWITCH_TIMEOUT;

    /** Since when the calls of the switch fail (System.nanoTime), 0 while they do not. */
    private long switchFailingSince;

    /** When a failed switch was last shown (System.nanoTime), 0 for never. */
    private long switchFailureShownAt;

    /** Each shard's lease as this replica sees it, with the map and the share. */
    Map<String, Object> status() {
        Map<String, Object> status = new LinkedHashMap<>();
        Shards.ShardMap m = map;
        status.put("generation", m.generation());
        status.put("count", m.count());
        if (m.draining()) {
            status.put("drainingTo", m.target());
        }
        status.put("replicas", share.replicas());
        status.put("share", share.share());
        status.put("holding", leading());
        List<Map<String, Object>> each = new ArrayList<>();
        for (ShardSlot slot : slots.values()) {
            Map<String, Object> one = new LinkedHashMap<>();
            one.put("shard", slot.shard);
            one.put("role", slot.role);
            one.putAll(slot.leaseStatus());
            each.add(one);
        }
        status.put("leases", each);
        return status;
    }

    /** Stops every worker, waits for them, releases what finished; then the presence. */
    void close(Duration timeout) {
        stopped = true;
        wakeup.signal();
        try {
            thread.join(timeout.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        List<ShardSlot> all = List.copyOf(slots.values());
        for (ShardSlot slot : all) {
            slot.stopWork();
        }
        long deadline = System.nanoTime() + timeout.toNanos();
        for (ShardSlot slot : all) {
            slot.finish(Duration.ofNanos(Math.max(0, deadline - System.nanoTime())));
        }
        dropPresence();
    }
}
