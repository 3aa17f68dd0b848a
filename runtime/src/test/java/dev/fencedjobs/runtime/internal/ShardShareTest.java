package dev.fencedjobs.runtime.internal;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The share rule (docs/shards.md): replayed turn by turn over replicas that take free shards below
 * their share and give up their excess, it settles with every shard held and no replica holding
 * two more than another, from any start.
 */
class ShardShareTest {

    @Test
    void theShareIsTheShardsOverTheReplicasRoundedUp() {
        assertThat(new ShardShare(4, 2).share()).isEqualTo(2);
        assertThat(new ShardShare(4, 3).share()).isEqualTo(2);
        assertThat(new ShardShare(1, 2).share()).isEqualTo(1);
        assertThat(new ShardShare(8, 3).share()).isEqualTo(3);
        assertThat(new ShardShare(4, 0).share()).as("at least this replica").isEqualTo(4);
    }

    @Test
    void aReplicaAboveItsShareOrTwoAboveTheFewestGivesTheExcessUp() {
        ShardShare fourOverThree = new ShardShare(4, 3);
        // 2, 2 and a newcomer with none (not among the holders yet): each of the two gives one up.
        assertThat(fourOverThree.excess(2, List.of(2, 2))).isEqualTo(1);
        // 2, 1, 1: settled.
        assertThat(fourOverThree.excess(2, List.of(2, 1, 1))).isZero();
        assertThat(fourOverThree.excess(1, List.of(2, 1, 1))).isZero();
        // One replica holding all of 8 when two more join: down to its share at once.
        assertThat(new ShardShare(8, 3).excess(8, List.of(8))).isEqualTo(5);
        // Never below the floor of the share, however few another holds.
        assertThat(new ShardShare(2, 3).excess(1, List.of(1, 1))).isZero();
    }

    @Test
    void fromAnyStartTheSharesSettleWithEveryShardHeldAndNoneTwoAboveAnother() {
        for (int shards = 1; shards <= 9; shards++) {
            for (int replicas = 1; replicas <= 5; replicas++) {
                for (int first = 0; first < replicas; first++) {
                    List<Integer> held = settle(shards, replicas, first);
                    assertThat(held.stream().mapToInt(Integer::intValue).sum())
                            .as("%d shards over %d replicas", shards, replicas)
                            .isEqualTo(shards);
                    int most = held.stream().mapToInt(Integer::intValue).max().orElseThrow();
                    int fewest = held.stream().mapToInt(Integer::intValue).min().orElseThrow();
                    assertThat(most - fewest)
                            .as("%d shards over %d replicas: %s", shards, replicas, held)
                            .isLessThanOrEqualTo(1);
                }
            }
        }
    }

    /**
     * Replica {@code first} starts holding every shard and the others join. Each turn, every replica
     * gives up its excess (and leaves those shards to the others for that turn, its cooldown); the
     * free shards are offered one at a time, round the replicas, to those below their share; one
     * that nobody may take is taken at its expiry by the replica holding fewest. Until nothing moves.
     */
    private static List<Integer> settle(int shards, int replicas, int first) {
        List<Integer> held = new ArrayList<>();
        for (int r = 0; r < replicas; r++) {
            held.add(r == first ? shards : 0);
        }
        ShardShare share = new ShardShare(shards, replicas);
        for (int turn = 0; turn < 100; turn++) {
            List<Integer> holders = held.stream().filter(n -> n > 0).toList();
            List<Integer> next = new ArrayList<>(held);
            boolean[] cooling = new boolean[replicas];
            int free = 0;
            for (int r = 0; r < replicas; r++) {
                int excess = share.excess(held.get(r), holders);
                next.set(r, held.get(r) - excess);
                cooling[r] = excess > 0;
                free += excess;
            }
            boolean taken = true;
            while (free > 0 && taken) {
                taken = false;
                for (int r = 0; r < replicas && free > 0; r++) {
                    if (!cooling[r] && share.mayTake(next.get(r))) {
                        next.set(r, next.get(r) + 1);
                        free--;
                        taken = true;
                    }
                }
            }
            while (free > 0) {
                int fewest = next.indexOf(next.stream().min(Integer::compare).orElseThrow());
                next.set(fewest, next.get(fewest) + 1);
                free--;
            }
            if (next.equals(held)) {
                return held;
            }
            held = next;
        }
        throw new AssertionError("no settling after 100 turns: " + held);
    }
}
