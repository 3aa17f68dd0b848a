package dev.fencedjobs.relay;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.lease.Grants;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.internal.Backoff;
import dev.fencedjobs.runtime.internal.Envelope;
import dev.fencedjobs.runtime.internal.Faults;
import dev.fencedjobs.runtime.internal.KafkaHealth;
import dev.fencedjobs.runtime.internal.LeaderService;
import dev.fencedjobs.runtime.internal.Next;
import dev.fencedjobs.runtime.internal.PurgeSchedule;
import dev.fencedjobs.runtime.internal.Purger;
import dev.fencedjobs.runtime.internal.ReadCache;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.runtime.internal.TraceContext;
import dev.fencedjobs.runtime.internal.Tracing;
import dev.fencedjobs.runtime.internal.Wakeup;
import io.micrometer.core.instrument.MeterRegistry;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.slf4j.MDC;

/**
 * The relay leader's loop:
 *
 * <ol>
 *   <li>read up to a batch of unpublished outbox rows in id (commit) order;
 *   <li>send them with one flush (key: resource; value: the {@link Envelope}); a row too
 *       large to send is set aside with its reason instead of blocking the rest;
 *   <li>once the broker has acknowledged every record, mark the rows published in a
 *       transaction guarded by the relay lease. A failed guard marks nothing and steps down; the
 *       next leader sends those rows again, and consumers drop the duplicates.
 * </ol>
 *
 * <p>Kafka down: nothing is marked, the loop backs off and retries the same rows. Idle: it waits
 * for an {@code outbox_inserted} notification or the poll interval. Each pass is one {@link
 * #step()}, which answers what to do next ({@link Next}); {@link Next#drive} is the thread around it.
 */
final class RelayLoop implements LeaderService.Worker {

    private static final Logger log = LoggerFactory.getLogger(RelayLoop.class);
    static final int PURGE_LIMIT = 5_000;
    /** How long the loop's stop waits for a purge delete in flight. */
    private static final Duration PURGER_STOP = Duration.ofSeconds(5);

    private final RelayConfig config;
    private final Tracing tracing;
    private final Grants leadership;
    private final OutboxStore store;
    private final Publisher publisher;
    private final Ticker ticker;
    private final Wakeup wakeup = new Wakeup();
    private final Backoff backoff = new Backoff(Duration.ofMillis(100), Duration.ofSeconds(5));
    private volatile boolean running = true;
    private final Purger purger;
    /** The token the publisher was last made ready for; null while not leading. */
    private FencingToken preparedToken;
    /** The first stand-by as a follower, or the first preparation as leader, has run: ready to lead. */
    private volatile boolean warmedUp;

    /** Its shard, as an {@code outbox_inserted} notification names it. */
    private final String shardName;

    /** Kafka's health, one for the replica: its shards' loops share it, so a fault is logged once. */
    private final KafkaHealth kafka;

    private volatile Map<String, Object> lastBatch;

    private final RelayMeters meters;

    RelayLoop(
            RelayConfig config,
            Grants leadership,
            OutboxStore store,
            Publisher publisher,
            Ticker ticker,
            MeterRegistry registry,
            Tracing tracing) {
        this(config, leadership, store, publisher, ticker, registry, tracing, 0, kafkaHealth());
    }

    /** The Kafka health a replica's shard loops share. */
    static KafkaHealth kafkaHealth() {
        return new KafkaHealth(log, "relay", "nothing marked, the rows stay in the outbox and are retried");
    }

    /** The loop of one shard (docs/shards.md); shard 0's also purges published rows of every shard. */
    RelayLoop(
            RelayConfig config,
            Grants leadership,
            OutboxStore store,
            Publisher publisher,
            Ticker ticker,
            MeterRegistry registry,
            Tracing tracing,
            int shard,
            KafkaHealth kafka) {
        this.shardName = Integer.toString(shard);
        this.config = config;
        this.kafka = kafka;
        this.tracing = tracing;
        this.leadership = leadership;
        this.store = store;
        this.publisher = publisher;
        this.ticker = ticker;
        PurgeSchedule purges = new PurgeSchedule(PURGE_LIMIT, config.retention(), ticker);
        this.meters = new RelayMeters(registry, new ReadCache<>(store::lag, ticker), shard);
        boolean purges0 = shard == 0;
        // Published rows past their retention, oldest first, on a thread beside the loop's (a slow delete holds up no
        // batch).
        this.purger = new Purger(
                "relay-purge" + (shard == 0 ? "" : "-" + shard),
                purges,
                () -> purges0 && leadership.current().isPresent(),
                () -> store.purgePublished(config.retention(), purges.chunk()),
                purged -> log.debug(
                        "Purged {} published outbox rows completed more than {} ago", purged, config.retention()),
                e -> log.warn("Purging published outbox rows failed: {}", Faults.describe(e)));
        leadership.onChange(wakeup::signal);
        leadership.onChange(purger::wake);
    }

