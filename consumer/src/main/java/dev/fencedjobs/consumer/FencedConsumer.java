package dev.fencedjobs.consumer;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.ServiceBuilder;
import dev.fencedjobs.runtime.internal.Dashboard;
import dev.fencedjobs.runtime.internal.Embedding;
import dev.fencedjobs.runtime.internal.Faults;
import dev.fencedjobs.runtime.internal.LatencyWindow;
import dev.fencedjobs.runtime.internal.PurgeSchedule;
import dev.fencedjobs.runtime.internal.Purger;
import dev.fencedjobs.runtime.internal.RecordVerifier;
import dev.fencedjobs.runtime.internal.ServiceRuntime;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.IntConsumer;
import java.util.function.IntSupplier;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.jooq.DSLContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One consumer instance: its {@link ConsumerLoop} on a thread of its own (poll a batch, handle it
 * in one transaction of its own database with {@link BatchProcessor}, then commit the Kafka
 * offsets; effects that throw, database and Kafka faults as that class says), the purge, replay
 * and patient-retry threads beside it, on a {@link ServiceRuntime}.
 *
 * <ul>
 *   <li>Auto-commit is off; {@code isolation.level=read_committed}, so that records of an aborted
 *       transaction from any other writer of the topic are never applied (the relay itself does
 *       not use transactions, and its records are read as soon as the broker acknowledged them).
 * </ul>
 */
public final class FencedConsumer implements RunningService {

    private static final Logger log = LoggerFactory.getLogger(FencedConsumer.class);
    private static final int PURGE_CHUNK = 5_000;
    /** How long the stop waits for a purge delete in flight. */
    private static final Duration PURGER_STOP = Duration.ofSeconds(5);
    /** How often the replayer looks for dead letters an operator asked to replay. */
    public static final Duration REPLAY_POLL = Duration.ofSeconds(5);
    /** How often the retrier looks for a waiting record whose next attempt is due. */
    static final Duration RETRY_POLL = Duration.ofSeconds(1);
    /** The consumer's own schema and Flyway history, apart from the dispatcher's. */
    public static final String MIGRATIONS = "classpath:db/consumer";

    public static final String HISTORY_TABLE = "consumer_schema_history";

    /** Commits the offsets of a handled batch: {@code commitSync}. */
    static final ConsumerLoop.OffsetCommitter COMMIT_SYNC = Consumer::commitSync;

    private final ConsumerConfig config;
    private final ServiceRuntime runtime;
    private final DSLContext dsl;
    private final BatchProcessor processor;
    private final KafkaConsumer<String, byte[]> consumer;
    private final ConsumerLoop loop;
    private final Thread thread;
    private final AtomicBoolean running = new AtomicBoolean(true);
    private final CountDownLatch terminated = new CountDownLatch(1);
    private final PurgeSchedule purges;
    private final Purger purger;
    /** Replays the dead letters an operator asked for, beside the loop: one at a time, every few seconds while none is asked. */
    private final Purger replayer;

    private final Counter replayed;
    /** Tries again the records waiting for a patient retry, beside the loop. */
    private final Purger retrier;

    private final PatientRetries patient;
    private final ProcessSpans spans;
    /** Each job the loop applied: from its due time to its batch's commit, for the dashboard. */
    private final DueToEffect dueToEffect;

    private FencedConsumer(
            ConsumerConfig config,
            Embedding embedding,
            Effect effect,
            ConsumerLoop.OffsetCommitter committer,
            Ticker ticker) {
        this.config = config;
        // On the shorter of the two retentions.
        this.purges = new PurgeSchedule(
                PURGE_CHUNK, Collections.min(List.of(config.processedRetention(), config.recordsRetention())), ticker);
        this.runtime = ServiceRuntime.open("consumer", config.service(), embedding, MIGRATIONS, HISTORY_TABLE);
        logStart(config, runtime);
        MeterRegistry registry = runtime.registry();
        try {
            this.dsl = runtime.dsl();
            this.processor =
                    new BatchProcessor(effect, new RecordVerifier(config.kafka().trust(), config.processedRetention()));
            this.spans = new ProcessSpans(embedding.tracing(), config.groupId());
            this.dueToEffect = new DueToEffect(spans, new LatencyWindow());
            this.patient = patientRetries(config, embedding, ticker);
            this.consumer =
                    new KafkaConsumer<>(consumerProperties(), new StringDeserializer(), new ByteArrayDeserializer());
            this.loop = new ConsumerLoop(
                    consumer,
                    new ConsumerStore(config, dsl, processor, spans, dueToEffect, patient),
                    committer,
                    config.effectMaxAttempts(),
                    config.effectRetryBackoff(),
                    ticker,
                    registry);
            runtime.serve(
                    this::ready,
                    this::status,
                    new Dashboard.ConsumerSide(loop::lag, loop::applied, dueToEffect.window()));
        } catch (RuntimeException e) {
            runtime.close();
            throw e;
        }
        this.thread = new Thread(this::run, "consumer-loop");
        this.purger = beside(
                "consumer-purge",
                purges,
                new ConsumerRetention(dsl, config, PURGE_CHUNK)::purgeOnce,
                rows -> {},
                "Purging processed job ids and records failed");
        this.replayed = Counter.builder("fencedjobs_consumer_dead_letters_replayed")
                .description("dead letters replayed on an operator's request (fenced-jobs dead-letters replay)")
                .register(registry);
        DeadLetterReplay replay =
                new DeadLetterReplay(dsl, processor, new ProcessSpans(embedding.tracing(), config.groupId()));
        this.retrier = beside(
                "consumer-retry",
                new PurgeSchedule(1, RETRY_POLL.multipliedBy(2), ticker),
                patient::retryOne,
                n -> {},
                "A patient retry failed with a database error");
        this.replayer = beside(
                "consumer-replay",
                new PurgeSchedule(1, REPLAY_POLL.multipliedBy(2), ticker),
                replay::replayOne,
                replayed::increment,
                "Replaying a dead letter failed");
    }

