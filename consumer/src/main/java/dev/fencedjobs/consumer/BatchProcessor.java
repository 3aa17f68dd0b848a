package dev.fencedjobs.consumer;

import dev.fencedjobs.consumer.Decision.Candidate;
import dev.fencedjobs.consumer.Decision.Outcome;
import dev.fencedjobs.consumer.FenceDecisions.Fence;
import dev.fencedjobs.runtime.internal.RecordVerifier;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jooq.DSLContext;

/**
 * Handles one polled batch in one transaction of the consumer's database, records in partition
 * order, each through three steps:
 *
 * <ol>
 *   <li><b>dedup</b>: a job id already processed (in an earlier batch, earlier in this one, or by
 *       another consumer instance right now) is skipped;
 *   <li><b>fence</b>: a token below the highest accepted for the resource is recorded as rejected
 *       and not applied, unless the record is only late (below); an equal token is the same leader
 *       and is applied;
 *   <li><b>effect</b>: applied, and the resource's highest token and highest outbox id raised.
 * </ol>
 *
 * <p>The parts: {@link FenceDecisions} decides (pure functions), {@link FenceStore} locks and
 * writes the resource fences, {@link ClaimStore} claims job ids, {@link Reports} records what is
 * rejected, late or reused, {@link StoredRecords} keeps waiting records and dead letters. This
 * class runs them in order ({@link #process}).
 *
 * <p><b>Late records.</b> Outbox ids are commit order, and a row committed later never carries a
 * lower token. A record whose outbox id is below the highest applied for its resource arrived out
 * of commit order: it is <i>late</i>, counted, logged and recorded in {@code consumer_late}, and
 * applied. If it also carries a token below the highest, it is still a genuine row of an earlier
 * tenure when its outbox id is below the first one applied with the highest token, and it is
 * applied; a lower token above that point contradicts commit order and is stale, as is a lower
 * token for a resource whose first highest-token outbox id is not known (0).
 *
 * <p><b>Reuse after a rollback.</b> A database promoted after it missed some commits can hand out
 * again the job ids and the tokens those commits used. A job is its id and its creation time, so a
 * record whose id was processed with another creation time is a new job: it is <i>reused</i>,
 * logged at ERROR, recorded in {@code consumer_reused}, claimed in {@code
 * consumer_processed_reissued} and applied once. A tenure is its token, holder and acquisition
 * time, so a record with the resource's highest token from another tenure is a token reused: also
 * reported (the fence then keeps the newer tenure), and the record is applied. Either identity may
 * be unknown (older records); then the id or the token alone decides, as before.
 *
 * <p>A record that cannot be read is dead-lettered with the reason and its raw bytes.
 */
final class BatchProcessor {

    /** What became of a record, as its span says (docs/tracing.md). */
    static final String APPLIED = "applied";

    static final String LATE = "late";
    static final String DUPLICATE = "duplicate";
    static final String STALE = "stale";
    static final String WAITING = "waiting";
    static final String DEAD_LETTER = "dead_letter";

    /**
     * Whether a record may be trusted: empty when it may, else why not. A fresh record is checked
     * against the trusted keys ({@link RecordVerifier}); a record the consumer stored
     * itself after checking it (a patient retry) is not checked again.
     */
    @FunctionalInterface
    interface Authenticity {
        Optional<String> problem(ConsumerRecord<String, byte[]> record);

        Authenticity CHECKED_ON_ARRIVAL = record -> Optional.empty();
    }

    /** The reason of an unauthenticated record's dead letter starts with this. */
    static final String UNAUTHENTICATED = "unauthenticated";