    /**
     * An {@code outbox_inserted} notification names the shard whose rows were written (R__outbox.sql):
     * another shard's wakes this loop for nothing, a read of its shard that finds no row.
     */
    @Override
    public void onNotification(String channel, String payload) {
        if (wakes(channel, payload, shardName)) {
            wakeup.signal();
        }
    }

    /** Whether a notification wakes the loop of shard {@code shard}: not one of another shard's new rows. */
    static boolean wakes(String channel, String payload, String shard) {
        return !Relay.OUTBOX_INSERTED.equals(channel) || payload.isEmpty() || payload.equals(shard);
    }

    @Override
    public void onListenerConnected() {
        wakeup.signal();
    }

    @Override
    public void stop() {
        running = false;
        wakeup.signal();
    }

    @Override
    public void run() {
        purger.start();
        try {
            Next.drive(this::step, wakeup, ticker);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            purger.close(PURGER_STOP);
            publisher.close();
            MDC.clear();
        }
    }

    /**
     * One step: no grant, drop the producer and wait for one; a new grant, get the publisher ready
     * for its token; then one batch. A batch shorter than the batch size sleeps for the poll
     * interval (an {@code outbox_inserted} notification ends it); a full one goes again.
     */
    Next step() {
        if (!running) {
            return Next.stopped();
        }
        Optional<Grant> current = leadership.current();
        if (current.isEmpty()) {
            MDC.clear();
            publisher.standBy();
            preparedToken = null;
            warmedUp = true;
            return Next.await();
        }
        Grant grant = current.get();
        MDC.put("role", grant.role());
        MDC.put("token", String.valueOf(grant.token()));
        if (!grant.token().equals(preparedToken)) {
            try {
                publisher.prepare(grant.token());
                preparedToken = grant.token();
                warmedUp = true;
                kafka.succeeded();
            } catch (RuntimeException e) {
                return kafkaFailed(e);
            }
        }
        return relayBatch(grant);
    }

    /** One batch under {@code grant}: read the unpublished rows, send them, mark them under the guard. */
    private Next relayBatch(Grant grant) {
        long started = ticker.nanoTime();
        List<OutboxStore.OutboxRow> rows;
        try {
            rows = store.unpublished(config.batchSize());
        } catch (RuntimeException e) {
            return databaseFault(grant, "reading the outbox", e);
        }
        if (rows.isEmpty()) {
            return Next.sleepUntil(ticker.nanoTime() + config.pollInterval().toNanos());
        }
        Outgoing out = outgoing(rows);
        if (leadership.current().filter(g -> g.token().equals(grant.token())).isEmpty()) {
            // The grant lapsed while the rows were read (a pause, a stall): send nothing. The next
            // leader sends them. A pause after this check can still let a resumed former leader
            // send a batch again; consumers drop such duplicates, and its mark fails the guard.
            log.info("Lease lapsed while reading {} rows; sending none of them", rows.size());
            return Next.again();
        }
        Next failed = send(grant, rows, out.records());
        if (failed != null) {
            return failed;
        }
        boolean held;
        try {
            held = store.markPublished(grant, out.ids(), out.tooLarge());
        } catch (RuntimeException e) {
            return databaseFault(grant, "marking published rows", e);
        }
        if (!held) {
            meters.guardRejections.increment();
            publisher.reset();
            String reason = "lease guard rejected token " + grant.token() + "; "
                    + out.ids().size() + " sent rows stay unmarked and will be sent again by the next leader";
            leadership.stepDown(grant, reason);
            return Next.steppedDown(reason);
        }
        backoff.reset();
        published(grant, rows, out, ticker.nanoTime() - started);
        return rows.size() < config.batchSize()
                ? Next.sleepUntil(ticker.nanoTime() + config.pollInterval().toNanos())
                : Next.again();
    }

