package dev.fencedjobs.consumer;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.internal.Backoff;
import dev.fencedjobs.runtime.internal.Faults;
import dev.fencedjobs.runtime.internal.KafkaHealth;
import dev.fencedjobs.runtime.internal.Next;
import dev.fencedjobs.runtime.internal.Wakeup;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The consumer's loop as steps ({@link Next}), run by {@link Next#drive} on the consumer's thread:
 *
 * <ol>
 *   <li>poll a batch and handle it in one transaction of the consumer's database ({@link Store});
 *       then commit its offsets. A crash between the two commits redelivers the batch, and the
 *       job ids recorded in the first make it a no-op;
 *   <li>an effect that throws rolls the batch back; its records are then tried one at a time, a
 *       step each, each up to {@code EFFECT_MAX_ATTEMPTS} times {@code EFFECT_RETRY_BACKOFF}
 *       apart, and given up on after that (a patient retry, or a dead letter), so one bad job never
 *       blocks a partition. The offsets are committed once the last record is through;
 *   <li>a database fault is not the records' fault: the batch is rolled back, the consumer seeks
 *       back to it and backs off. A Kafka fault backs off too. Nothing is committed to Kafka meanwhile.
 * </ol>
 *
 * <p>A stop finishes the batch in hand (database and offsets) and then ends the loop.
 */
final class ConsumerLoop {

    private static final Logger log = LoggerFactory.getLogger(ConsumerLoop.class);
    static final Duration POLL = Duration.ofSeconds(1);

    /** The consumer's database as the loop sees it. */
    interface Store {
        /** Handles the records in one transaction; throws {@link BatchProcessor.EffectFailure} (rolled back) when the effect threw. */
        Counts process(List<ConsumerRecord<String, byte[]>> records);

        /** After the quick attempts: the record waits for a patient retry, or goes to the dead letters. */
        Counts giveUp(ConsumerRecord<String, byte[]> record, String reason);
    }

    /** Commits the offsets of a handled batch; the default is {@code commitSync}. */
    interface OffsetCommitter {
        void commit(Consumer<String, byte[]> consumer, Map<TopicPartition, OffsetAndMetadata> offsets);
    }

    /** A batch whose effect failed, being handled one record at a time. */
    private static final class InHand {
        final ConsumerRecords<String, byte[]> polled;
        final List<ConsumerRecord<String, byte[]>> records;
        final long startedNanos;
        int index;
        int attempt;
        Counts total = Counts.NONE;

        InHand(
                ConsumerRecords<String, byte[]> polled,
                List<ConsumerRecord<String, byte[]>> records,
                long startedNanos) {
            this.polled = polled;
            this.records = records;
            this.startedNanos = startedNanos;
        }

        void done(Counts counts) {
            total = total.plus(counts);
            index++;
            attempt = 0;
        }
    }

    private final Consumer<String, byte[]> kafka;
    private final Store store;
    private final OffsetCommitter committer;
    private final int maxAttempts;
    private final Duration attemptBackoff;
    private final Ticker ticker;
    private final Wakeup wakeup = new Wakeup();
    private final Backoff backoff = new Backoff(Duration.ofMillis(100), Duration.ofSeconds(5));
    private final KafkaHealth health = new KafkaHealth(log, "consumer", "nothing is consumed meanwhile; retrying");
    private final AtomicLong lag = new AtomicLong();
    private volatile boolean running = true;
    private volatile boolean databaseOk = true;
    private volatile List<String> assignment = List.of();
    private volatile Map<String, Object> lastBatch;
    /** The loop thread's own: the batch being handled one record at a time. */
    private InHand inHand;

    private final Counter applied;
    private final Counter duplicates;
    private final Counter stale;
    private final Counter deadLettered;
    private final Counter unauthenticated;
    private final Counter late;
    private final Counter reused;
    private final Counter parked;
    private final Counter failures;
    private final Timer batchLatency;