    private PatientRetries patientRetries(ConsumerConfig config, Embedding embedding, Ticker ticker) {
        return new PatientRetries(
                dsl,
                processor,
                config.retries(),
                config.effectRetryBackoff(),
                () -> ThreadLocalRandom.current().nextDouble(),
                ticker,
                new ProcessSpans(embedding.tracing(), config.groupId()));
    }

    private static void logStart(ConsumerConfig config, ServiceRuntime runtime) {
        log.info(
                "Consumer starting: group {} ({} protocol), topic {} at {} {}, database {}",
                config.groupId(),
                config.membership().protocol(),
                config.kafka().topic(),
                config.kafka().bootstrapServers(),
                config.kafka().redactedClient(),
                runtime.describeDatabase());
        RecordTrust trust = config.kafka().trust();
        log.info(
                "Applying only records signed by a trusted relay key {}{}",
                new TreeSet<>(trust.trusted().keySet()),
                trust.mode() == RecordTrust.Mode.ACCEPT_UNSIGNED
                        ? ", or unsigned (RECORD_SIGNATURES=accept-unsigned: a rollout; unsigned records can be forged)"
                        : "");
    }

    /** A thread beside the loop's, doing {@code work} on {@code schedule} while the consumer runs; a failure is logged and tried again. */
    private Purger beside(String name, PurgeSchedule schedule, IntSupplier work, IntConsumer done, String failure) {
        return new Purger(
                name,
                schedule,
                running::get,
                work,
                done,
                e -> log.warn("{}; next try in {}: {}", failure, schedule.idleInterval(), Faults.describe(e)));
    }

    /**
     * A consumer with every setting of {@code config} ({@link ConsumerConfig#from} reads them from the
     * environment): its own pool, registry and ops endpoint, as {@code ConsumerMain} runs it with the
     * {@link LedgerEffect}.
     */
    public static Builder builder(ConsumerConfig config, Effect effect) {
        return Builder.of(config, effect);
    }

    /**
     * A consumer to embed in an application: {@code effect} applied once per job, records from
     * {@code kafka}'s topic in group {@code groupId}. No ops endpoint unless asked.
     */
    public static Builder builder(KafkaSettings kafka, String groupId, Effect effect) {
        return new Builder(kafka, groupId, effect);
    }

    static FencedConsumer start(
            ConsumerConfig config,
            Embedding embedding,
            Effect effect,
            ConsumerLoop.OffsetCommitter committer,
            Ticker ticker) {
        FencedConsumer c = new FencedConsumer(config, embedding, effect, committer, ticker);
        c.thread.start();
        c.purger.start();
        c.replayer.start();
        c.retrier.start();
        return c;
    }