    /** A batch's rows as records to send and their ids, and the rows too large to send, each with why. */
    private record Outgoing(List<ProducerRecord<String, byte[]>> records, List<Long> ids, Map<Long, String> tooLarge) {}

    private Outgoing outgoing(List<OutboxStore.OutboxRow> rows) {
        Outgoing out = new Outgoing(new ArrayList<>(rows.size()), new ArrayList<>(rows.size()), new LinkedHashMap<>());
        int overhead = 128 + RecordSignatures.headerBytes(rows.size());
        for (OutboxStore.OutboxRow row : rows) {
            ProducerRecord<String, byte[]> record = toRecord(row);
            int size = record.value().length + record.key().getBytes(StandardCharsets.UTF_8).length + overhead;
            if (size > config.maxRecordBytes()) {
                String reason =
                        "record of about " + size + " bytes exceeds MAX_RECORD_BYTES=" + config.maxRecordBytes();
                log.error(
                        "Outbox row {} (job {}, resource {}) not sent: {}; marked with publish_error",
                        row.id(),
                        row.jobId(),
                        row.resource(),
                        reason);
                out.tooLarge().put(row.id(), reason);
            } else {
                out.records().add(record);
                out.ids().add(row.id());
            }
        }
        return out;
    }

    /**
     * Sends the records, signed: one signature for each partition's share of the batch, made while
     * the share before it is on its way to the broker; each record carries its proof
     * (RecordSignatures). Null when sent; the back-off when Kafka failed.
     */
    private Next send(Grant grant, List<OutboxStore.OutboxRow> rows, List<ProducerRecord<String, byte[]>> records) {
        RecordTrust trust = config.kafka().trust();
        long signedAt = System.currentTimeMillis();
        Span span = sendSpan(grant, rows, records);
        try {
            if (!records.isEmpty()) {
                publisher.publish(
                        grant.token(),
                        RecordSignatures.trees(records, publisher.partitions()),
                        tree -> RecordSignatures.signTree(trust, signedAt, tree));
            }
            kafka.succeeded();
            return null;
        } catch (RuntimeException e) {
            span.recordException(e);
            span.setStatus(StatusCode.ERROR, "Kafka: " + e.getClass().getSimpleName());
            return kafkaFailed(e);
        } finally {
            span.end();
        }
    }

    /** A batch sent and marked: its meters, and the status page's last batch. */
    private void published(Grant grant, List<OutboxStore.OutboxRow> rows, Outgoing out, long elapsed) {
        meters.published.increment(out.ids().size());
        meters.rejected.increment(out.tooLarge().size());
        meters.batchLatency.record(elapsed, TimeUnit.NANOSECONDS);
        Map<String, Object> batch = new LinkedHashMap<>();
        batch.put("token", grant.token().value());
        batch.put("published", out.ids().size());
        batch.put("rejected", out.tooLarge().size());
        batch.put("lastOutboxId", rows.get(rows.size() - 1).id());
        batch.put("millis", elapsed / 1e6);
        batch.put("finishedAt", Instant.now().toString());
        lastBatch = batch;
    }

    /** Kafka failed: nothing is marked, and the loop waits out a back-off before it sends the same rows again. */
    private Next kafkaFailed(RuntimeException e) {
        meters.publishFailures.increment();
        kafka.failed(e);
        return Next.backOff(
                ticker.nanoTime() + backoff.nextNanos(),
                "Kafka: " + e.getClass().getSimpleName());
    }

    private Next databaseFault(Grant grant, String what, RuntimeException e) {
        meters.storeFailures.increment();
        log.warn("{} failed: {}", what, Faults.describe(e));
        String reason = what + " failed (" + e.getClass().getSimpleName() + ")";
        leadership.stepDown(grant, reason);
        return Next.backOff(ticker.nanoTime() + backoff.nextNanos(), reason);
    }