    ConsumerLoop(
            Consumer<String, byte[]> kafka,
            Store store,
            OffsetCommitter committer,
            int maxAttempts,
            Duration attemptBackoff,
            Ticker ticker,
            MeterRegistry registry) {
        this.kafka = kafka;
        this.store = store;
        this.committer = committer;
        this.maxAttempts = maxAttempts;
        this.attemptBackoff = attemptBackoff;
        this.ticker = ticker;
        applied = Counter.builder("fencedjobs_consumer_applied")
                .description("effects applied")
                .register(registry);
        duplicates = Counter.builder("fencedjobs_consumer_duplicates")
                .description("records skipped: job id already processed")
                .register(registry);
        stale = Counter.builder("fencedjobs_consumer_stale_rejected")
                .description("records rejected: token below the resource's highest")
                .register(registry);
        deadLettered = Counter.builder("fencedjobs_consumer_dead_lettered")
                .description("records dead-lettered")
                .register(registry);
        unauthenticated = Counter.builder("fencedjobs_consumer_unauthenticated")
                .description(
                        "records dead-lettered because no trusted key signed them (forged, tampered, unsigned, or an untrusted key)")
                .register(registry);
        late = Counter.builder("fencedjobs_consumer_late")
                .description("records applied that arrived after a later outbox row of their resource")
                .register(registry);
        reused = Counter.builder("fencedjobs_consumer_reused")
                .description(
                        "records whose job id or fencing token had been seen on another job or tenure: a database rolled back by a failover")
                .register(registry);
        parked = Counter.builder("fencedjobs_consumer_waiting")
                .description(
                        "records put to wait for a patient retry: their effect kept failing, or an earlier record of their resource waits")
                .register(registry);
        failures = Counter.builder("fencedjobs_consumer_batch_failures")
                .description(
                        "polls and batches that failed: a Kafka fault, or a database fault that rolled the batch back")
                .register(registry);
        batchLatency = Timer.builder("fencedjobs_consumer_batch")
                .description("database transaction and offset commit of one batch")
                .register(registry);
        Gauge.builder("fencedjobs_consumer_lag", lag, AtomicLong::get)
                .description("records behind the end of the assigned partitions")
                .register(registry);
    }

    /** Runs the steps until stopped. */
    void run() throws InterruptedException {
        Next.drive(this::step, wakeup, ticker);
    }

    /** Stop polling; the batch in hand is finished first. */
    void stop() {
        running = false;
        wakeup.signal();
        kafka.wakeup();
    }

    /** One step: a record of the batch in hand, or a poll and its batch. */
    Next step() {
        if (inHand != null) {
            return nextRecord();
        }
        if (!running) {
            return Next.stopped();
        }
        ConsumerRecords<String, byte[]> polled;
        try {
            polled = kafka.poll(POLL);
        } catch (WakeupException e) {
            return running ? Next.again() : Next.stopped();
        } catch (KafkaException e) {
            failures.increment();
            health.failed(e);
            return Next.backOff(
                    ticker.nanoTime() + backoff.nextNanos(),
                    "Kafka: " + e.getClass().getSimpleName());
        }
        health.succeeded();
        updateLagAndAssignment();
        if (polled.isEmpty()) {
            return Next.again();
        }
        long started = ticker.nanoTime();
        List<ConsumerRecord<String, byte[]>> records = new ArrayList<>(polled.count());
        polled.forEach(records::add);
        Counts counts;
        try {
            counts = store.process(records);
            databaseOk = true;
        } catch (BatchProcessor.EffectFailure e) {
            log.warn(
                    "Effect failed in a batch of {} records; retrying them one at a time: {}",
                    records.size(),
                    Faults.describe(e));
            inHand = new InHand(polled, records, started);
            return nextRecord();
        } catch (RuntimeException e) {
            return databaseFault(polled, records.size(), e);
        }
        return finish(polled, records.size(), counts, started);
    }

    /** One attempt at the next record of the batch in hand. */
    private Next nextRecord() {
        InHand h = inHand;
        ConsumerRecord<String, byte[]> record = h.records.get(h.index);
        try {
            try {
                h.done(store.process(List.of(record)));
                databaseOk = true;
            } catch (BatchProcessor.EffectFailure e) {
                h.attempt++;
                log.debug("Effect attempt {} of {} failed for {}", h.attempt, maxAttempts, Records.describe(record));
                if (h.attempt < maxAttempts) {
                    return Next.backOff(
                            ticker.nanoTime() + attemptBackoff.toNanos(),
                            "effect attempt " + h.attempt + " of " + maxAttempts + " failed");
                }
                h.done(store.giveUp(
                        record, "effect failed " + maxAttempts + " times: " + Faults.describe(e.getCause())));
            }
        } catch (RuntimeException e) {
            inHand = null;
            return databaseFault(h.polled, h.records.size(), e);
        }
        if (h.index < h.records.size()) {
            return Next.again();
        }
        inHand = null;
        return finish(h.polled, h.records.size(), h.total, h.startedNanos);
    }

