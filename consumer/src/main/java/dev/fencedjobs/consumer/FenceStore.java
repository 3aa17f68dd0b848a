package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_RESOURCE_FENCE;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;
import static org.jooq.impl.DSL.val;

import dev.fencedjobs.consumer.FenceDecisions.Fence;
import dev.fencedjobs.consumer.FenceDecisions.Tenure;
import dev.fencedjobs.lease.FencingToken;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;
import org.jooq.DSLContext;
import org.jooq.Field;
import org.jooq.impl.DSL;

/**
 * The resource fences in {@code consumer_resource_fence}: locked for a batch in resource order (so
 * that two consumer instances never deadlock on them), read as {@link Fence}s, and written back
 * once where the batch moved them. A fence row locked before any record of its resource was
 * applied holds {@code highest_token} 0, read as no token.
 */
final class FenceStore {

    /** Locks (creating where new) one resource's fence row, as a batch of that resource would. */
    static void lockFence(DSLContext tx, String resource) {
        lock(tx, new TreeSet<>(Set.of(resource)));
    }

    /** Locks (creating where new) the fence rows of these resources and returns them as they are. */
    static Map<String, Fence> lock(DSLContext tx, SortedSet<String> resources) {
        // In sorted order, so that two consumers lock shared resources in the same order; one array bound.
        Field<String> resource = DSL.field(DSL.name("u", "resource"), String.class);
        var values = tx.insertInto(
                        CONSUMER_RESOURCE_FENCE,
                        CONSUMER_RESOURCE_FENCE.RESOURCE,
                        CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN,
                        CONSUMER_RESOURCE_FENCE.UPDATED_AT)
                .select(DSL.select(resource, val(0L), CLOCK_TIMESTAMP)
                        .from(DSL.table(
                                "unnest({0}::varchar[]) WITH ORDINALITY AS u (resource, n)",
                                DSL.val(resources.toArray(String[]::new))))
                        .orderBy(DSL.field(DSL.name("u", "n"))));
        // DO UPDATE rather than DO NOTHING: it locks an existing row, in the statement's sorted order
        // like the rows it inserts. WHERE false: without writing a new version of it (DO UPDATE SET
        // highest_token = highest_token wrote one for every resource of every batch, before the
        // update of the fences that moved wrote another).
        values.onConflict(CONSUMER_RESOURCE_FENCE.RESOURCE)
                .doUpdate()
                .set(CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN)
                .where(DSL.falseCondition())
                .execute();
        // Then read them: this transaction holds their locks, so they are as the next statements find them.
        Map<String, Fence> locked = new HashMap<>();
        for (var r : tx.select(
                        CONSUMER_RESOURCE_FENCE.RESOURCE,
                        CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN,
                        CONSUMER_RESOURCE_FENCE.TOKEN_FIRST_OUTBOX_ID,
                        CONSUMER_RESOURCE_FENCE.HIGHEST_OUTBOX_ID,
                        CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN_HOLDER,
                        CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN_ACQUIRED_AT)
                .from(CONSUMER_RESOURCE_FENCE)
                .where(CONSUMER_RESOURCE_FENCE.RESOURCE.eq(DSL.any(DSL.val(resources.toArray(String[]::new)))))
                .fetch()) {
            locked.put(
                    r.value1(),
                    new Fence(token(r.value2()), r.value3(), r.value4(), new Tenure(r.value5(), r.value6())));
        }
        if (locked.size() != resources.size()) {
            // Locked (or inserted) by this transaction a statement ago: a fence row cannot have gone.
            throw new IllegalStateException("locked " + locked.size() + " of " + resources.size() + " resource fences");
        }
        return locked;
    }

    /** A stored highest token; none below 1 (a row locked before anything was applied, or an operator's reset to 0). */
    private static FencingToken token(long stored) {
        return stored < 1 ? null : FencingToken.of(stored);
    }

    /**
     * Writes the fences that applied records moved, in one statement from one array per column (one
     * UPDATE per resource was 2.75 million statements in a 6-minute soak, a round trip each); the
     * rows are locked since {@link #lock}. A moved fence always has a highest token.
     */
    static void write(DSLContext tx, Map<String, Fence> fences, Map<String, Fence> locked) {
        List<Map.Entry<String, Fence>> moved = fences.entrySet().stream()
                .filter(e -> !e.getValue().equals(locked.get(e.getKey())))
                .toList();
        if (moved.isEmpty()) {
            return;
        }
        int n = moved.size();
        String[] resources = new String[n];
        Long[] highest = new Long[n];
        Long[] firstOutboxIds = new Long[n];
        Long[] highestOutboxIds = new Long[n];
        String[] holders = new String[n];
        String[] acquiredAt = new String[n];
        for (int i = 0; i < n; i++) {
            Fence f = moved.get(i).getValue();
            resources[i] = moved.get(i).getKey();
            highest[i] = f.highestToken().value();
            firstOutboxIds[i] = f.tokenFirstOutboxId();
            highestOutboxIds[i] = f.highestOutboxId();
            holders[i] = f.tenure().holder();
            acquiredAt[i] = f.tenure().acquiredAt() == null
                    ? null
                    : f.tenure().acquiredAt().toInstant().toString();
        }
        int updated = tx.execute(
                "UPDATE consumer_resource_fence f SET highest_token = v.highest_token, token_first_outbox_id = v.first_outbox_id,"
                        + " highest_outbox_id = v.highest_outbox_id, highest_token_holder = v.holder, highest_token_acquired_at = v.acquired_at,"
                        + " updated_at = clock_timestamp()"
                        + " FROM unnest({0}::varchar[], {1}::bigint[], {2}::bigint[], {3}::bigint[], {4}::varchar[], {5}::timestamptz[])"
                        + " AS v (resource, highest_token, first_outbox_id, highest_outbox_id, holder, acquired_at)"
                        + " WHERE f.resource = v.resource",
                DSL.val(resources),
                DSL.val(highest),
                DSL.val(firstOutboxIds),
                DSL.val(highestOutboxIds),
                DSL.val(holders),
                DSL.val(acquiredAt));
        if (updated != n) {
            // Locked by this transaction since lock(): a fence row cannot have gone.
            throw new IllegalStateException("wrote " + updated + " of " + n + " resource fences");
        }
    }

    private FenceStore() {}
}