    private Properties consumerProperties() {
        Properties p = new Properties();
        p.put(org.apache.kafka.clients.consumer.ConsumerConfig.CLIENT_ID_CONFIG, "fenced-jobs-consumer");
        config.membership().applyTo(p);
        // KAFKA_CLIENT_PROPERTIES and KAFKA_SSL_*/KAFKA_SASL_* may change the above, never what follows.
        p.putAll(config.kafka().clientProperties());
        p.put(org.apache.kafka.clients.consumer.ConsumerConfig.GROUP_ID_CONFIG, config.groupId());
        p.put(org.apache.kafka.clients.consumer.ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(org.apache.kafka.clients.consumer.ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(org.apache.kafka.clients.consumer.ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(org.apache.kafka.clients.consumer.ConsumerConfig.MAX_POLL_RECORDS_CONFIG, config.batchSize());
        return p;
    }

    private void run() {
        try {
            consumer.subscribe(List.of(config.kafka().topic()), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    log.info("Partitions revoked: {}", partitions);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    log.info("Partitions assigned: {}", partitions);
                }
            });
            loop.run();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            try {
                consumer.close(CloseOptions.timeout(Duration.ofSeconds(5)));
            } catch (RuntimeException e) {
                log.debug("closing the Kafka consumer: {}", e.toString());
            }
        }
    }

    @Override
    public boolean ready() {
        return loop.healthy() && running.get();
    }

    @Override
    public State state() {
        return running.get() ? State.RUNNING : State.STOPPED;
    }

    @Override
    public int httpPort() {
        return runtime.httpPort();
    }

    @Override
    public Map<String, Object> status() {
        Map<String, Object> status = new LinkedHashMap<>();
        status.put("service", "consumer");
        status.put("group", config.groupId());
        status.put("topic", config.kafka().topic());
        status.put("signatures", config.kafka().trust().describe());
        status.put("ready", ready());
        status.putAll(loop.status());
        status.put("deadLettersReplayed", (long) replayed.count());
        Map<String, Object> retry = new LinkedHashMap<>();
        retry.put("maxAge", config.retries().maxAge().toString());
        retry.put("putToWait", loop.putToWait());
        retry.put("succeeded", patient.succeeded());
        retry.put("deadLettered", patient.deadLettered());
        status.put("patientRetries", retry);
        Map<String, Object> b = loop.lastBatch();
        if (b != null) {
            status.put("lastBatch", b);
        }
        return status;
    }

    @Override
    public void awaitTermination() throws InterruptedException {
        terminated.await();
    }

    @Override
    public boolean awaitTermination(Duration timeout) throws InterruptedException {
        return terminated.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
    }

    /** Finishes the batch in hand (database and offsets), leaves the group, and stops. */
    @Override
    public void close() {
        if (!running.compareAndSet(true, false)) {
            return;
        }
        log.info("Consumer stopping: finishing the batch in hand");
        loop.stop();
        try {
            thread.join(config.service().shutdownTimeout().toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        replayer.close(PURGER_STOP);
        retrier.close(PURGER_STOP);
        purger.close(PURGER_STOP);
        runtime.close();
        log.info("Consumer stopped");
        terminated.countDown();
    }

    /** Builds a {@link FencedConsumer}; each setting as its environment variable in docs/consumer.md. */
    public static final class Builder extends ServiceBuilder<Builder> {

        private final KafkaSettings kafka;
        private final String groupId;
        private final Effect effect;
        private int batchSize = ConsumerConfig.DEFAULT_BATCH_SIZE;
        private int effectMaxAttempts = ConsumerConfig.DEFAULT_EFFECT_MAX_ATTEMPTS;
        private Duration effectRetryBackoff = ConsumerConfig.DEFAULT_EFFECT_RETRY_BACKOFF;
        private Duration processedRetention = ConsumerConfig.DEFAULT_PROCESSED_RETENTION;
        private Duration recordsRetention = ConsumerConfig.DEFAULT_RECORDS_RETENTION;
        private GroupMembership membership = GroupMembership.DEFAULT;
        private EffectRetries retries = EffectRetries.DEFAULT;

        private static Builder of(ConsumerConfig config, Effect effect) {
            Builder b = new Builder(config.kafka(), config.groupId(), effect);
            b.service(config.service());
            b.batchSize = config.batchSize();
            b.effectMaxAttempts = config.effectMaxAttempts();
            b.effectRetryBackoff = config.effectRetryBackoff();
            b.processedRetention = config.processedRetention();
            b.recordsRetention = config.recordsRetention();
            b.membership = config.membership();
            b.retries = config.retries();
            return b;
        }

        private Builder(KafkaSettings kafka, String groupId, Effect effect) {
            this.kafka = Objects.requireNonNull(kafka, "kafka");
            this.groupId = groupId;
            this.effect = Objects.requireNonNull(effect, "effect");
        }

        /** {@code BATCH_SIZE}: records per poll and per transaction. */
        public Builder batchSize(int batchSize) {
            this.batchSize = batchSize;
            return this;
        }

        /** {@code EFFECT_MAX_ATTEMPTS} quick tries, {@code EFFECT_RETRY_BACKOFF} apart. */
        public Builder effectAttempts(int maxAttempts, Duration backoff) {
            this.effectMaxAttempts = maxAttempts;
            this.effectRetryBackoff = backoff;
            return this;
        }

        /** Patient retries after the quick ones ({@link EffectRetries#OFF} dead-letters at once). */
        public Builder retries(EffectRetries retries) {
            this.retries = retries;
            return this;
        }

        /** {@code PROCESSED_RETENTION} and {@code RECORDS_RETENTION}. */
        public Builder retention(Duration processed, Duration records) {
            this.processedRetention = processed;
            this.recordsRetention = records;
            return this;
        }

        /** Group protocol and the timings of a dead member's partitions moving. */
        public Builder membership(GroupMembership membership) {
            this.membership = membership;
            return this;
        }

        /**
         * Validates (a {@link dev.fencedjobs.db.ConfigException} names the bad setting), migrates the
         * consumer's tables (in the lent pool's database too), and starts consuming.
         */
        public FencedConsumer start() {
            ConsumerConfig config = new ConsumerConfig(
                    serviceConfig(false),
                    kafka,
                    groupId,
                    batchSize,
                    effectMaxAttempts,
                    effectRetryBackoff,
                    processedRetention,
                    membership,
                    recordsRetention,
                    retries);
            return FencedConsumer.start(config, embedding(), effect, COMMIT_SYNC, Ticker.system());
        }
    }
}