    /**
     * The batch's send span (messaging conventions: a "send" of a batch, kind PRODUCER), a root of
     * its own, linked to the context of every job in it that has one: a batch carries the jobs of
     * many producers' traces. Each record keeps its job's context in its headers, and the publisher
     * sends it with that context current, so a tracer that wraps the send (the Java agent) makes
     * its span in the job's trace.
     */
    private Span sendSpan(Grant grant, List<OutboxStore.OutboxRow> rows, List<ProducerRecord<String, byte[]>> records) {
        Span span = tracing.tracer()
                .spanBuilder("send " + config.kafka().topic())
                .setSpanKind(SpanKind.PRODUCER)
                .setNoParent()
                .setAttribute(Tracing.MESSAGING_SYSTEM, "kafka")
                .setAttribute(Tracing.DESTINATION, config.kafka().topic())
                .setAttribute(Tracing.OPERATION_TYPE, "send")
                .setAttribute(Tracing.OPERATION_NAME, "send")
                .setAttribute(Tracing.BATCH_COUNT, (long) records.size())
                .setAttribute(Tracing.LEASE_TOKEN, grant.token().value())
                .setAttribute(Tracing.FIRST_OUTBOX_ID, rows.get(0).id())
                .setAttribute(Tracing.LAST_OUTBOX_ID, rows.get(rows.size() - 1).id())
                .startSpan();
        if (span.isRecording()) {
            for (OutboxStore.OutboxRow row : rows) {
                if (row.trace() != null) {
                    SpanContext job = Tracing.producer(Tracing.jobContext(row.trace()));
                    if (job.isValid()) {
                        span.addLink(job, Attributes.of(Tracing.JOB_ID, row.jobId(), Tracing.OUTBOX_ID, row.id()));
                    }
                }
            }
        }
        return span;
    }

    private ProducerRecord<String, byte[]> toRecord(OutboxStore.OutboxRow row) {
        Envelope envelope = new Envelope(
                Envelope.VERSION,
                row.id(),
                row.jobId(),
                row.resource(),
                row.token(),
                row.payloadJson(),
                row.dueAt(),
                row.completedAt(),
                row.jobCreatedAt(),
                row.tokenHolder(),
                row.tokenAcquiredAt());
        ProducerRecord<String, byte[]> record =
                new ProducerRecord<>(config.kafka().topic(), row.resource(), envelope.toJson());
        record.headers().add(new RecordHeader(Envelope.JOB_ID_HEADER, Envelope.header(row.jobId())));
        record.headers()
                .add(new RecordHeader(
                        Envelope.TOKEN_HEADER, Envelope.header(row.token().value())));
        record.headers().add(new RecordHeader(Envelope.OUTBOX_ID_HEADER, Envelope.header(row.id())));
        record.headers().add(new RecordHeader(Envelope.VERSION_HEADER, Envelope.header(Envelope.VERSION)));
        if (row.trace() != null) {
            // The W3C headers OpenTelemetry's Kafka instrumentation reads: the producer's context, so a
            // consumer's span joins the trace the job was submitted in.
            record.headers()
                    .add(new RecordHeader(
                            TraceContext.TRACEPARENT_HEADER,
                            row.trace().traceparent().getBytes(StandardCharsets.US_ASCII)));
            if (row.trace().tracestate() != null && !row.trace().tracestate().isEmpty()) {
                record.headers()
                        .add(new RecordHeader(
                                TraceContext.TRACESTATE_HEADER,
                                row.trace().tracestate().getBytes(StandardCharsets.US_ASCII)));
            }
        }
        return record;
    }

    /**
     * Not ready while Kafka fails (what the relay leader exists to do cannot be done), nor before its
     * first stand-by: a follower that took over before its spare producer was up would wait for it.
     */
    @Override
    public boolean ready() {
        return kafka.healthy() && warmedUp;
    }

    @Override
    public Map<String, Object> status() {
        Map<String, Object> status = new LinkedHashMap<>();
        status.put("topic", config.kafka().topic());
        status.put("signatures", config.kafka().trust().describe());
        status.put("batchSize", config.batchSize());
        status.put("kafka", kafka.state());
        status.put("warmedUp", warmedUp);
        try {
            OutboxStore.Lag l = meters.lag.get();
            status.put("unpublishedRows", l.rows());
            status.put("oldestUnpublishedSeconds", l.oldestSeconds());
        } catch (RuntimeException e) {
            status.put("unpublishedRows", "unknown: " + Faults.describe(e));
        }
        Map<String, Object> b = lastBatch;
        if (b != null) {
            status.put("lastBatch", b);
        }
        return status;
    }
}
