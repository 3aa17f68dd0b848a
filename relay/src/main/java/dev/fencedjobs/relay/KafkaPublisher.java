package dev.fencedjobs.relay;

import dev.fencedjobs.runtime.Faults;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
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
 * An idempotent producer ({@code acks=all}, at most 5 requests in flight, so per-partition order
 * holds across retries). A batch is sent, flushed once, and succeeds only if the broker
 * acknowledged every record. Each leadership token gets a fresh producer.
 *
 * <p>Not transactional, on purpose: what an acknowledged non-transactional record needs to be
 * readable is only that it is in the log. A transactional record also needs its commit marker on
 * every partition, and the fault-injection suite once saw a committed batch's records on one
 * partition that {@code read_committed} readers never received (README, "Relay"). Duplicates
 * that a resumed former relay may send are absorbed by the consumer's dedup by job id, which
 * at-least-once delivery needs anyway.
 */
final class KafkaPublisher implements Publisher {

    private static final Logger log = LoggerFactory.getLogger(KafkaPublisher.class);
    private static final Duration TIMEOUT = Duration.ofSeconds(10);

    private final RelayConfig config;
    private KafkaProducer<String, byte[]> producer;
    private long producerToken = -1;
    private boolean topicReady;

    KafkaPublisher(RelayConfig config) {
        this.config = config;
    }

    @Override
    public void publish(long token, List<ProducerRecord<String, byte[]>> records) {
        try {
            if (!topicReady) {
                ensureTopic();
            }
            if (producer == null || producerToken != token) {
                reset();
                producer = new KafkaProducer<>(producerProperties(), new StringSerializer(), new ByteArraySerializer());
                producerToken = token;
                log.info("Kafka producer ready for token {}", token);
            }
            List<Future<RecordMetadata>> sent = new ArrayList<>(records.size());
            for (ProducerRecord<String, byte[]> record : records) {
                Future<RecordMetadata> f = producer.send(record);
                // send() waits up to max.block.ms for metadata and then returns an already failed
                // future instead of throwing: stop at the first one, or a batch against a dead
                // broker would wait max.block.ms for every record.
                if (f.isDone()) {
                    f.get();
                }
                sent.add(f);
            }
            // One flush per batch; every future is complete afterwards. Any failed record fails the
            // batch: nothing is marked and the whole batch is sent again.
            producer.flush();
            for (Future<RecordMetadata> f : sent) {
                f.get(0, TimeUnit.MILLISECONDS);
            }
        } catch (KafkaException | ExecutionException | TimeoutException e) {
            reset();
            throw new PublishException("publishing " + records.size() + " records failed: " + Faults.describe(e), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            reset();
            throw new PublishException("interrupted while publishing", e);
        }
    }

    private void ensureTopic() throws InterruptedException, ExecutionException, TimeoutException {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", config.kafka().bootstrapServers(),
                "request.timeout.ms", (int) TIMEOUT.toMillis(), "default.api.timeout.ms", (int) TIMEOUT.toMillis()))) {
            try {
                admin.createTopics(List.of(new NewTopic(config.kafka().topic(), config.partitions(), config.replication())))
                        .all().get(TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                log.info("Created topic {} ({} partitions, replication {})", config.kafka().topic(), config.partitions(),
                        config.replication());
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
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, config.kafka().bootstrapServers());
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 2);
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, 256 * 1024);
        p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, RelayConfig.PRODUCER_MAX_REQUEST_BYTES);
        // Faults surface within seconds, so the relay backs off instead of hanging in a call.
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, (int) TIMEOUT.toMillis());
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis());
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) TIMEOUT.toMillis() * 2);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "fenced-jobs-relay");
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
            producerToken = -1;
        }
    }

    @Override
    public void close() {
        reset();
    }

    static final class PublishException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        PublishException(String message, Throwable cause) {
            super(message, cause);
        }
    }
}
