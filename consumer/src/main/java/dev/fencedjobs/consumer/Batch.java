package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_COUNTERS;

import dev.fencedjobs.consumer.ClaimStore.Claims;
import dev.fencedjobs.consumer.Decision.Candidate;
import dev.fencedjobs.consumer.Decision.Reuse;
import dev.fencedjobs.consumer.FenceDecisions.Fence;
import dev.fencedjobs.runtime.internal.Envelope;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jooq.DSLContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** One batch's records as the steps sort them, and what became of each ({@code noted}). */
final class Batch {

    private static final Logger log = LoggerFactory.getLogger(BatchProcessor.class);

    final DSLContext tx;
    final Map<ConsumerRecord<String, byte[]>, String> noted;
    final BatchProcessor.Handling handling;
    final Map<ConsumerRecord<String, byte[]>, String> unreadable = new LinkedHashMap<>();
    final List<Job> toApply = new ArrayList<>();
    final List<ConsumerRecord<String, byte[]>> applying = new ArrayList<>();
    final List<Decision> rejected = new ArrayList<>();
    final List<Decision> late = new ArrayList<>();
    final List<Reuse> reused = new ArrayList<>();
    /** The fences as the applied records moved them. */
    final Map<String, Fence> fences = new HashMap<>();

    int duplicates;
    int unauthenticated;
    int parked;

    Batch(DSLContext tx, Map<ConsumerRecord<String, byte[]>, String> noted, BatchProcessor.Handling handling) {
        this.tx = tx;
        this.noted = noted;
        this.handling = handling;
    }

    /**
     * Checks and reads each record: an unauthenticated or unreadable one is to be dead-lettered
     * (before dedup and before the fence: it claims no job id and moves no fence); a second
     * record of the same job in the batch is a duplicate. Returns the rest, in order.
     */
    List<Candidate> screen(List<ConsumerRecord<String, byte[]>> records, BatchProcessor.Authenticity authenticity) {
        List<Candidate> distinct = new ArrayList<>();
        Map<Long, List<Job>> seen = new HashMap<>();
        for (ConsumerRecord<String, byte[]> record : records) {
            Optional<String> problem = authenticity.problem(record);
            if (problem.isPresent()) {
                log.error(
                        "Unauthenticated record {}-{}@{} dead-lettered, not applied: {}",
                        record.topic(),
                        record.partition(),
                        record.offset(),
                        problem.get());
                unreadable.put(record, BatchProcessor.UNAUTHENTICATED + ": " + problem.get());
                noted.put(record, BatchProcessor.DEAD_LETTER);
                unauthenticated++;
                continue;
            }
            try {
                Candidate c = Candidate.of(record, Envelope.parse(record.value()));
                Job job = c.job();
                List<Job> sameId = seen.computeIfAbsent(job.jobId(), id -> new ArrayList<>(1));
                if (sameId.stream().anyMatch(j -> j.sameJobAs(job.jobId(), job.createdAt()))) {
                    duplicate(record);
                } else {
                    sameId.add(job);
                    distinct.add(c);
                }
            } catch (Envelope.InvalidEnvelope e) {
                unreadable.put(record, e.getMessage());
                noted.put(record, BatchProcessor.DEAD_LETTER);
            }
        }
        return distinct;
    }

    /** Parks the decisions of resources with records waiting behind those; returns the rest, to be decided now. */
    List<Decision> parkWaiting(List<Decision> decided, Set<String> waitingResources) {
        if (waitingResources.isEmpty()) {
            return decided;
        }
        List<Decision> deciding = new ArrayList<>();
        for (Decision d : decided) {
            if (!waitingResources.contains(d.job().resource())) {
                deciding.add(d);
            } else if (StoredRecords.park(
                    tx,
                    d.record(),
                    d.job(),
                    0,
                    "waiting behind an earlier record of its resource",
                    null,
                    storing(d.record()))) {
                noted.put(d.record(), BatchProcessor.WAITING);
                parked++;
            } else {
                duplicate(d.record()); // already waiting
            }
        }
        return deciding;
    }

    /** Gives each claimed decision its verdict ({@link FenceDecisions#verdict}) and moves the fences of those applied. */
    void judge(List<Decision> deciding, Claims claims, Map<String, Fence> locked) {
        reused.addAll(claims.reused());
        for (Decision d : deciding) {
            Job job = d.job();
            switch (FenceDecisions.verdict(false, claims.of(d), d.before(), job.outboxId(), job.fencingToken())) {
                case DUPLICATE -> duplicate(d.record());
                case STALE -> {
                    noted.put(d.record(), BatchProcessor.STALE);
                    rejected.add(d);
                }
                case APPLIED, LATE, REUSED -> admit(d, fences.getOrDefault(job.resource(), locked.get(job.resource())));
                case WAITING -> throw new IllegalStateException("parked before the claims");
            }
        }
    }

    /** An admitted record: to apply, its fence moved ({@code before}: as the batch's earlier records left it). */
    private void admit(Decision d, Fence before) {
        Job job = d.job();
        toApply.add(job);
        applying.add(d.record());
        if (before.tokenReusedBy(job.fencingToken(), d.candidate().tenure())) {
            reused.add(new Reuse(d, "token", before.tenure().toString()));
        }
        fences.put(
                job.resource(),
                before.after(job.outboxId(), job.fencingToken(), d.candidate().tenure()));
        // A reused id can be late too.
        if (d.before().late(job.outboxId(), job.fencingToken())) {
            late.add(d);
            noted.put(d.record(), BatchProcessor.LATE);
        } else {
            noted.put(d.record(), BatchProcessor.APPLIED);
        }
    }

    /** After the effects: the reports, the dead letters, the fences and the duplicates' count, in the same transaction. */
    Counts finish(Map<String, Fence> locked) {
        Reports.rejected(tx, rejected);
        Reports.late(tx, late);
        Reports.reused(tx, reused);
        for (Map.Entry<ConsumerRecord<String, byte[]>, String> u : unreadable.entrySet()) {
            StoredRecords.deadLetter(tx, u.getKey(), null, u.getValue(), storing(u.getKey()));
        }
        FenceStore.write(tx, fences, locked);
        if (duplicates > 0) {
            // With the batch, so `fenced-jobs status` counts exactly the duplicates that committed.
            tx.update(CONSUMER_COUNTERS)
                    .set(CONSUMER_COUNTERS.VALUE, CONSUMER_COUNTERS.VALUE.plus(duplicates))
                    .where(CONSUMER_COUNTERS.NAME.eq("duplicates"))
                    .execute();
        }
        return new Counts(
                toApply.size(),
                duplicates,
                rejected.size(),
                unreadable.size(),
                late.size(),
                reused.size(),
                parked,
                unauthenticated);
    }

    private void duplicate(ConsumerRecord<String, byte[]> record) {
        noted.put(record, BatchProcessor.DUPLICATE);
        duplicates++;
    }

    private String storing(ConsumerRecord<String, byte[]> record) {
        return handling == null ? null : handling.storing(record);
    }
}
