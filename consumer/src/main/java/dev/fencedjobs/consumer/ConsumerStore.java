package dev.fencedjobs.consumer;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.StatusCode;
import java.time.Duration;
import java.time.Instant;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jooq.DSLContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** The consumer's database: each call a transaction of its own. */
final class ConsumerStore implements ConsumerLoop.Store {

    private static final Logger log = LoggerFactory.getLogger(FencedConsumer.class);

    private final ConsumerConfig config;
    private final DSLContext dsl;
    private final BatchProcessor processor;
    private final ProcessSpans spans;
    private final DueToEffect dueToEffect;
    private final PatientRetries patient;

    ConsumerStore(
            ConsumerConfig config,
            DSLContext dsl,
            BatchProcessor processor,
            ProcessSpans spans,
            DueToEffect dueToEffect,
            PatientRetries patient) {
        this.config = config;
        this.dsl = dsl;
        this.processor = processor;
        this.spans = spans;
        this.dueToEffect = dueToEffect;
        this.patient = patient;
    }

    @Override
    public Counts process(List<ConsumerRecord<String, byte[]>> records) {
        spans.begin(Instant.now());
        dueToEffect.begin();
        IdentityHashMap<ConsumerRecord<String, byte[]>, String> outcomes = new IdentityHashMap<>(records.size() * 2);
        Counts counts;
        try {
            counts = dsl.transactionResult(c -> processor.process(c.dsl(), records, outcomes, dueToEffect));
        } catch (RuntimeException | Error e) {
            spans.rolledBack(e);
            throw e;
        }
        dueToEffect.committed(Instant.now());
        spans.committed(records, outcomes);
        return waited(counts);
    }

    /** Records put to wait (behind a waiting one of their resource) wake the patient retries. */
    private Counts waited(Counts counts) {
        if (counts.waiting() > 0) {
            patient.putToWait();
        }
        return counts;
    }

    @Override
    public Counts giveUp(ConsumerRecord<String, byte[]> record, String reason) {
        // The span first: the waiting record or the dead letter keeps its context, for the retry's or the replay's
        // link.
        Span span = spans.span(record, Instant.now());
        Counts counts;
        try {
            counts = parkOrDeadLetter(record, reason, ProcessSpans.firstAttempt(span));
        } catch (RuntimeException | Error e) {
            span.setStatus(StatusCode.ERROR, "rolled back: " + e.getClass().getSimpleName());
            ProcessSpans.end(span, ProcessSpans.ROLLED_BACK);
            throw e;
        }
        ProcessSpans.end(
                span,
                counts.waiting() > 0
                        ? BatchProcessor.WAITING
                        : counts.deadLettered() > 0 ? BatchProcessor.DEAD_LETTER : BatchProcessor.DUPLICATE);
        return counts;
    }

    /** A record whose effect kept failing: put to wait for a patient retry, or dead-lettered. */
    private Counts parkOrDeadLetter(ConsumerRecord<String, byte[]> record, String reason, String firstAttempt) {
        Job job = Records.jobOf(record);
        if (config.retries().enabled() && job != null) {
            Duration wait = config.retries()
                    .backoff(
                            config.effectRetryBackoff(),
                            config.effectMaxAttempts(),
                            ThreadLocalRandom.current().nextDouble());
            log.warn(
                    "{}; {} waits for a patient retry in {} ms, and its resource's later records behind it",
                    reason,
                    Records.describe(record),
                    wait.toMillis());
            boolean waits = dsl.transactionResult(c -> {
                FenceStore.lockFence(c.dsl(), job.resource());
                return StoredRecords.park(c.dsl(), record, job, config.effectMaxAttempts(), reason, wait, firstAttempt);
            });
            return waited(waits ? new Counts(0, 0, 0, 0, 0, 0, 1) : new Counts(0, 1, 0, 0, 0, 0, 0));
        }
        log.error("Dead-lettering {}: {}", Records.describe(record), reason);
        boolean reused =
                dsl.transactionResult(c -> StoredRecords.deadLetter(c.dsl(), record, job, reason, firstAttempt));
        return new Counts(0, 0, 0, 1, 0, reused ? 1 : 0);
    }
}
