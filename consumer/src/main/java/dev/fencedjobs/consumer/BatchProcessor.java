package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_COUNTERS;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_LATE;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED_REISSUED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_RESOURCE_FENCE;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REUSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_WAITING;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;
import static org.jooq.impl.DSL.val;

import dev.fencedjobs.consumer.FenceDecisions.Fence;
import dev.fencedjobs.consumer.FenceDecisions.Tenure;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.runtime.internal.TraceContext;
import dev.fencedjobs.runtime.internal.Tracing;
import io.opentelemetry.api.trace.SpanContext;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.SortedSet;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.jooq.DSLContext;
import org.jooq.Field;
import org.jooq.InsertValuesStep6;
import org.jooq.Record;
import org.jooq.Table;
import org.jooq.impl.DSL;
import org.jooq.types.DayToSecond;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

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
 * <p>A record that cannot be read is dead-lettered with the reason and its raw bytes. The claim on
 * a job id is an {@code INSERT … ON CONFLICT} on its primary key, so two instances that see the
 * same record (during a rebalance) cannot both apply it: the second waits for the first to commit
 * and then finds the id taken. The fence rows are locked in resource order, so two instances never
 * deadlock on them.
 */
final class BatchProcessor {

    enum Outcome { APPLIED, REJECTED, DEAD_LETTER }

    /** What became of a record, as its span says (docs/tracing.md). */
    static final String APPLIED = "applied";
    static final String LATE = "late";
    static final String DUPLICATE = "duplicate";
    static final String STALE = "stale";
    static final String WAITING = "waiting";
    static final String DEAD_LETTER = "dead_letter";

    /** What one batch did; {@code unauthenticated} records are among the {@code deadLettered}. */
    record Counts(int applied, int duplicates, int rejected, int deadLettered, int late, int reused, int waiting, int unauthenticated) {
        static final Counts NONE = new Counts(0, 0, 0, 0, 0, 0, 0, 0);

        Counts(int applied, int duplicates, int rejected, int deadLettered, int late, int reused, int waiting) {
            this(applied, duplicates, rejected, deadLettered, late, reused, waiting, 0);
        }

        Counts(int applied, int duplicates, int rejected, int deadLettered, int late, int reused) {
            this(applied, duplicates, rejected, deadLettered, late, reused, 0);
        }

        Counts plus(Counts o) {
            return new Counts(applied + o.applied, duplicates + o.duplicates, rejected + o.rejected, deadLettered + o.deadLettered,
                    late + o.late, reused + o.reused, waiting + o.waiting, unauthenticated + o.unauthenticated);
        }
    }

    /**
     * Whether a record may be trusted: empty when it may, else why not. A fresh record is checked
     * against the trusted keys ({@link RecordSignatures.Verifier}); a record the consumer stored
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

    /** A parsed record, with the tenure of its token (either part null when not known). */
    private record Candidate(ConsumerRecord<String, byte[]> record, Job job, Tenure tenure) {

        static Candidate of(ConsumerRecord<String, byte[]> record, Envelope e) {
            return new Candidate(record, jobOf(e), new Tenure(e.tokenHolder(), asStored(e.tokenAcquiredAt())));
        }
    }

    private record Decision(Candidate candidate, Outcome outcome, Fence before) {}

    /** A reuse to report: of a job id (with what was processed under it) or of a token. */
    private record Reuse(Decision decision, String kind, String previous) {}

    /** The claims of one batch: the decisions whose job this transaction claimed, and the reuses found. */
    private record Claims(Set<Decision> claimed, List<Reuse> reused) {

        /** What claiming the decision's job id found; a reuse is claimed only where its job was not processed under that id yet. */
        FenceDecisions.Claim of(Decision d) {
            if (!claimed.contains(d)) {
                return FenceDecisions.Claim.SAME_JOB;
            }
            return reused.stream().anyMatch(r -> r.decision() == d) ? FenceDecisions.Claim.OTHER_JOB : FenceDecisions.Claim.NEW;
        }
    }

    private static final Logger log = LoggerFactory.getLogger(BatchProcessor.class);

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
    private final RecordSignatures.Verifier verifier;
    /** Whether the effect writes a batch at once ({@link Effect#applyAll} overridden): there is no one job being handled then. */
    private final boolean batchEffect;

    BatchProcessor(Effect effect, RecordSignatures.Verifier verifier) {
        this.effect = effect;
        this.verifier = verifier;
        this.batchEffect = overridesApplyAll(effect);
    }

