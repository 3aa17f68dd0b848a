package dev.fencedjobs.testing;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.Uuid;

/**
 * Kafka brokers as separate processes that a test can kill one at a time. One node is the
 * single-broker set-up of {@link KafkaProcess}; three are a replicated KRaft cluster as users run
 * it: every node a broker and a voter of the controller quorum, topics with three replicas and
 * {@code min.insync.replicas=2}, no unclean leader election, so that a write acknowledged with
 * {@code acks=all} survives the loss of any one node.
 */
public final class KafkaCluster implements AutoCloseable {

    /** Broker settings of a replicated cluster (they override the single node's). */
    public static final List<String> REPLICATED = List.of(
            "default.replication.factor=3",
            "min.insync.replicas=2",
            "unclean.leader.election.enable=false",
            "offsets.topic.replication.factor=3",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
            // Leaders move when this suite says so, not on the broker's own five-minute check.
            "auto.leader.rebalance.enable=false");

    private final List<KafkaProcess> nodes = new ArrayList<>();

    public KafkaCluster(int size) {
        if (size != 1 && size != 3) {
            throw new IllegalArgumentException("a cluster of 1 or 3 brokers, not " + size);
        }
        if (size == 1) {
            nodes.add(new KafkaProcess());
            return;
        }
        try {
            int[] ports = new int[size];
            int[] controllerPorts = new int[size];
            List<String> voters = new ArrayList<>();
            for (int i = 0; i < size; i++) {
                ports[i] = KafkaProcess.freePort();
                controllerPorts[i] = KafkaProcess.freePort();
                voters.add((i + 1) + "@localhost:" + controllerPorts[i]);
            }
            String clusterId = Uuid.randomUuid().toString();
            for (int i = 0; i < size; i++) {
                nodes.add(KafkaProcess.member(
                        clusterId, i + 1, ports[i], controllerPorts[i], String.join(",", voters), REPLICATED));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        startAll();
    }

    public int size() {
        return nodes.size();
    }

    /** Every node's address, comma-separated. */
    public String bootstrapServers() {
        return nodes.stream().map(KafkaProcess::bootstrapServers).collect(Collectors.joining(","));
    }

    /** Node {@code i} (0-based): its configuration, {@code broker.log} and {@code data/}. */
    public Path directory(int i) {
        return nodes.get(i).directory();
    }

    /** SIGKILL of node {@code i}. */
    public void kill(int i) {
        nodes.get(i).kill();
    }

    /** SIGTERM of node {@code i}: a controlled shutdown that hands its leaderships over first. */
    public void stop(int i) {
        nodes.get(i).stop();
    }

    public void start(int i) {
        nodes.get(i).start();
    }

    public void killAll() {
        nodes.forEach(KafkaProcess::kill);
    }

    /**
     * SIGTERM to every node at once, as an operator stopping the cluster does, then waits for each
     * (one by one, the last would wait out its controlled shutdown with no controller quorum left).
     */
    public void stopAll() {
        nodes.forEach(KafkaProcess::signalStop);
        nodes.forEach(KafkaProcess::awaitStop);
    }

    /** Starts every node that is down, together (a quorum needs a majority to elect a controller), and waits for them. */
    public void startAll() {
        nodes.forEach(KafkaProcess::launch);
        nodes.forEach(KafkaProcess::awaitListening);
    }

    /**
     * Moves the leader of every partition of {@code topic} to another broker while it is being
     * written: each replica list is rotated by one (a reassignment that changes only the order, so
     * no data moves), then a preferred-leader election makes the new first replica the leader.
     * Returns how many partitions changed leader. Needs three nodes.
     */
    public int moveLeaders(String topic) throws InterruptedException {
        if (nodes.size() < 2) {
            throw new IllegalStateException("a single broker has no other to move leaders to");
        }
        try (Admin admin = Admin.create(Map.of(
                "bootstrap.servers",
                bootstrapServers(),
                "request.timeout.ms",
                10_000,
                "default.api.timeout.ms",
                30_000))) {
            TopicDescription before =
                    admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            Map<TopicPartition, Optional<NewPartitionReassignment>> rotated = new HashMap<>();
            Map<Integer, Integer> leaderBefore = new HashMap<>();
            for (TopicPartitionInfo p : before.partitions()) {
                List<Integer> replicas =
                        new ArrayList<>(p.replicas().stream().map(n -> n.id()).toList());
                Collections.rotate(replicas, -1);
                rotated.put(
                        new TopicPartition(topic, p.partition()), Optional.of(new NewPartitionReassignment(replicas)));
                leaderBefore.put(
                        p.partition(), p.leader() == null ? -1 : p.leader().id());
            }
            admin.alterPartitionReassignments(rotated).all().get(30, TimeUnit.SECONDS);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!admin.listPartitionReassignments(rotated.keySet())
                    .reassignments()
                    .get()
                    .isEmpty()) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("reassignment of " + topic + " did not finish in 60 s");
                }
                Thread.sleep(100);
            }
            // A partition whose new preferred replica is out of sync keeps its leader: ELECTION_NOT_NEEDED
            // or PREFERRED_LEADER_NOT_AVAILABLE per partition, not a failure of the whole call.
            admin.electLeaders(ElectionType.PREFERRED, Set.copyOf(rotated.keySet()))
                    .partitions()
                    .get(30, TimeUnit.SECONDS);
            TopicDescription after =
                    admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            int moved = 0;
            for (TopicPartitionInfo p : after.partitions()) {
                if (p.leader() != null && p.leader().id() != leaderBefore.get(p.partition())) {
                    moved++;
                }
            }
            return moved;
        } catch (ExecutionException | TimeoutException e) {
            throw new IllegalStateException("moving the leaders of " + topic + " failed: " + e.getCause(), e);
        }
    }

    @Override
    public void close() {
        nodes.forEach(KafkaProcess::close);
    }
}
