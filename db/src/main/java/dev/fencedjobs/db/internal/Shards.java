package dev.fencedjobs.db.internal;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The shard map (V13, R__shards.sql, docs/shards.md) as the services and tools read it, and the
 * names of a shard's lease roles and relay position.
 */
public final class Shards {

    /** The channel on which a change of the map (a count asked for, a switch) is announced; the payload is the generation. */
    public static final String CHANGED = "shard_map";

    /**
     * The shards a new database starts with when the services or {@code fenced-jobs migrate} make
     * it (docs/shards.md, "The default count"); a database that has held jobs or leases keeps one
     * shard until an operator changes it.
     */
    public static final int DEFAULT_COUNT = 2;

    private Shards() {}

    /**
     * The lease role of a shard: shard 0 keeps the role's name as it was before shards ({@code
     * scheduler}, {@code relay}), so that a database of then upgrades with its leases and tokens;
     * shard n is {@code scheduler/n}. The same as {@code shard_role} in R__shards.sql.
     */
    public static String role(String base, int shard) {
        if (shard < 0) {
            throw new IllegalArgumentException("a shard is 0 or more, not " + shard);
        }
        return shard == 0 ? base : base + "/" + shard;
    }

    /** The shard of a lease role ({@link #role}'s inverse); empty for a role of another family. */
    public static Optional<Integer> shardOf(String base, String role) {
        if (role.equals(base)) {
            return Optional.of(0);
        }
        if (role.startsWith(base + "/")) {
            try {
                return Optional.of(Integer.parseInt(role.substring(base.length() + 1)));
            } catch (NumberFormatException e) {
                return Optional.empty();
            }
        }
        return Optional.empty();
    }

    /**
     * The map: its generation, the count in force, and a count asked for and not yet in force
     * (null unless the map drains).
     */
    public record ShardMap(int generation, int count, Integer target) {

        /** While the map drains, no job completes; {@code shards_switch} ends it. */
        public boolean draining() {
            return target != null;
        }

        /** The shards in force, 0 to count - 1. */
        public List<Integer> shards() {
            List<Integer> all = new ArrayList<>(count);
            for (int s = 0; s < count; s++) {
                all.add(s);
            }
            return all;
        }
    }

    /** The map in force; one shard (generation 0) on a database before V13. */
    public static ShardMap read(Connection c) throws SQLException {
        try (PreparedStatement ps =
                        c.prepareStatement("SELECT generation, shard_count, target_count FROM shard_map WHERE id = 1");
                ResultSet rs = ps.executeQuery()) {
            if (!rs.next()) {
                return new ShardMap(0, 1, null);
            }
            int target = rs.getInt(3);
            Integer asked = rs.wasNull() ? null : target;
            return new ShardMap(rs.getInt(1), rs.getInt(2), asked);
        }
    }

    /**
     * The time a call of {@code shards_switch} is given: it waits up to 2 s for each of its locks
     * (R__shards.sql), where the services' statements get 2 s in all by default.
     */
    public static final Duration SWITCH_TIMEOUT = Duration.ofSeconds(10);

    /**
     * The most a call is given after calls that ran out of time, each given twice the last ({@link
     * #longerSwitchTimeout}). The switch moves every pending job whose shard changes while producers
     * wait, and those jobs grow while the map drains: a call given the same time again would fail
     * again, with more to move, for ever.
     */
    public static final Duration MAX_SWITCH_TIMEOUT = Duration.ofSeconds(60);

    /** The time for the next call after one that ran out of {@code last}: twice it, at most {@link #MAX_SWITCH_TIMEOUT}. */
    public static Duration longerSwitchTimeout(Duration last) {
        Duration twice = last.multipliedBy(2);
        return twice.compareTo(MAX_SWITCH_TIMEOUT) > 0 ? MAX_SWITCH_TIMEOUT : twice;
    }

    /** What one call of {@code shards_switch} did; {@code target} is null once no drain is left. */
    public record Switch(boolean switched, int generation, int count, Integer target, int waiting, long moved) {}

    /**
     * One call of {@code shards_switch}, in a transaction of its own on {@code c} (which must be in
     * autocommit mode), with {@link #SWITCH_TIMEOUT} as its statement timeout and the connection's
     * network timeout from it for the call (Database.networkTimeout). The network timeout matters: a
     * pool's connection has its statement timeout plus 5 s as its socket timeout, and a switch that
     * waited for its locks longer than that lost its connection to a read timeout while the server
     * was still in time; on a loaded machine every call did, and the drain never ended.
     */
    public static Switch trySwitch(Connection c) throws SQLException {
        return trySwitch(c, SWITCH_TIMEOUT);
    }

    /** {@link #trySwitch(Connection)} with {@code timeout} as the call's statement timeout. */
    public static Switch trySwitch(Connection c, Duration timeout) throws SQLException {
        int network = c.getNetworkTimeout();
        c.setNetworkTimeout(
                Runnable::run, (int) Database.networkTimeout(timeout).toMillis());
        c.setAutoCommit(false);
        boolean done = false;
        try {
            try (Statement st = c.createStatement()) {
                st.execute("SET LOCAL statement_timeout = '" + timeout.toMillis() + "ms'");
            }
            Switch result;
            try (PreparedStatement ps = c.prepareStatement(
                            "SELECT switched, generation, shard_count, target_count, waiting, moved FROM shards_switch()");
                    ResultSet rs = ps.executeQuery()) {
                rs.next();
                int target = rs.getInt(4);
                Integer asked = rs.wasNull() ? null : target;
                result = new Switch(rs.getBoolean(1), rs.getInt(2), rs.getInt(3), asked, rs.getInt(5), rs.getLong(6));
            }
            c.commit();
            done = true;
            return result;
        } finally {
            if (!done) {
                try {
                    c.rollback();
                } catch (SQLException e) {
                    // The connection is gone; the caller's exception says why.
                }
            }
            try {
                c.setAutoCommit(true);
                c.setNetworkTimeout(Runnable::run, network);
            } catch (SQLException e) {
                // As above.
            }
        }
    }
}
