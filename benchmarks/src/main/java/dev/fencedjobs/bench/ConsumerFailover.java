package dev.fencedjobs.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.fencedjobs.testing.ServiceProcess;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;

/**
 * The consumers' part of the end-to-end benchmark's failover phase: two consumers in one group
 * share the topic; one is stopped (SIGKILL or SIGTERM) and the time is taken from the signal to
 * the first effect applied, after the stopped one has exited, from a partition it held: an effect
 * only the other can have applied. A trial starts only once both consumers report an assignment
 * that covers every partition.
 */
final class ConsumerFailover {

    /** What the benchmark lends this phase. */
    interface Services {
        ServiceProcess get(String name);

        void restart(String name);

        Connection owner() throws SQLException;
    }

    private static final ObjectMapper JSON = new ObjectMapper();
    private final Services services;
    private final Map<String, Integer> httpPorts;
    private final String topic;
    private final int partitions;
    private final List<String> resources;
    private final HttpClient http =
            HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

    /** {@code httpPorts}: each consumer's name and the ops port it was started with. */
    ConsumerFailover(
            Services services, Map<String, Integer> httpPorts, String topic, int partitions, List<String> resources) {
        this.services = services;
        this.httpPorts = httpPorts;
        this.topic = topic;
        this.partitions = partitions;
        this.resources = resources;
    }

    /** Stops consumers in turn and returns ms from each signal to the first effect from the stopped one's partitions. */
    List<Double> trials(int n, boolean sigkill) throws Exception {
        List<String> names = new ArrayList<>(httpPorts.keySet());
        List<Double> ms = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            ms.add(trial(names.get(i % names.size()), sigkill));
        }
        return ms;
    }

    private double trial(String victim, boolean sigkill) throws Exception {
        Set<Integer> held = awaitSharedAssignment().get(victim);
        List<String> affected = resources.stream()
                .filter(r -> held.contains(
                        BuiltInPartitioner.partitionForKey(r.getBytes(StandardCharsets.UTF_8), partitions)))
                .toList();
        ServiceProcess process = services.get(victim);
        long signalledAt = System.currentTimeMillis();
        if (sigkill) {
            process.kill();
        } else {
            process.terminate();
        }
        // A consumer stopped with SIGTERM finishes its batch first, and those effects are its own:
        // count only effects applied once it has exited, which only the other consumer can apply.
        process.waitFor();
        long exitedAt = System.currentTimeMillis();
        long first = 0;
        while (first == 0) {
            try (Connection c = services.owner();
                    PreparedStatement s = c.prepareStatement(
                            "SELECT coalesce((extract(epoch FROM min(applied_at)) * 1000)::bigint, 0) "
                                    + "FROM ledger WHERE applied_at > to_timestamp(? / 1000.0) AND resource = ANY(?)")) {
                s.setLong(1, exitedAt);
                s.setArray(2, c.createArrayOf("varchar", affected.toArray()));
                try (ResultSet r = s.executeQuery()) {
                    r.next();
                    first = r.getLong(1);
                }
            }
            if (System.currentTimeMillis() - signalledAt > 120_000) {
                throw new IllegalStateException(
                        "no effect from partitions " + held + " within 120 s of stopping " + victim);
            }
            Thread.sleep(20);
        }
        services.restart(victim);
        return first - signalledAt;
    }

    /** Waits until every consumer holds partitions and together they hold all; returns who holds what. */
    private Map<String, Set<Integer>> awaitSharedAssignment() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (true) {
            Map<String, Set<Integer>> held = new LinkedHashMap<>();
            Set<Integer> all = new TreeSet<>();
            for (Map.Entry<String, Integer> e : httpPorts.entrySet()) {
                Set<Integer> mine = assignment(e.getValue());
                held.put(e.getKey(), mine);
                all.addAll(mine);
            }
            if (all.size() == partitions && held.values().stream().noneMatch(Set::isEmpty)) {
                return held;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(
                        "the consumers did not share the " + partitions + " partitions within 120 s: " + held);
            }
            Thread.sleep(200);
        }
    }

    /** The partitions a consumer's {@code /status} says it holds; none while it is not up and ready. */
    private Set<Integer> assignment(int port) {
        try {
            HttpResponse<String> r = http.send(
                    HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/status"))
                            .timeout(Duration.ofSeconds(2))
                            .build(),
                    HttpResponse.BodyHandlers.ofString());
            JsonNode status = JSON.readTree(r.body());
            Set<Integer> held = new TreeSet<>();
            if (!status.path("ready").asBoolean()) {
                return held;
            }
            for (JsonNode tp : status.path("assignment")) {
                String s = tp.asText();
                if (s.startsWith(topic + "-")) {
                    held.add(Integer.parseInt(s.substring(topic.length() + 1)));
                }
            }
            return held;
        } catch (IOException e) {
            return Set.of();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return Set.of();
        }
    }
}