    /** The effect threw: the caller retries the records one at a time. */
    static final class EffectFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        EffectFailure(Throwable cause) {
            super("effect failed: " + cause, cause);
        }
    }

    /**
     * What the caller does around each job's effect: the consumer's span for the job, made current,
     * and the logging context ({@link ProcessSpans}). Used by one thread at a time.
     */
    interface Handling {
        /** A job's effect is about to run; what enter begins is current while open when {@code current}. */
        Handled enter(ConsumerRecord<String, byte[]> record, Job job, boolean current);

        /**
         * {@code record} is stored by this batch, to wait behind an earlier record of its resource or
         * as a dead letter it could not read: the traceparent of this attempt's span (begun now when
         * not yet), kept with the stored record for the later retry's or replay's link; null for none.
         */
        default String storing(ConsumerRecord<String, byte[]> record) {
            return null;
        }
    }

    /** A job's effect running; closed once it returned or threw. */
    interface Handled extends AutoCloseable {
        /** The effect threw {@code e}: its batch rolls back. */
        void failed(RuntimeException e);

        @Override
        void close();
    }

    private final Effect effect;
    private final RecordVerifier verifier;
    /** Whether the effect writes a batch at once ({@link Effect#applyAll} overridden): there is no one job being handled then. */
    private final boolean batchEffect;

    BatchProcessor(Effect effect, RecordVerifier verifier) {
        this.effect = effect;
        this.verifier = verifier;
        this.batchEffect = overridesApplyAll(effect);
    }

    private static boolean overridesApplyAll(Effect effect) {
        try {
            return effect.getClass()
                            .getMethod("applyAll", DSLContext.class, List.class)
                            .getDeclaringClass()
                    != Effect.class;
        } catch (NoSuchMethodException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Checks a record that has just arrived. */
    Authenticity onArrival() {
        return record -> verifier.check(record, System.currentTimeMillis());
    }

    /** Checks a record as it was when it arrived at {@code arrivedAt} (a dead letter's replay). */
    Authenticity arrivedAt(OffsetDateTime arrivedAt) {
        return record -> verifier.check(record, arrivedAt.toInstant().toEpochMilli());
    }

    /** Processes the batch, just polled, in the caller's transaction. */
    Counts process(DSLContext tx, List<ConsumerRecord<String, byte[]>> records) {
        return process(tx, records, null, onArrival(), null, null);
    }

    /** As {@link #process(DSLContext, List)}, noting what became of each record in {@code outcomes}. */
    Counts process(
            DSLContext tx,
            List<ConsumerRecord<String, byte[]>> records,
            Map<ConsumerRecord<String, byte[]>, String> outcomes) {
        return process(tx, records, null, onArrival(), outcomes, null);
    }

    /** As {@link #process(DSLContext, List, Map)}, with {@code handling} around each job's effect. */
    Counts process(
            DSLContext tx,
            List<ConsumerRecord<String, byte[]>> records,
            Map<ConsumerRecord<String, byte[]>, String> outcomes,
            Handling handling) {
        return process(tx, records, null, onArrival(), outcomes, handling);
    }

    Counts process(
            DSLContext tx, List<ConsumerRecord<String, byte[]>> records, String retrying, Authenticity authenticity) {
        return process(tx, records, retrying, authenticity, null, null);
    }

    /**
     * Processes the batch in the caller's transaction. A record of a resource that has records
     * waiting for a patient retry ({@code consumer_waiting}) waits behind them instead, undecided,
     * so that the resource's effects stay in order; except for {@code retrying}, the resource whose
     * first waiting record the caller is trying again. With {@code outcomes}, notes what became of
     * each record there (an identity map: records are told apart by instance). With {@code
     * handling}, each job's effect runs inside it.
     */
    Counts process(
            DSLContext tx,
            List<ConsumerRecord<String, byte[]>> records,
            String retrying,
            Authenticity authenticity,
            Map<ConsumerRecord<String, byte[]>, String> outcomes,
            Handling handling) {
        Batch batch = new Batch(tx, outcomes != null ? outcomes : new IdentityHashMap<>(), handling);
        List<Candidate> distinct = batch.screen(records, authenticity);
        Decisions decided = decide(tx, distinct);
        // After decide(): the fence rows are locked, and a retry that empties a resource's queue holds that lock too.
        List<Decision> deciding = batch.parkWaiting(
                decided.list(), StoredRecords.waiting(tx, decided.locked().keySet(), retrying));
        batch.judge(deciding, ClaimStore.claim(tx, deciding), decided.locked());
        try {
            apply(tx, batch.toApply, batch.applying, handling);
        } catch (RuntimeException e) {
            throw new EffectFailure(e);
        }
        return batch.finish(decided.locked());
    }

    /**
     * Runs the effect on {@code jobs} (read from {@code records}, in the same order). With {@code
     * handling}, each job's effect runs inside its handling, current; an effect that writes the
     * batch at once gets every job's handling begun, none current.
     */
    private void apply(DSLContext tx, List<Job> jobs, List<ConsumerRecord<String, byte[]>> records, Handling handling) {
        if (handling == null) {
            effect.applyAll(tx, jobs);
        } else if (batchEffect) {
            List<Handled> handled = new ArrayList<>(jobs.size());
            for (int i = 0; i < jobs.size(); i++) {
                handled.add(handling.enter(records.get(i), jobs.get(i), false));
            }
            try {
                effect.applyAll(tx, jobs);
            } catch (RuntimeException e) {
                handled.forEach(h -> h.failed(e));
                throw e;
            } finally {
                handled.forEach(Handled::close);
            }
        } else {
            for (int i = 0; i < jobs.size(); i++) {
                try (Handled h = handling.enter(records.get(i), jobs.get(i), true)) {
                    try {
                        effect.apply(tx, jobs.get(i));
                    } catch (RuntimeException e) {
                        h.failed(e);
                        throw e;
                    }
                }
            }
        }
    }

    /** The decisions in record order, and each resource's fence as locked at the start. */
    private record Decisions(List<Decision> list, Map<String, Fence> locked) {}

    /** Locks (creating where new) the fence rows of the batch's resources and decides each record in order. */
    private static Decisions decide(DSLContext tx, Collection<Candidate> candidates) {
        if (candidates.isEmpty()) {
            return new Decisions(List.of(), Map.of());
        }
        TreeSet<String> resources = new TreeSet<>();
        candidates.forEach(c -> resources.add(c.job().resource()));
        Map<String, Fence> locked = FenceStore.lock(tx, resources);
        Map<String, Fence> fence = new HashMap<>(locked);
        List<Decision> decisions = new ArrayList<>(candidates.size());
        for (Candidate c : candidates) {
            Job job = c.job();
            Fence before = fence.get(job.resource());
            if (before.admits(job.outboxId(), job.fencingToken())) {
                decisions.add(new Decision(c, Outcome.APPLIED, before));
                fence.put(job.resource(), before.after(job.outboxId(), job.fencingToken(), c.tenure()));
            } else {
                decisions.add(new Decision(c, Outcome.REJECTED, before));
            }
        }
        return new Decisions(decisions, locked);
    }
}