    private static boolean overridesApplyAll(Effect effect) {
        try {
            return effect.getClass().getMethod("applyAll", DSLContext.class, List.class).getDeclaringClass() != Effect.class;
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
    Counts process(DSLContext tx, List<ConsumerRecord<String, byte[]>> records, Map<ConsumerRecord<String, byte[]>, String> outcomes) {
        return process(tx, records, null, onArrival(), outcomes, null);
    }

    /** As {@link #process(DSLContext, List, Map)}, with {@code handling} around each job's effect. */
    Counts process(DSLContext tx, List<ConsumerRecord<String, byte[]>> records, Map<ConsumerRecord<String, byte[]>, String> outcomes,
            Handling handling) {
        return process(tx, records, null, onArrival(), outcomes, handling);
    }

    Counts process(DSLContext tx, List<ConsumerRecord<String, byte[]>> records, String retrying, Authenticity authenticity) {
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
    Counts process(DSLContext tx, List<ConsumerRecord<String, byte[]>> records, String retrying, Authenticity authenticity,
            Map<ConsumerRecord<String, byte[]>, String> outcomes, Handling handling) {
        Map<ConsumerRecord<String, byte[]>, String> noted = outcomes != null ? outcomes : new IdentityHashMap<>();
        Map<ConsumerRecord<String, byte[]>, String> unreadable = new LinkedHashMap<>();
        List<Candidate> distinct = new ArrayList<>();
        Map<Long, List<Job>> seen = new HashMap<>();
        int duplicates = 0;
        int unauthenticated = 0;
        for (ConsumerRecord<String, byte[]> record : records) {
            // Before dedup and before the fence: an unauthenticated record claims no job id and moves no fence.
            Optional<String> problem = authenticity.problem(record);
            if (problem.isPresent()) {
                log.error("Unauthenticated record {}-{}@{} dead-lettered, not applied: {}", record.topic(), record.partition(), record.offset(),
                        problem.get());
                unreadable.put(record, UNAUTHENTICATED + ": " + problem.get());
                noted.put(record, DEAD_LETTER);
                unauthenticated++;
                continue;
            }
            try {
                Candidate c = Candidate.of(record, Envelope.parse(record.value()));
                Job job = c.job();
                List<Job> sameId = seen.computeIfAbsent(job.jobId(), id -> new ArrayList<>(1));
                if (sameId.stream().anyMatch(j -> j.sameJobAs(job.jobId(), job.createdAt()))) {
                    noted.put(record, DUPLICATE);
                    duplicates++;
                } else {
                    sameId.add(job);
                    distinct.add(c);
                }
            } catch (Envelope.InvalidEnvelope e) {
                unreadable.put(record, e.getMessage());
                noted.put(record, DEAD_LETTER);
            }
        }

        Decisions decided = decide(tx, distinct);
        // After decide(): the fence rows are locked, and a retry that empties a resource's queue holds that lock too.
        Set<String> waitingResources = waiting(tx, decided.locked().keySet(), retrying);
        List<Decision> deciding = decided.list();
        int parked = 0;
        if (!waitingResources.isEmpty()) {
            deciding = new ArrayList<>();
            for (Decision d : decided.list()) {
                if (!waitingResources.contains(d.candidate().job().resource())) {
                    deciding.add(d);
                } else if (park(tx, d.candidate().record(), d.candidate().job(), 0, "waiting behind an earlier record of its resource", null,
                        handling == null ? null : handling.storing(d.candidate().record()))) {
                    noted.put(d.candidate().record(), WAITING);
                    parked++;
                } else {
                    noted.put(d.candidate().record(), DUPLICATE);
                    duplicates++; // already waiting
                }
            }
        }
        Claims claims = claim(tx, deciding);
        List<Job> toApply = new ArrayList<>();
        List<ConsumerRecord<String, byte[]>> applying = new ArrayList<>();
        List<Decision> rejected = new ArrayList<>();
        List<Decision> late = new ArrayList<>();
        List<Reuse> reused = new ArrayList<>(claims.reused());
        Map<String, Fence> fences = new HashMap<>();
        for (Decision d : deciding) {
            Job job = d.candidate().job();
            switch (FenceDecisions.verdict(false, claims.of(d), d.before(), job.outboxId(), job.fencingToken())) {
                case DUPLICATE -> {
                    noted.put(d.candidate().record(), DUPLICATE);
                    duplicates++;
                }
                case STALE -> {
                    noted.put(d.candidate().record(), STALE);
                    rejected.add(d);
                }
                case APPLIED, LATE, REUSED -> {
                    toApply.add(job);
                    applying.add(d.candidate().record());
                    Fence before = fences.getOrDefault(job.resource(), decided.locked().get(job.resource()));
                    if (before.tokenReusedBy(job.fencingToken(), d.candidate().tenure())) {
                        reused.add(new Reuse(d, "token", before.tenure().toString()));
                    }
                    fences.put(job.resource(), before.after(job.outboxId(), job.fencingToken(), d.candidate().tenure()));
                    // A reused id can be late too.
                    if (d.before().late(job.outboxId(), job.fencingToken())) {
                        late.add(d);
                        noted.put(d.candidate().record(), LATE);
                    } else {
                        noted.put(d.candidate().record(), APPLIED);
                    }
                }
                case WAITING -> throw new IllegalStateException("parked before the claims");
            }
        }
        try {
            apply(tx, toApply, applying, handling);
        } catch (RuntimeException e) {
            throw new EffectFailure(e);
        }
        recordRejected(tx, rejected);
        recordLate(tx, late);
        recordReused(tx, reused);
        for (Map.Entry<ConsumerRecord<String, byte[]>, String> u : unreadable.entrySet()) {
            deadLetter(tx, u.getKey(), null, u.getValue(), handling == null ? null : handling.storing(u.getKey()));
        }
        writeFences(tx, fences, decided.locked());
        if (duplicates > 0) {
            // With the batch, so `fenced-jobs status` counts exactly the duplicates that committed.
            tx.update(CONSUMER_COUNTERS).set(CONSUMER_COUNTERS.VALUE, CONSUMER_COUNTERS.VALUE.plus(duplicates))
                    .where(CONSUMER_COUNTERS.NAME.eq("duplicates")).execute();
        }
        return new Counts(toApply.size(), duplicates, rejected.size(), unreadable.size(), late.size(), reused.size(), parked, unauthenticated);
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

    /** Which of these resources have records waiting, {@code retrying} left out. */
    private static Set<String> waiting(DSLContext tx, Collection<String> resources, String retrying) {
        if (resources.isEmpty()) {
            return Set.of();
        }
        Set<String> found = new HashSet<>(tx.selectDistinct(CONSUMER_WAITING.RESOURCE).from(CONSUMER_WAITING)
                .where(CONSUMER_WAITING.RESOURCE.eq(DSL.any(DSL.val(resources.toArray(String[]::new)))))
                .fetch(CONSUMER_WAITING.RESOURCE));
        if (retrying != null) {
            found.remove(retrying);
        }
        return found;
    }

    /**
     * Puts a record at the end of its resource's queue of records waiting for a patient retry.
     * {@code wait} null: tried at once when it is first in the queue. False when its job is
     * already waiting (a redelivery). {@code firstAttempt}: the traceparent of the span of the
     * attempt that failed, which the retry's span links to; null for none.
     */
    static boolean park(DSLContext tx, ConsumerRecord<String, byte[]> record, Job job, int attempts, String error, Duration wait,
            String firstAttempt) {
        StoredTrace trace = StoredTrace.of(record);
        var nextAttempt = wait == null ? CLOCK_TIMESTAMP : CLOCK_TIMESTAMP.plus(val(DayToSecond.valueOf(wait)));
        return tx.insertInto(CONSUMER_WAITING)
                .set(CONSUMER_WAITING.JOB_ID, job.jobId())
                .set(CONSUMER_WAITING.JOB_CREATED_AT, job.createdAt())
                .set(CONSUMER_WAITING.RESOURCE, job.resource())
                .set(CONSUMER_WAITING.TOPIC, record.topic())
                .set(CONSUMER_WAITING.KAFKA_PARTITION, record.partition())
                .set(CONSUMER_WAITING.KAFKA_OFFSET, record.offset())
                .set(CONSUMER_WAITING.RECORD_KEY, record.key() == null ? null : truncate(record.key(), 1000))
                .set(CONSUMER_WAITING.RECORD_VALUE, record.value())
                .set(CONSUMER_WAITING.RECORD_SIGNATURE, signature(record))
                .set(CONSUMER_WAITING.ATTEMPTS, attempts)
                .set(CONSUMER_WAITING.FIRST_FAILED_AT, CLOCK_TIMESTAMP)
                .set(CONSUMER_WAITING.NEXT_ATTEMPT_AT, nextAttempt)
                .set(CONSUMER_WAITING.LAST_ERROR, truncate(error, 2000))
                .set(CONSUMER_WAITING.TRACEPARENT, trace.traceparent())
                .set(CONSUMER_WAITING.TRACESTATE, trace.tracestate())
                .set(CONSUMER_WAITING.FIRST_ATTEMPT, firstAttempt)
                .onConflictDoNothing()
                .execute() == 1;
    }

    /** Locks (creating where new) one resource's fence row, as a batch of that resource would. */
    static void lockFence(DSLContext tx, String resource) {
        lockFences(tx, new TreeSet<>(Set.of(resource)));
    }

    /** Locks (creating where new) the fence rows of these resources and returns them as they are. */
    private static Map<String, Fence> lockFences(DSLContext tx, SortedSet<String> resources) {
        // In sorted order, so that two consumers lock shared resources in the same order; one array bound.
        Field<String> resource = DSL.field(DSL.name("u", "resource"), String.class);
        var values = tx.insertInto(CONSUMER_RESOURCE_FENCE, CONSUMER_RESOURCE_FENCE.RESOURCE, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN,
                        CONSUMER_RESOURCE_FENCE.UPDATED_AT)
                .select(DSL.select(resource, val(0L), CLOCK_TIMESTAMP)
                        .from(DSL.table("unnest({0}::varchar[]) WITH ORDINALITY AS u (resource, n)", DSL.val(resources.toArray(String[]::new))))
                        .orderBy(DSL.field(DSL.name("u", "n"))));
        // DO UPDATE rather than DO NOTHING: it locks an existing row, in the statement's sorted order
        // like the rows it inserts. WHERE false: without writing a new version of it (DO UPDATE SET
        // highest_token = highest_token wrote one for every resource of every batch, before the
        // update of the fences that moved wrote another).
        values.onConflict(CONSUMER_RESOURCE_FENCE.RESOURCE).doUpdate()
                .set(CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN)
                .where(DSL.falseCondition())
                .execute();
        // Then read them: this transaction holds their locks, so they are as the next statements find them.
        Map<String, Fence> locked = new HashMap<>();
        for (var r : tx.select(CONSUMER_RESOURCE_FENCE.RESOURCE, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN,
                        CONSUMER_RESOURCE_FENCE.TOKEN_FIRST_OUTBOX_ID, CONSUMER_RESOURCE_FENCE.HIGHEST_OUTBOX_ID,
                        CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN_HOLDER, CONSUMER_RESOURCE_FENCE.HIGHEST_TOKEN_ACQUIRED_AT)
                .from(CONSUMER_RESOURCE_FENCE)
                .where(CONSUMER_RESOURCE_FENCE.RESOURCE.eq(DSL.any(DSL.val(resources.toArray(String[]::new)))))
                .fetch()) {
            locked.put(r.value1(), new Fence(r.value2(), r.value3(), r.value4(), new Tenure(r.value5(), r.value6())));
        }
        if (locked.size() != resources.size()) {
            // Locked (or inserted) by this transaction a statement ago: a fence row cannot have gone.
            throw new IllegalStateException("locked " + locked.size() + " of " + resources.size() + " resource fences");
        }
        return locked;
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
        Map<String, Fence> locked = lockFences(tx, resources);
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

    /**
     * Claims each decided job, with its outcome, and returns the decisions this transaction claimed
     * and the job-id reuses found. Each id's first record in the batch is claimed in {@code
     * consumer_processed}: a new id is inserted; an id held by the same job (or one whose creation
     * time is not known on either side) is a duplicate, left as it is and not returned; an id held by
     * a job created at another time comes back with that job's row, untouched, and is a reuse. A
     * reuse, and any further record in the batch with the same id (a job created at yet another
     * time), is then claimed by its identity in {@code consumer_processed_reissued}.
     */
    private static Claims claim(DSLContext tx, List<Decision> decisions) {
        if (decisions.isEmpty()) {
            return new Claims(Collections.newSetFromMap(new IdentityHashMap<>()), List.of());
        }
        Map<Long, Decision> firstById = new LinkedHashMap<>();
        List<Decision> later = new ArrayList<>();
        for (Decision d : decisions) {
            if (firstById.putIfAbsent(d.candidate().job().jobId(), d) != null) {
                later.add(d);
            }
        }
        // One array per column, unnested: a handful of bind values however large the batch (rendering
        // and binding a multi-row VALUES list was most of the consumer's own CPU).
        List<Job> first = firstById.values().stream().map(d -> d.candidate().job()).toList();
        var rows = unnest(tx, first, firstById.values().stream().map(d -> outcome(d.outcome())).toList());
        var insert = tx.insertInto(CONSUMER_PROCESSED, CONSUMER_PROCESSED.JOB_ID, CONSUMER_PROCESSED.JOB_CREATED_AT,
                        CONSUMER_PROCESSED.RESOURCE, CONSUMER_PROCESSED.FENCING_TOKEN, CONSUMER_PROCESSED.OUTCOME, CONSUMER_PROCESSED.PROCESSED_AT)
                .select(DSL.select(UNNESTED_ID, UNNESTED_CREATED_AT, UNNESTED_RESOURCE, UNNESTED_TOKEN, UNNESTED_TEXT, CLOCK_TIMESTAMP).from(rows));
        // DO UPDATE of nothing, only where the creation times differ: it returns the row of the job
        // that holds the id, whose creation time then tells an insert from a reuse.
        Map<Long, Record> returned = new HashMap<>();
        for (Record r : insert.onConflict(CONSUMER_PROCESSED.JOB_ID).doUpdate()
                .set(CONSUMER_PROCESSED.OUTCOME, CONSUMER_PROCESSED.OUTCOME)
                .where(CONSUMER_PROCESSED.JOB_CREATED_AT.isNotNull()
                        .and(DSL.excluded(CONSUMER_PROCESSED.JOB_CREATED_AT).isNotNull())
                        .and(CONSUMER_PROCESSED.JOB_CREATED_AT.ne(DSL.excluded(CONSUMER_PROCESSED.JOB_CREATED_AT))))
                .returningResult(CONSUMER_PROCESSED.JOB_ID, CONSUMER_PROCESSED.JOB_CREATED_AT, CONSUMER_PROCESSED.RESOURCE,
                        CONSUMER_PROCESSED.FENCING_TOKEN, CONSUMER_PROCESSED.PROCESSED_AT)
                .fetch()) {
            returned.put(r.get(CONSUMER_PROCESSED.JOB_ID), r);
        }
        Set<Decision> claimed = Collections.newSetFromMap(new IdentityHashMap<>());
        Map<Decision, String> reissued = new IdentityHashMap<>();
        Map<Long, OffsetDateTime> holder = new HashMap<>();
        for (Decision d : firstById.values()) {
            Job job = d.candidate().job();
            Record r = returned.get(job.jobId());
            if (r == null) {
                holder.put(job.jobId(), job.createdAt());
                continue;
            }
            OffsetDateTime held = r.get(CONSUMER_PROCESSED.JOB_CREATED_AT);
            holder.put(job.jobId(), held);
            if (FenceDecisions.Claim.of(true, held, job.createdAt()) == FenceDecisions.Claim.SAME_JOB) {
                claimed.add(d);
            } else {
                reissued.put(d, previousJob(job.jobId(), held, r.get(CONSUMER_PROCESSED.RESOURCE), r.get(CONSUMER_PROCESSED.FENCING_TOKEN),
                        r.get(CONSUMER_PROCESSED.PROCESSED_AT)));
            }
        }
        for (Decision d : later) {
            Job job = d.candidate().job();
            OffsetDateTime held = holder.get(job.jobId());
            if (!job.sameJobAs(job.jobId(), held)) {
                reissued.put(d, "job " + job.jobId() + " created at " + held);
            }
        }
        List<Reuse> reuses = new ArrayList<>();
        if (!reissued.isEmpty()) {
            var again = tx.insertInto(CONSUMER_PROCESSED_REISSUED, CONSUMER_PROCESSED_REISSUED.JOB_ID, CONSUMER_PROCESSED_REISSUED.JOB_CREATED_AT,
                    CONSUMER_PROCESSED_REISSUED.RESOURCE, CONSUMER_PROCESSED_REISSUED.FENCING_TOKEN, CONSUMER_PROCESSED_REISSUED.OUTCOME,
                    CONSUMER_PROCESSED_REISSUED.PROCESSED_AT);
            InsertValuesStep6<?, Long, OffsetDateTime, String, Long, String, OffsetDateTime> values = null;
            for (Decision d : reissued.keySet()) {
                Job job = d.candidate().job();
                values = (values == null ? again : values).values(val(job.jobId()), val(job.createdAt()), val(job.resource()),
                        val(job.fencingToken()), val(outcome(d.outcome())), CLOCK_TIMESTAMP);
            }
            Set<String> taken = new HashSet<>();
            values.onConflictDoNothing()
                    .returningResult(CONSUMER_PROCESSED_REISSUED.JOB_ID, CONSUMER_PROCESSED_REISSUED.JOB_CREATED_AT)
                    .fetch()
                    .forEach(r -> taken.add(identity(r.value1(), r.value2())));
            for (Map.Entry<Decision, String> e : reissued.entrySet()) {
                Job job = e.getKey().candidate().job();
                if (taken.contains(identity(job.jobId(), job.createdAt()))) {
                    claimed.add(e.getKey());
                    reuses.add(new Reuse(e.getKey(), "job_id", e.getValue()));
                }
            }
        }
        return new Claims(claimed, reuses);
    }

    private static String previousJob(long jobId, OffsetDateTime createdAt, String resource, long token, OffsetDateTime processedAt) {
        return "job " + jobId + " created at " + createdAt + " (resource " + resource + ", token " + token + ", processed at " + processedAt + ")";
    }

    static final Field<Long> UNNESTED_ID = DSL.field(DSL.name("u", "job_id"), Long.class);
    static final Field<OffsetDateTime> UNNESTED_CREATED_AT = DSL.field(DSL.name("u", "job_created_at"), OffsetDateTime.class);
    static final Field<String> UNNESTED_RESOURCE = DSL.field(DSL.name("u", "resource"), String.class);
    static final Field<Long> UNNESTED_TOKEN = DSL.field(DSL.name("u", "fencing_token"), Long.class);
    static final Field<String> UNNESTED_TEXT = DSL.field(DSL.name("u", "text"), String.class);

    /**
     * The jobs as a table {@code u (job_id, job_created_at, resource, fencing_token, text)}, from one
     * array per column; {@code text} is one more value per job (an outcome, a payload).
     */
    static Table<?> unnest(DSLContext tx, List<Job> jobs, List<String> text) {
        Long[] ids = new Long[jobs.size()];
        String[] created = new String[jobs.size()];
        String[] resources = new String[jobs.size()];
        Long[] tokens = new Long[jobs.size()];
        for (int i = 0; i < ids.length; i++) {
            Job job = jobs.get(i);
            ids[i] = job.jobId();
            created[i] = job.createdAt() == null ? null : job.createdAt().toInstant().toString();
            resources[i] = job.resource();
            tokens[i] = job.fencingToken();
        }
        return DSL.table("unnest({0}::bigint[], {1}::timestamptz[], {2}::varchar[], {3}::bigint[], {4}::text[]) "
                + "AS u (job_id, job_created_at, resource, fencing_token, text)", DSL.val(ids), DSL.val(created), DSL.val(resources),
                DSL.val(tokens), DSL.val(text.toArray(String[]::new)));
    }

    private static String identity(long jobId, OffsetDateTime createdAt) {
        return jobId + "@" + createdAt.toInstant();
    }

    static String outcome(Outcome outcome) {
        return outcome.name().toLowerCase(Locale.ROOT);
    }

    private static void recordRejected(DSLContext tx, List<Decision> rejected) {
        for (Decision d : rejected) {
            ConsumerRecord<String, byte[]> r = d.candidate().record();
            Job job = d.candidate().job();
            tx.insertInto(CONSUMER_REJECTED)
                    .set(CONSUMER_REJECTED.JOB_ID, job.jobId())
                    .set(CONSUMER_REJECTED.RESOURCE, job.resource())
                    .set(CONSUMER_REJECTED.FENCING_TOKEN, job.fencingToken())
                    .set(CONSUMER_REJECTED.HIGHEST_TOKEN, d.before().highestToken())
                    .set(CONSUMER_REJECTED.TOPIC, r.topic())
                    .set(CONSUMER_REJECTED.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_REJECTED.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_REJECTED.REJECTED_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    /**
     * Late records: applied, and each one recorded with what had been applied before it. They are
     * not expected (the relay keeps commit order per resource), so each is a WARN.
     */
    private static void recordLate(DSLContext tx, List<Decision> late) {
        for (Decision d : late) {
            ConsumerRecord<String, byte[]> r = d.candidate().record();
            Job job = d.candidate().job();
            log.warn("Late record applied: job {} of resource {} (outbox id {}, token {}) arrived after outbox id {} (highest token {}), "
                    + "against commit order; {}-{}@{}", job.jobId(), job.resource(), job.outboxId(), job.fencingToken(),
                    d.before().highestOutboxId(), d.before().highestToken(), r.topic(), r.partition(), r.offset());
            tx.insertInto(CONSUMER_LATE)
                    .set(CONSUMER_LATE.JOB_ID, job.jobId())
                    .set(CONSUMER_LATE.RESOURCE, job.resource())
                    .set(CONSUMER_LATE.OUTBOX_ID, job.outboxId())
                    .set(CONSUMER_LATE.FENCING_TOKEN, job.fencingToken())
                    .set(CONSUMER_LATE.HIGHEST_OUTBOX_ID, d.before().highestOutboxId())
                    .set(CONSUMER_LATE.HIGHEST_TOKEN, d.before().highestToken())
                    .set(CONSUMER_LATE.TOPIC, r.topic())
                    .set(CONSUMER_LATE.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_LATE.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_LATE.SEEN_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    /**
     * Reuses: each one logged at ERROR and recorded. They are what a database rolled back by a
     * failover leaves visible; the record itself is applied.
     */
    private static void recordReused(DSLContext tx, List<Reuse> reused) {
        for (Reuse u : reused) {
            ConsumerRecord<String, byte[]> r = u.decision().candidate().record();
            Job job = u.decision().candidate().job();
            Tenure tenure = u.decision().candidate().tenure();
            if (u.kind().equals("job_id")) {
                log.error("Job id {} reused: job created at {} (resource {}, token {}) arrived after {} had been processed. The database "
                        + "that completed it handed the id out again, as a standby promoted after missing commits does; applied as a "
                        + "new job; {}-{}@{}", job.jobId(), job.createdAt(), job.resource(), job.fencingToken(), u.previous(), r.topic(),
                        r.partition(), r.offset());
            } else {
                log.error("Fencing token {} reused on resource {}: job {} comes from {}, but the token had been accepted from {}. The lease "
                        + "was issued twice, as on a database rolled back by a failover; applied; {}-{}@{}", job.fencingToken(), job.resource(),
                        job.jobId(), tenure, u.previous(), r.topic(), r.partition(), r.offset());
            }
            tx.insertInto(CONSUMER_REUSED)
                    .set(CONSUMER_REUSED.KIND, u.kind())
                    .set(CONSUMER_REUSED.JOB_ID, job.jobId())
                    .set(CONSUMER_REUSED.RESOURCE, job.resource())
                    .set(CONSUMER_REUSED.FENCING_TOKEN, job.fencingToken())
                    .set(CONSUMER_REUSED.JOB_CREATED_AT, job.createdAt())
                    .set(CONSUMER_REUSED.TOKEN_HOLDER, tenure.holder())
                    .set(CONSUMER_REUSED.TOKEN_ACQUIRED_AT, tenure.acquiredAt())
                    .set(CONSUMER_REUSED.PREVIOUS, truncate(u.previous(), 1000))
                    .set(CONSUMER_REUSED.TOPIC, r.topic())
                    .set(CONSUMER_REUSED.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_REUSED.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_REUSED.SEEN_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    /**
     * Writes the fences that applied records moved, in one statement from one array per column (one
     * UPDATE per resource was 2.75 million statements in a 6-minute soak, a round trip each); the
     * rows are locked since {@link #decide}.
     */
    private static void writeFences(DSLContext tx, Map<String, Fence> fences, Map<String, Fence> locked) {
        List<Map.Entry<String, Fence>> moved = fences.entrySet().stream().filter(e -> !e.getValue().equals(locked.get(e.getKey()))).toList();
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
            highest[i] = f.highestToken();
            firstOutboxIds[i] = f.tokenFirstOutboxId();
            highestOutboxIds[i] = f.highestOutboxId();
            holders[i] = f.tenure().holder();
            acquiredAt[i] = f.tenure().acquiredAt() == null ? null : f.tenure().acquiredAt().toInstant().toString();
        }
        int updated = tx.execute("UPDATE consumer_resource_fence f SET highest_token = v.highest_token, token_first_outbox_id = v.first_outbox_id,"
                + " highest_outbox_id = v.highest_outbox_id, highest_token_holder = v.holder, highest_token_acquired_at = v.acquired_at,"
                + " updated_at = clock_timestamp()"
                + " FROM unnest({0}::varchar[], {1}::bigint[], {2}::bigint[], {3}::bigint[], {4}::varchar[], {5}::timestamptz[])"
                + " AS v (resource, highest_token, first_outbox_id, highest_outbox_id, holder, acquired_at)"
                + " WHERE f.resource = v.resource", DSL.val(resources), DSL.val(highest), DSL.val(firstOutboxIds), DSL.val(highestOutboxIds),
                DSL.val(holders), DSL.val(acquiredAt));
        if (updated != n) {
            // Locked by this transaction since decide(): a fence row cannot have gone.
            throw new IllegalStateException("wrote " + updated + " of " + n + " resource fences");
        }
    }

    /**
     * Dead-letters a record with its raw bytes. With a job id (an effect that kept failing), the
     * job is claimed too, so a redelivery is a duplicate and not a second attempt; a job whose id
     * another job holds is claimed in {@code consumer_processed_reissued} and its reuse reported
     * (the report of its batch was rolled back with it). Returns whether it reported a reuse.
     * {@code firstAttempt}: the traceparent of the span of the attempt that failed first, which a
     * replay's span links to; null for none.
     */
    static boolean deadLetter(DSLContext tx, ConsumerRecord<String, byte[]> record, Job job, String reason, String firstAttempt) {
        boolean reported = false;
        if (job != null) {
            var held = tx.select(CONSUMER_PROCESSED.JOB_CREATED_AT, CONSUMER_PROCESSED.RESOURCE, CONSUMER_PROCESSED.FENCING_TOKEN,
                            CONSUMER_PROCESSED.PROCESSED_AT)
                    .from(CONSUMER_PROCESSED).where(CONSUMER_PROCESSED.JOB_ID.eq(job.jobId())).fetchOptional().orElse(null);
            boolean reissued = held != null && held.value1() != null && job.createdAt() != null && !held.value1().isEqual(job.createdAt());
            // Both tables have the same columns: the claim goes where the batch's claim would have put it.
            Table<?> table = reissued ? CONSUMER_PROCESSED_REISSUED : CONSUMER_PROCESSED;
            boolean claimed = tx.insertInto(table)
                    .set(sameColumn(table, CONSUMER_PROCESSED.JOB_ID), job.jobId())
                    .set(sameColumn(table, CONSUMER_PROCESSED.JOB_CREATED_AT), job.createdAt())
                    .set(sameColumn(table, CONSUMER_PROCESSED.RESOURCE), job.resource())
                    .set(sameColumn(table, CONSUMER_PROCESSED.FENCING_TOKEN), job.fencingToken())
                    .set(sameColumn(table, CONSUMER_PROCESSED.OUTCOME), outcome(Outcome.DEAD_LETTER))
                    .set(sameColumn(table, CONSUMER_PROCESSED.PROCESSED_AT), CLOCK_TIMESTAMP)
                    .onConflictDoNothing()
                    .execute() == 1;
            if (reissued && claimed) {
                Decision d = new Decision(new Candidate(record, job, Tenure.UNKNOWN), Outcome.DEAD_LETTER, null);
                recordReused(tx, List.of(new Reuse(d, "job_id", previousJob(job.jobId(), held.value1(), held.value2(), held.value3(),
                        held.value4()))));
                reported = true;
            }
        }
        String key = record.key();
        StoredTrace trace = StoredTrace.of(record);
        tx.insertInto(CONSUMER_DEAD_LETTER)
                .set(CONSUMER_DEAD_LETTER.TOPIC, record.topic())
                .set(CONSUMER_DEAD_LETTER.KAFKA_PARTITION, record.partition())
                .set(CONSUMER_DEAD_LETTER.KAFKA_OFFSET, record.offset())
                .set(CONSUMER_DEAD_LETTER.RECORD_KEY, key == null ? null : truncate(key, 1000))
                .set(CONSUMER_DEAD_LETTER.RECORD_VALUE, record.value())
                .set(CONSUMER_DEAD_LETTER.RECORD_SIGNATURE, signature(record))
                .set(CONSUMER_DEAD_LETTER.JOB_ID, job == null ? null : job.jobId())
                .set(CONSUMER_DEAD_LETTER.REASON, truncate(reason, 2000))
                .set(CONSUMER_DEAD_LETTER.DEAD_LETTERED_AT, CLOCK_TIMESTAMP)
                .set(CONSUMER_DEAD_LETTER.TRACEPARENT, trace.traceparent())
                .set(CONSUMER_DEAD_LETTER.TRACESTATE, trace.tracestate())
                .set(CONSUMER_DEAD_LETTER.FIRST_ATTEMPT, firstAttempt)
                .onConflictDoNothing()
                .execute();
        return reported;
    }

    /** The column of {@code table} named like {@code column} of {@code consumer_processed}. */
    private static <T> Field<T> sameColumn(Table<?> table, Field<T> column) {
        return table.field(column.getName(), column.getType());
    }

    /** The record's signature header, kept with what the consumer stores of it. */
    static byte[] signature(ConsumerRecord<String, byte[]> record) {
        Header h = record.headers().lastHeader(RecordSignatures.HEADER);
        return h == null ? null : h.value();
    }

    /**
     * A record as stored, with its signature header again where it had one, and its job's trace
     * context headers where it had a context.
     */
    static ConsumerRecord<String, byte[]> stored(String topic, int partition, long offset, String key, byte[] value, byte[] signature,
            String traceparent, String tracestate) {
        ConsumerRecord<String, byte[]> record = new ConsumerRecord<>(topic, partition, offset, key, value);
        if (signature != null) {
            record.headers().add(RecordSignatures.HEADER, signature);
        }
        if (traceparent != null) {
            record.headers().add(TraceContext.TRACEPARENT_HEADER, traceparent.getBytes(StandardCharsets.US_ASCII));
            if (tracestate != null) {
                record.headers().add(TraceContext.TRACESTATE_HEADER, tracestate.getBytes(StandardCharsets.US_ASCII));
            }
        }
        return record;
    }

    /**
     * The job's context a record carries, as a waiting record or a dead letter keeps it: the
     * traceparent written again from a valid context (55 characters), the tracestate header as it
     * came when it fits (512); nulls for a record without a valid context.
     */
    record StoredTrace(String traceparent, String tracestate) {
        static final StoredTrace NONE = new StoredTrace(null, null);

        static StoredTrace of(ConsumerRecord<String, byte[]> record) {
            SpanContext job = Tracing.producer(Tracing.jobContext(record.headers()));
            if (!job.isValid()) {
                return NONE;
            }
            Header state = record.headers().lastHeader(TraceContext.TRACESTATE_HEADER);
            String tracestate = state == null || state.value() == null || state.value().length > 512 ? null
                    : new String(state.value(), StandardCharsets.US_ASCII);
            return new StoredTrace(BatchProcessor.traceparent(job), tracestate);
        }
    }

    /** A span context as a W3C traceparent; null when it is not valid. */
    static String traceparent(SpanContext context) {
        return context.isValid() ? "00-" + context.getTraceId() + "-" + context.getSpanId() + "-" + context.getTraceFlags().asHex() : null;
    }

    /** Reads the job out of a record whose batch failed in the effect, for the one-by-one retry. */
    static Job jobOf(ConsumerRecord<String, byte[]> record) {
        try {
            return jobOf(Envelope.parse(record.value()));
        } catch (Envelope.InvalidEnvelope e) {
            return null;
        }
    }

    private static Job jobOf(Envelope e) {
        return new Job(e.jobId(), e.resource(), e.fencingToken(), e.payloadJson(), e.dueAt(), e.completedAt(), e.outboxId(),
                asStored(e.jobCreatedAt()));
    }

    /**
     * The time as PostgreSQL stores it: microseconds, rounded half to even. Identities read from
     * the consumer's tables are compared with those from records, and a record written by anything
     * but the relay (which copies the database's values) may carry nanoseconds: without this, a job
     * would never equal itself and every record of it would be taken for a reuse.
     */
    static OffsetDateTime asStored(OffsetDateTime t) {
        if (t == null) {
            return null;
        }
        int nanos = t.getNano();
        int below = nanos % 1000;
        OffsetDateTime micros = t.minusNanos(below);
        if (below > 500 || (below == 500 && (nanos / 1000) % 2 == 1)) {
            micros = micros.plusNanos(1000);
        }
        return micros;
    }

    static String truncate(String s, int max) {
        return s.length() <= max ? s : s.substring(0, max - 1) + "…";
    }

    static String describe(ConsumerRecord<String, byte[]> r) {
        return r.topic() + "-" + r.partition() + "@" + r.offset() + " key=" + r.key() + " value="
                + (r.value() == null ? "null" : truncate(new String(r.value(), StandardCharsets.UTF_8), 200));
    }
}
