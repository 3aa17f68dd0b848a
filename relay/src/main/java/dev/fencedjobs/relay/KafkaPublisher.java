package dev.fencedjobs.relay;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.internal.Faults;
import dev.fencedjobs.runtime.internal.Tracing;
import io.opentelemetry.context.Scope;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * An idempotent producer ({@code acks=all}) that keeps each partition's records in the order they
 * were handed to it, whatever the broker does. A batch is sent, flushed once, and succeeds only if
 * the broker acknowledged every record. Each leadership token gets a fresh producer.
 *
 * <p>Order rests on two rules, not on the broker's sequence checks:
 *
 * <ol>
 *   <li><b>One request in flight per broker</b> ({@code max.in.flight.requests.per.connection=1}),
 *       so a partition never has a second request on the wire while an earlier one can still
 *       fail. Brokers before Kafka 4.5 accept any first sequence number from a producer they hold
 *       no state for (KAFKA-15591): with five in flight, a fresh producer's second request can be
 *       appended while its first is refused ({@code NOT_LEADER_OR_FOLLOWER} on a new topic or a
 *       moved leader), and the first then fails for good with {@code OUT_OF_ORDER_SEQUENCE_NUMBER}.
 *   <li><b>Nothing is sent after a failed record.</b> The first record that fails closes the
 *       producer at once from the callback ({@code close(0)} on the I/O thread), which aborts every
 *       record not yet sent, so a later record of the same partition cannot land without it. The
 *       caller sends the whole batch again with a fresh producer; what landed before the failure
 *       is a prefix of each partition's records, and the repeat brings second copies after it.
 * </ol>
 *
 * <p>Not transactional, on purpose: what an acknowledged non-transactional record needs to be
 * readable is only that it is in the log. A transactional record also needs its commit marker on
 * every partition, and the fault-injection suite once saw a committed batch's records on one
 * partition that {@code read_committed} readers never received (docs/relay.md). Duplicates
 * that a resumed former relay may send are absorbed by the consumer's dedup by job id, which
 * at-least-once delivery needs anyway.
 */
final class KafkaPublisher implements Publisher {

    private static final Logger log = LoggerFactory.getLogger(KafkaPublisher.class);
    private static final Duration TIMEOUT = Duration.ofSeconds(10);

    private final RelayConfig config;
    private KafkaProducer<String, byte[]> producer;
    /** The token the producer belongs to; null with a producer: a spare that no token has taken yet. */
    private FencingToken producerToken;

    private boolean topicReady;
    /** The topic's partitions, as the current producer first learned them. */
    private int partitions = 1;

    /** Whether a tracer may wrap send(): the job's context is made current around it only then. */
    private final Tracing tracing;

    KafkaPublisher(RelayConfig config, Tracing tracing) {
        this.config = config;
        this.tracing = tracing;
        log.info(
                "Publishing to topic {} at {} {}, {}",
                config.kafka().topic(),
                config.kafka().bootstrapServers(),
                config.kafka().redactedClient(),
                config.kafka()
                        .trust()
                        .signingKeyId()
                        .map(id -> "each batch signed with key " + id)
                        .orElse(
                                "UNSIGNED (RECORD_SIGNATURES=accept-unsigned and no RECORD_SIGNING_KEY): consumers cannot tell these records from forged ones"));
    }

