package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_WAITING;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;

import dev.fencedjobs.consumer.jooq.tables.records.ConsumerWaitingRecord;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.internal.Faults;
import dev.fencedjobs.runtime.internal.Tracing;
import io.opentelemetry.api.OpenTelemetry;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.DoubleSupplier;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jooq.DSLContext;
import org.jooq.Record;
import org.jooq.impl.DSL;
import org.jooq.types.DayToSecond;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Tries again the first waiting record of each resource whose next attempt is due, one at a time:
 * in one transaction it locks the resource's fence row (as a batch of that resource would, so the
 * poll loop cannot decide a record of it meanwhile), takes the record out of {@code
 * consumer_waiting} and processes it through the same dedup, fence and effect path as a fresh
 * record. On success the next waiting record of the resource is first, due at once. On failure the
 * transaction is rolled back and the record's next attempt is set after an exponential, jittered
 * back-off ({@link EffectRetries}); once it first failed longer than the maximum age ago it is
 * dead-lettered, and its resource moves on. Any consumer of the group may do this for any resource:
 * the records are in the database, not in a partition's memory, so restarts and rebalances lose
 * none.
 *
 * <p>While it knows that nothing waits (its last look found no waiting record, and this consumer
 * has put none to wait since: {@link #putToWait()}), it looks again only every {@link #QUIET}, for
 * records another consumer of the group put to wait; an idle consumer so sends one statement a
 * minute for it instead of one a second.
 */
final class PatientRetries {

    private static final Logger log = LoggerFactory.getLogger(PatientRetries.class);

    private final DSLContext dsl;
    private final BatchProcessor processor;
    private final EffectRetries retries;
    private final Duration base;
    private final DoubleSupplier random;
    private final Ticker ticker;
    /** How often it looks while it knows that nothing waits. */
    static final Duration QUIET = Duration.ofMinutes(1);
    /** Records this consumer put to wait, counted. */
    private final AtomicLong puts = new AtomicLong();
    /**
     * Quiet (no look before {@code quietUntil}) while {@link #puts} is still what it was before the
     * look that found nothing waiting: a record put to wait while that look ran ends the quiet.
     * Written by the retry thread only.
     */
    private volatile long quietPuts = -1;

    private volatile long quietUntil;
    /** Retries that succeeded, and records dead-lettered after their last attempt. */
    private final AtomicInteger succeeded = new AtomicInteger();

    private final AtomicInteger deadLettered = new AtomicInteger();

    /** The retry thread's own: each retry's span, in the job's trace and linked to the attempt that failed first. */
    private final ProcessSpans spans;

    PatientRetries(
            DSLContext dsl,
            BatchProcessor processor,
            EffectRetries retries,
            Duration base,
            DoubleSupplier random,
            Ticker ticker) {
        this(dsl, processor, retries, base, random, ticker, new ProcessSpans(new Tracing(OpenTelemetry.noop()), ""));
    }

    PatientRetries(
            DSLContext dsl,
            BatchProcessor processor,
            EffectRetries retries,
            Duration base,
            DoubleSupplier random,
            Ticker ticker,
            ProcessSpans spans) {
        this.dsl = dsl;
        this.spans = spans;
        this.ticker = ticker;
        this.processor = processor;
        this.retries = retries;
        this.base = base;
        this.random = random;
    }

    /** This consumer put a record to wait: look every second again. */
    void putToWait() {
        puts.incrementAndGet();
    }

    /** Tries the most overdue first waiting record, if one is due; returns how many it tried (0 or 1). */
    int retryOne() {
        long before = puts.get();
        if (before == quietPuts && ticker.nanoTime() - quietUntil < 0) {
            return 0;
        }
        Record due = dsl.fetchOne(
                "SELECT seq, resource, next_attempt_at <= clock_timestamp() AS due FROM (SELECT DISTINCT ON (resource) "
                        + "seq, resource, next_attempt_at FROM consumer_waiting ORDER BY resource, seq) head ORDER BY next_attempt_at LIMIT 1");
        if (due == null) {
            quietUntil = ticker.nanoTime() + QUIET.toNanos();
            quietPuts = before;
            return 0;
        }
        quietPuts = -1;
        if (!due.get("due", Boolean.class)) {
            return 0;
        }
        long seq = due.get("seq", Long.class);
        String resource = due.get("resource", String.class);
        spans.begin(Instant.now());
        IdentityHashMap<ConsumerRecord<String, byte[]>, String> outcomes = new IdentityHashMap<>(2);
        List<ConsumerRecord<String, byte[]>> tried = new ArrayList<>(1);
        try {
            Boolean done = dsl.transactionResult(c -> attempt(c.dsl(), seq, resource, tried, outcomes));
            spans.committed(tried, outcomes);
            if (done) {
                succeeded.incrementAndGet();
            }
        } catch (BatchProcessor.EffectFailure e) {
            spans.rolledBack(e);
            failed(seq, e);
        } catch (RuntimeException | Error e) {
            spans.rolledBack(e);
            throw e;
        }
        return 1;
    }

    private boolean attempt(
            DSLContext tx,
            long seq,
            String resource,
            List<ConsumerRecord<String, byte[]>> tried,
            Map<ConsumerRecord<String, byte[]>, String> outcomes) {
        FenceStore.lockFence(tx, resource);
        ConsumerWaitingRecord w = tx.selectFrom(CONSUMER_WAITING)
                .where(CONSUMER_WAITING.SEQ.eq(seq))
                .fetchOne();
        boolean first = w != null
                && !tx.fetchExists(
                        CONSUMER_WAITING, CONSUMER_WAITING.RESOURCE.eq(resource).and(CONSUMER_WAITING.SEQ.lt(seq)));
        if (!first) {
            return false; // another consumer tried it meanwhile
        }
        tx.deleteFrom(CONSUMER_WAITING).where(CONSUMER_WAITING.SEQ.eq(seq)).execute();
        ConsumerRecord<String, byte[]> record = record(w);
        tried.add(record);
        // Attempts counts the failed ones (0: it waited behind another record and never ran): this is the next.
        spans.retrying(record, w.getJobId(), w.getFirstAttempt(), w.getAttempts() + 1);
        Counts counts =
                processor.process(tx, tried, resource, BatchProcessor.Authenticity.CHECKED_ON_ARRIVAL, outcomes, spans);
        log.info(
                "Patient retry {} of job {} (resource {}) succeeded: {}",
                w.getAttempts() + 1,
                w.getJobId(),
                resource,
                counts.applied() > 0
                        ? "applied"
                        : counts.duplicates() > 0
                                ? "a duplicate"
                                : counts.rejected() > 0 ? "rejected as stale" : "decided");
        return true;
    }

    private void failed(long seq, BatchProcessor.EffectFailure e) {
        String error = Faults.describe(e.getCause());
        dsl.transaction(c -> {
            DSLContext tx = c.dsl();
            ConsumerWaitingRecord w = tx.selectFrom(CONSUMER_WAITING)
                    .where(CONSUMER_WAITING.SEQ.eq(seq))
                    .forUpdate()
                    .fetchOne();
            if (w == null) {
                return;
            }
            int attempts = w.getAttempts() + 1;
            OffsetDateTime now = tx.select(CLOCK_TIMESTAMP).fetchSingle().value1();
            // A record that waited behind another has not failed before: its age starts now, not when it began to wait.
            OffsetDateTime firstFailed = w.getAttempts() == 0 ? now : w.getFirstFailedAt();
            Duration age = Duration.between(firstFailed, now);
            if (age.compareTo(retries.maxAge()) >= 0) {
                String reason = "effect failed " + attempts + " times over " + age.truncatedTo(ChronoUnit.SECONDS)
                        + " (EFFECT_RETRY_MAX_AGE " + retries.maxAge() + "): " + error;
                log.error("Dead-lettering job {} of resource {}: {}", w.getJobId(), w.getResource(), reason);
                ConsumerRecord<String, byte[]> record = record(w);
                StoredRecords.deadLetter(tx, record, Records.jobOf(record), reason, w.getFirstAttempt());
                tx.deleteFrom(CONSUMER_WAITING)
                        .where(CONSUMER_WAITING.SEQ.eq(seq))
                        .execute();
                deadLettered.incrementAndGet();
                return;
            }
            Duration wait = retries.backoff(base, attempts, random.getAsDouble());
            log.warn(
                    "Patient retry {} of job {} (resource {}) failed, next in {} ms; its resource's later records wait behind it: {}",
                    attempts,
                    w.getJobId(),
                    w.getResource(),
                    wait.toMillis(),
                    error);
            tx.update(CONSUMER_WAITING)
                    .set(CONSUMER_WAITING.ATTEMPTS, attempts)
                    .set(CONSUMER_WAITING.FIRST_FAILED_AT, firstFailed)
                    .set(CONSUMER_WAITING.NEXT_ATTEMPT_AT, CLOCK_TIMESTAMP.plus(DSL.val(DayToSecond.valueOf(wait))))
                    .set(CONSUMER_WAITING.LAST_ERROR, Records.truncate(error, 2000))
                    .where(CONSUMER_WAITING.SEQ.eq(seq))
                    .execute();
        });
    }

    private static ConsumerRecord<String, byte[]> record(ConsumerWaitingRecord w) {
        return StoredRecords.stored(
                w.getTopic(),
                w.getKafkaPartition(),
                w.getKafkaOffset(),
                w.getRecordKey(),
                w.getRecordValue(),
                w.getRecordSignature(),
                w.getTraceparent(),
                w.getTracestate());
    }

    int succeeded() {
        return succeeded.get();
    }

    int deadLettered() {
        return deadLettered.get();
    }
}
