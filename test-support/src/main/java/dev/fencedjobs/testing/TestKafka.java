package dev.fencedjobs.testing;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.test.KafkaClusterTestKit;
import org.apache.kafka.common.test.TestKitNodes;
import org.apache.kafka.common.utils.Exit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.testcontainers.kafka.KafkaContainer;

/**
 * One real Kafka broker per test JVM, chosen in this order:
 *
 * <ol>
 *   <li>{@code FJ_TEST_KAFKA_BOOTSTRAP}: a broker you run;
 *   <li>Testcontainers ({@code apache/kafka}), if a Docker engine answers;
 *   <li>otherwise a single-node KRaft broker inside this JVM ({@code KafkaClusterTestKit}).
 * </ol>
 *
 * <p>{@code FJ_TEST_SERVERS} narrows the last two as for {@link TestPostgres}.
 *
 * <p>Tests share the broker, so each test uses topics and group ids of its own.
 */
public final class TestKafka {

    public static final String BOOTSTRAP_ENV = "FJ_TEST_KAFKA_BOOTSTRAP";
    static final String KAFKA_IMAGE = "apache/kafka:4.1.1";

    private static final Logger log = LoggerFactory.getLogger(TestKafka.class);
    private static TestKafka shared;

    private final String bootstrapServers;
    private final String source;

    private TestKafka(String bootstrapServers, String source) {
        this.bootstrapServers = bootstrapServers;
        this.source = source;
    }

    public static synchronized TestKafka shared() {
        if (shared == null) {
            shared = start();
            log.info("Test Kafka from {}: {}", shared.source, shared.bootstrapServers);
        }
        return shared;
    }

    private static TestKafka start() {
        Optional<String> bootstrap = TestPostgres.env(BOOTSTRAP_ENV);
        if (bootstrap.isPresent()) {
            return new TestKafka(bootstrap.get(), BOOTSTRAP_ENV);
        }
        if (TestPostgres.Docker.available()) {
            // Configured as the in-JVM broker is (startEmbedded): Testcontainers' defaults create
            // topics on first use and give the offsets topic one partition.
            KafkaContainer container = new KafkaContainer(KAFKA_IMAGE)
                    .withEnv("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
                    .withEnv("KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS", "4")
                    .withEnv("KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS", "4");
            container.start();
            Runtime.getRuntime().addShutdownHook(new Thread(container::stop, "test-kafka-stop"));
            return new TestKafka(container.getBootstrapServers(), "Testcontainers");
        }
        KafkaClusterTestKit cluster = startEmbedded();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> TestPostgres.closeQuietly(cluster), "test-kafka-stop"));
        return new TestKafka(cluster.bootstrapServers(), "in-JVM KRaft broker");
    }

    /** A single combined broker and controller, configured like a one-node production cluster. */
    public static KafkaClusterTestKit startEmbedded() {
        // The broker halts the JVM when its log directory vanishes, which happens when the test kit
        // deletes it on close while a background checkpoint is still being written.
        Exit.setHaltProcedure((code, message) ->
                log.warn("In-JVM Kafka broker asked to halt with code {} ({}); ignored", code, message));
        try {
            // A directory of our own: left to itself the test kit takes one whose deletion it registers
            // as a JVM shutdown hook, which runs at once on Ctrl-C, beside the hook that is still
            // stopping the services, and the broker, still running, failed on every checkpoint it wrote
            // (./run-local printed their stack traces). Its close deletes this one after the broker stopped.
            Path base = Files.createTempDirectory("fenced-jobs-kafka-");
            KafkaClusterTestKit cluster = new KafkaClusterTestKit.Builder(new TestKitNodes.Builder()
                            .setBaseDirectory(base)
                            .setCombined(true)
                            .setNumBrokerNodes(1)
                            .setNumControllerNodes(1)
                            .build())
                    .setConfigProp("offsets.topic.replication.factor", "1")
                    .setConfigProp("offsets.topic.num.partitions", "4")
                    .setConfigProp("transaction.state.log.replication.factor", "1")
                    .setConfigProp("transaction.state.log.min.isr", "1")
                    .setConfigProp("transaction.state.log.num.partitions", "4")
                    .setConfigProp("group.initial.rebalance.delay.ms", "0")
                    .setConfigProp("auto.create.topics.enable", "false")
                    // Checkpoints every 200 ms rather than 5 s: a directory deleted under a running broker
                    // shows at once (LocalStackIT), not only when a stop happens to span a checkpoint.
                    .setConfigProp("replica.high.watermark.checkpoint.interval.ms", "200")
                    .build();
            cluster.format();
            cluster.startup();
            cluster.waitForReadyBrokers();
            return cluster;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while starting the in-JVM Kafka broker", e);
        } catch (Exception e) {
            throw new IllegalStateException("could not start the in-JVM Kafka broker", e);
        }
    }

    /**
     * Creates a topic and waits until every partition has a leader. Producing to a partition
     * before that can fail with NOT_LEADER_OR_FOLLOWER, after which an idempotent producer was
     * seen retrying OUT_OF_ORDER_SEQUENCE_NUMBER forever against the in-JVM broker.
     */
    public static void createTopic(String bootstrapServers, String topic, int partitions) {
        createTopic(bootstrapServers, topic, partitions, (short) 1);
    }

    /** With {@code replication} replicas; three or more also get {@code min.insync.replicas=2}. */
    public static void createTopic(String bootstrapServers, String topic, int partitions, short replication) {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrapServers))) {
            var newTopic = new NewTopic(topic, partitions, replication);
            if (replication >= 3) {
                newTopic.configs(Map.of("min.insync.replicas", "2"));
            }
            admin.createTopics(List.of(newTopic)).all().get();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (true) {
                // createTopics returns once the controller has the topic; the broker answering
                // describeTopics may not have applied it yet and then says it does not know it.
                var description = describeIfKnown(admin, topic);
                if (description != null
                        && description.partitions().size() == partitions
                        && description.partitions().stream()
                                .allMatch(p -> p.leader() != null && !p.leader().isEmpty())) {
                    return;
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("topic " + topic + " has partitions without a leader after 30 s");
                }
                Thread.sleep(50);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        } catch (ExecutionException e) {
            throw new IllegalStateException("could not create topic " + topic, e);
        }
    }

    /**
     * How many records of {@code topic} consumer group {@code group} has not committed past: the
     * end offsets less the committed ones, a partition with no commit counting from 0. Zero means
     * the group has committed everything the topic holds now, so nothing more is delivered to it.
     */
    public static long groupLag(String bootstrapServers, String group, String topic) {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrapServers))) {
            var committed = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata()
                    .get();
            var partitions = admin.describeTopics(List.of(topic))
                    .allTopicNames()
                    .get()
                    .get(topic)
                    .partitions();
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (var p : partitions) {
                latest.put(new TopicPartition(topic, p.partition()), OffsetSpec.latest());
            }
            long lag = 0;
            for (var e : admin.listOffsets(latest).all().get().entrySet()) {
                var done = committed.get(e.getKey());
                lag += e.getValue().offset() - (done == null ? 0 : done.offset());
            }
            return lag;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        } catch (ExecutionException e) {
            throw new IllegalStateException("could not read the offsets of group " + group, e);
        }
    }

    private static TopicDescription describeIfKnown(Admin admin, String topic)
            throws InterruptedException, ExecutionException {
        try {
            return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        } catch (ExecutionException e) {
            if (e.getCause() instanceof UnknownTopicOrPartitionException) {
                return null;
            }
            throw e;
        }
    }

    public String bootstrapServers() {
        return bootstrapServers;
    }
}