    @Override
    public void prepare(FencingToken token) {
        try {
            ready(token);
        } catch (KafkaException | ExecutionException | TimeoutException e) {
            throw new PublishException("getting ready to publish failed: " + Faults.describe(e), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new PublishException("interrupted while getting ready to publish", e);
        }
    }

    /**
     * A follower's spare producer: started, its producer id fetched and its connections made while
     * following, then taken by the next token. A fresh idempotent producer that nobody has sent
     * with is as good as one made at the takeover; it only saves a cold start (measured: the first
     * publish of a relay that took over waited 1.6 s for its producer without it).
     */
    @Override
    public void standBy() {
        if (producer != null && producerToken != null) {
            reset();
        }
        try {
            if (!topicReady) {
                ensureTopic();
            }
            if (producer == null) {
                startProducer(null);
            }
        } catch (KafkaException | ExecutionException | TimeoutException e) {
            log.debug("Standing by to publish failed, preparing again when leading: {}", Faults.describe(e));
            reset();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void ready(FencingToken token) throws InterruptedException, ExecutionException, TimeoutException {
        if (!topicReady) {
            ensureTopic();
        }
        if (producer != null && producerToken == null) {
            producerToken = token;
            log.info("Kafka producer ready for token {} (started while following)", token);
        }
        if (producer == null || !token.equals(producerToken)) {
            reset();
            startProducer(token);
            log.info("Kafka producer ready for token {}", token);
        }
    }

    /** A producer for {@code token} (null: a spare), with the topic's metadata fetched: its partition count. */
    private void startProducer(FencingToken token) {
        producer = new KafkaProducer<>(producerProperties(), new StringSerializer(), new ByteArraySerializer());
        producerToken = token;
        partitions = producer.partitionsFor(config.kafka().topic()).size();
    }

    @Override
    public int partitions() {
        return partitions;
    }

    @Override
    public void publish(FencingToken token, List<ProducerRecord<String, byte[]>> records) {
        publish(token, List.of(records), group -> {});
    }

    @Override
    public void publish(
            FencingToken token,
            List<List<ProducerRecord<String, byte[]>>> groups,
            Consumer<List<ProducerRecord<String, byte[]>>> beforeSending) {
        int size = groups.stream().mapToInt(List::size).sum();
        try {
            ready(token);
            KafkaProducer<String, byte[]> current = producer;
            StopAtFirstFailure stop = new StopAtFirstFailure(current);
            List<Future<RecordMetadata>> sent = new ArrayList<>(size);
            boolean traced = tracing.installed();
            sending:
            for (List<ProducerRecord<String, byte[]>> group : groups) {
                beforeSending.accept(group);
                for (ProducerRecord<String, byte[]> record : group) {
                    if (stop.failed()) {
                        break sending;
                    }
                    Future<RecordMetadata> f;
                    if (traced) {
                        // With the job's context current, a tracer that wraps send() (the Java agent) makes its span in
                        // the
                        // job's trace, and the headers it writes carry that trace on.
                        try (Scope job = Tracing.jobContext(record.headers()).makeCurrent()) {
                            f = current.send(record, stop);
                        }
                    } else {
                        f = current.send(record, stop);
                    }
                    // send() waits up to max.block.ms for metadata and then returns an already failed
                    // future instead of throwing: stop at the first one, or a batch against a dead
                    // broker would wait max.block.ms for every record.
                    if (f.isDone()) {
                        f.get();
                    }
                    sent.add(f);
                }
            }
            if (stop.failed()) {
                throw new ExecutionException(stop.cause());
            }
            // One flush per batch; every future is complete afterwards. Any failed record fails the
            // batch: nothing is marked and the whole batch is sent again.
            current.flush();
            for (Future<RecordMetadata> f : sent) {
                f.get(0, TimeUnit.MILLISECONDS);
            }
        } catch (KafkaException | ExecutionException | TimeoutException | IllegalStateException e) {
            // IllegalStateException: send() or flush() after the first failure closed the producer.
            reset();
            throw new PublishException("publishing " + size + " records failed: " + Faults.describe(e), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            reset();
            throw new PublishException("interrupted while publishing", e);
        }
    }

    private void ensureTopic() throws InterruptedException, ExecutionException, TimeoutException {
        Properties adminProperties = new Properties();
        adminProperties.put("request.timeout.ms", (int) TIMEOUT.toMillis());
        adminProperties.put("default.api.timeout.ms", (int) TIMEOUT.toMillis());
        adminProperties.putAll(config.kafka().clientProperties());
        try (Admin admin = Admin.create(adminProperties)) {
            try {
                // An acks=all write is acknowledged once min.insync.replicas have it: 2 of 3 survives
                // the loss of any one broker and keeps taking writes while one is down.
                int minInsync = config.replication() >= 3 ? 2 : 1;
                NewTopic topic = new NewTopic(config.kafka().topic(), config.partitions(), config.replication())
                        .configs(Map.of("min.insync.replicas", Integer.toString(minInsync)));
                admin.createTopics(List.of(topic)).all().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                log.info(
                        "Created topic {} ({} partitions, replication {}, min.insync.replicas {})",
                        config.kafka().topic(),
                        config.partitions(),
                        config.replication(),
                        minInsync);
                if (config.replication() < 3) {
                    log.warn(
                            "Topic {} has {} replica(s): a broker down stops publishing, and a lost machine or disk loses "
                                    + "records it acknowledged; production clusters want KAFKA_TOPIC_REPLICATION=3",
                            config.kafka().topic(),
                            config.replication());
                }
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
            }
        }
        topicReady = true;
    }

    private Properties producerProperties() {
        Properties p = new Properties();
        p.put(ProducerConfig.LINGER_MS_CONFIG, 2);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, 256 * 1024);
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, RelayConfig.DEFAULT_COMPRESSION);
        p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, RelayConfig.PRODUCER_MAX_REQUEST_BYTES);
        // Faults surface within seconds, so the relay backs off instead of hanging in a call.
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, (int) TIMEOUT.toMillis());
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis());
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis() * 2);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "fenced-jobs-relay");
        // KAFKA_CLIENT_PROPERTIES and KAFKA_SSL_*/KAFKA_SASL_* may change the above, never what follows.
        p.putAll(config.kafka().clientProperties());
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        // One request in flight per broker: the ordering rule above.
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 1);
        return p;
    }

    @Override
    public void reset() {
        if (producer != null) {
            try {
                producer.close(Duration.ZERO);
            } catch (RuntimeException e) {
                log.debug("closing the producer: {}", e.toString());
            }
            producer = null;
            producerToken = null;
        }
    }

    @Override
    public void close() {
        reset();
    }

    /**
     * The send callback of one batch: the first failure closes the producer at once. Callbacks run
     * on the producer's I/O thread (the sender), where {@code close(0)} makes the sender leave its
     * loop before it drains another request and abort every record still queued; a partition's
     * later records are queued behind the failed one, never in flight beside it (one request in
     * flight), so none of them is sent.
     */
    private static final class StopAtFirstFailure implements Callback {
        private final KafkaProducer<String, byte[]> producer;
        private final AtomicReference<Exception> first = new AtomicReference<>();

        StopAtFirstFailure(KafkaProducer<String, byte[]> producer) {
            this.producer = producer;
        }

        @Override
        public void onCompletion(RecordMetadata metadata, Exception exception) {
            if (exception != null && first.compareAndSet(null, exception)) {
                log.debug(
                        "First failed record of the batch ({}); closing the producer so nothing after it is sent",
                        exception.toString());
                producer.close(Duration.ZERO);
            }
        }

        boolean failed() {
            return first.get() != null;
        }

        Exception cause() {
            return first.get();
        }
    }

    static final class PublishException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        PublishException(String message, Throwable cause) {
            super(message, cause);
        }
    }
}
