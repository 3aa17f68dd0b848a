package dev.fencedjobs.db.internal;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
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
}
