package dev.fencedjobs.consumer;

import java.util.List;
import org.jooq.DSLContext;

/**
 * What the consumer does with each job, once.
 *
 * <p>It runs inside the consumer's database transaction, after the deduplication and the fence
 * and before the commit. An effect that writes to the consumer's database through {@code tx}
 * is therefore exactly once: it commits together with the record of the job id, or not at all.
 *
 * <p>An effect outside that database (an HTTP call, an email) cannot join the transaction. It
 * may run more than once: if it succeeds and the transaction then fails, the record is
 * processed again. Send {@link Job#idempotencyKey()} and have the receiver drop repeats.
 *
 * <p>Throwing rolls the batch back; the record is then retried alone up to
 * {@code EFFECT_MAX_ATTEMPTS} times and dead-lettered after that.
 */
public interface Effect {

    void apply(DSLContext tx, Job job);

    /** Applies a batch; override to write it in one statement. Jobs come in partition order. */
    default void applyAll(DSLContext tx, List<Job> jobs) {
        for (Job job : jobs) {
            apply(tx, job);
        }
    }
}
