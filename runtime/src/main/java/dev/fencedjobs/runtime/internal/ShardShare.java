package dev.fencedjobs.runtime.internal;

import java.util.Collection;

/**
 * How many of a role's shards one replica should hold (docs/shards.md, "Who holds which shard"):
 * the live replicas share them without an operator, and none idles while another holds two more.
 *
 * <ul>
 *   <li>A replica takes a free or offered shard only while it holds fewer than its share,
 *       {@code ceil(shards / live replicas)}; a shard whose holder died, or whose lease ran out a
 *       renewal interval ago, it takes whatever its share ({@code Leadership#gate}), so that no
 *       shard stays without a holder;
 *   <li>a replica that holds more than its share, or two more than the replica holding fewest
 *       (counting live replicas holding none as zero), gives the excess up gracefully: a conditional
 *       release, whose notification lets a replica below its share take it at once.
 * </ul>
 *
 * @param shards the shard count in force
 * @param replicas the live replicas of the role, this one included (at least 1)
 */
record ShardShare(int shards, int replicas) {

    ShardShare {
        replicas = Math.max(1, replicas);
    }

    /** The most shards one replica holds once the shares settle. */
    int share() {
        return (shards + replicas - 1) / replicas;
    }

    /** Whether a replica that holds {@code held} shards may take one more that is free or offered. */
    boolean mayTake(int held) {
        return held < share();
    }

    /**
     * How many shards a replica holding {@code held} gives up now, given what each holder of the
     * role's live leases holds ({@code holdings}, this replica included).
     */
    int excess(int held, Collection<Integer> holdings) {
        int overShare = held - share();
        int fewest = holdings.size() < replicas
                ? 0
                : holdings.stream().mapToInt(Integer::intValue).min().orElse(0);
        // Above the one who holds fewest by two or more: give up until one above it, but stay at or
        // above the share's floor.
        int overFewest = held - (fewest + 1);
        int floor = shards / replicas;
        int byFewest = held - fewest >= 2 ? Math.min(overFewest, held - floor) : 0;
        // Above the share, down to it (the fewest moves); else what the fewest rule asks.
        return overShare > 0 ? overShare : Math.max(0, byFewest);
    }
}