    private Next databaseFault(ConsumerRecords<String, byte[]> polled, int size, RuntimeException e) {
        databaseOk = false;
        failures.increment();
        log.warn("Batch of {} records rolled back, will be retried: {}", size, Faults.describe(e));
        for (TopicPartition tp : polled.partitions()) {
            kafka.seek(tp, polled.records(tp).get(0).offset());
        }
        return Next.backOff(
                ticker.nanoTime() + backoff.nextNanos(),
                "database: " + e.getClass().getSimpleName());
    }

    /** The batch is in the database: count it and commit its offsets. */
    private Next finish(ConsumerRecords<String, byte[]> polled, int size, Counts counts, long started) {
        backoff.reset();
        applied.increment(counts.applied());
        duplicates.increment(counts.duplicates());
        stale.increment(counts.rejected());
        deadLettered.increment(counts.deadLettered());
        unauthenticated.increment(counts.unauthenticated());
        late.increment(counts.late());
        reused.increment(counts.reused());
        parked.increment(counts.waiting());
        try {
            committer.commit(kafka, nextOffsets(polled));
        } catch (KafkaException e) {
            // The database has the outcome; the records come again and are found processed.
            failures.increment();
            log.warn("Offset commit failed; the batch will be redelivered and deduplicated: {}", Faults.describe(e));
        }
        long elapsed = ticker.nanoTime() - started;
        batchLatency.record(elapsed, TimeUnit.NANOSECONDS);
        Map<String, Object> batch = new LinkedHashMap<>();
        batch.put("records", size);
        batch.put("applied", counts.applied());
        batch.put("duplicates", counts.duplicates());
        batch.put("staleRejected", counts.rejected());
        batch.put("deadLettered", counts.deadLettered());
        batch.put("unauthenticated", counts.unauthenticated());
        batch.put("late", counts.late());
        batch.put("reused", counts.reused());
        batch.put("waiting", counts.waiting());
        batch.put("millis", elapsed / 1e6);
        batch.put("finishedAt", Instant.now().toString());
        lastBatch = batch;
        return Next.again();
    }

    private static Map<TopicPartition, OffsetAndMetadata> nextOffsets(ConsumerRecords<String, byte[]> records) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : records.partitions()) {
            List<ConsumerRecord<String, byte[]>> list = records.records(tp);
            offsets.put(tp, new OffsetAndMetadata(list.get(list.size() - 1).offset() + 1));
        }
        return offsets;
    }

    private void updateLagAndAssignment() {
        long total = 0;
        List<String> assigned = new ArrayList<>();
        for (TopicPartition tp : kafka.assignment()) {
            assigned.add(tp.toString());
            total += kafka.currentLag(tp).orElse(0);
        }
        lag.set(total);
        assignment = assigned;
    }

    boolean healthy() {
        return databaseOk && health.healthy();
    }

    long lag() {
        return lag.get();
    }

    /** The effects applied since the loop started. */
    long applied() {
        return (long) applied.count();
    }

    /** The loop's entries for the status JSON. */
    Map<String, Object> status() {
        Map<String, Object> status = new LinkedHashMap<>();
        status.put("kafka", health.state());
        status.put("assignment", assignment);
        status.put("lag", lag.get());
        status.put("applied", (long) applied.count());
        status.put("duplicates", (long) duplicates.count());
        status.put("staleRejected", (long) stale.count());
        status.put("deadLettered", (long) deadLettered.count());
        status.put("unauthenticated", (long) unauthenticated.count());
        status.put("late", (long) late.count());
        status.put("reused", (long) reused.count());
        return status;
    }

    long putToWait() {
        return (long) parked.count();
    }

    Map<String, Object> lastBatch() {
        return lastBatch;
    }
}
