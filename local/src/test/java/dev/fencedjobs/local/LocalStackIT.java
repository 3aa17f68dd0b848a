package dev.fencedjobs.local;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.db.internal.JobJourney;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** The local stack started through its real entry point, the packaged jar, as a user would. */
class LocalStackIT {

    private static final Pattern JDBC_URL = Pattern.compile("JDBC URL\\s+(jdbc:postgresql://\\S+)");

    @Test
    void jobsInsertedWithSqlBecomeEffectsAndAKilledLeaderIsReplacedWithALargerToken() throws Exception {
        assertThat(Path.of(System.getProperty("local.jar"))).exists();
        Process stack = new ProcessBuilder(
                        Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                        "-jar",
                        System.getProperty("local.jar"))
                .redirectErrorStream(true)
                .start();
        List<String> output = new CopyOnWriteArrayList<>();
        Thread reader = new Thread(() -> {
            try (BufferedReader r =
                    new BufferedReader(new InputStreamReader(stack.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    output.add(line);
                }
            } catch (Exception e) {
                // The stack stopped.
            }
        });
        reader.setDaemon(true);
        reader.start();
        try {
            await().atMost(Duration.ofSeconds(90))
                    .until(() ->
                            output.stream().anyMatch(l -> JDBC_URL.matcher(l).find()));
            Matcher m = JDBC_URL.matcher(output.stream()
                    .filter(l -> JDBC_URL.matcher(l).find())
                    .findFirst()
                    .orElseThrow());
            assertThat(m.find()).isTrue();
            String url = m.group(1);
            assertThat(output).anyMatch(l -> l.contains("psql \"postgresql://"));
            // The banner's dashboards answer, each with what its role may read.
            await().atMost(Duration.ofSeconds(30))
                    .until(() -> output.stream().anyMatch(l -> l.contains("(consumer: dashboard")));
            Map<String, Integer> ports = new LinkedHashMap<>();
            for (String service : List.of("dispatcher-1", "relay", "consumer")) {
                Matcher port = Pattern.compile("http://localhost:(\\d+)/  \\(" + service + ": dashboard")
                        .matcher(output.stream()
                                .filter(l -> l.contains("(" + service + ": dashboard"))
                                .findFirst()
                                .orElseThrow());
                assertThat(port.find()).as(service).isTrue();
                ports.put(service, Integer.parseInt(port.group(1)));
                URI dashboard = URI.create("http://localhost:" + port.group(1) + "/dashboard.json");
                String expected = switch (service) {
                    case "dispatcher-1" -> "\"dueBacklog\" : 0";
                    case "relay" -> "\"outboxLagSeconds\" : 0.0";
                    default -> "\"toActOn\" : 0";
                };
                // The banner comes as the services start; each answers once it listens.
                await().atMost(Duration.ofSeconds(60))
                        .ignoreExceptions()
                        .until(() -> HttpClient.newHttpClient()
                                .send(HttpRequest.newBuilder(dashboard).build(), HttpResponse.BodyHandlers.ofString())
                                .body()
                                .contains(expected));
                String json = HttpClient.newHttpClient()
                        .send(HttpRequest.newBuilder(dashboard).build(), HttpResponse.BodyHandlers.ofString())
                        .body();
                assertThat(json).as(service).contains("\"service\" : \"" + service.replace("-1", "") + "\"");
            }

            // Plain SQL as the producer role, exactly as the banner says.
            try (Connection producer = DriverManager.getConnection(url, "fj_producer", "producer");
                    Statement s = producer.createStatement()) {
                s.execute(
                        "INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || (g % 5), '{}', clock_timestamp() "
                                + "FROM generate_series(1, 200) g");
            }
            try (Connection owner = DriverManager.getConnection(url, "fencedjobs", "fencedjobs");
                    Statement s = owner.createStatement()) {
                await().atMost(Duration.ofSeconds(60)).until(() -> count(s, "SELECT count(*) FROM ledger") == 200);
                // The alerts and the Grafana dashboard (ops/) name only metrics the services export.
                Set<String> exported = new TreeSet<>();
                for (int port : ports.values()) {
                    exported.addAll(OpsFiles.metricNames(HttpClient.newHttpClient()
                            .send(
                                    HttpRequest.newBuilder(URI.create("http://localhost:" + port + "/metrics"))
                                            .build(),
                                    HttpResponse.BodyHandlers.ofString())
                            .body()));
                }
                assertThat(exported).contains("fencedjobs_jobs_due", "fencedjobs_jobs_oldest_due_seconds");
                for (Path file : OpsFiles.FILES) {
                    assertThat(exported).as("metrics %s names", file).containsAll(OpsFiles.namedIn(file));
                }
                dev.fencedjobs.lease.FencingToken token;
                long leaderPid;
                dev.fencedjobs.lease.LeaseRow lease =
                        dev.fencedjobs.lease.LeaseRow.of(owner, "scheduler").orElseThrow();
                token = lease.token();
                leaderPid = lease.holderPid();
                // Stop the leader process abruptly: no release; a follower takes over once the dead leader's
                // database session ends (after the lease at the latest).
                assertThat(ProcessHandle.of(leaderPid)).isPresent();
                ProcessHandle.of(leaderPid).orElseThrow().destroyForcibly();
                try (Connection producer = DriverManager.getConnection(url, "fj_producer", "producer");
                        Statement p = producer.createStatement()) {
                    p.execute(
                            "INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || (g % 5), '{}', clock_timestamp() "
                                    + "FROM generate_series(1, 200) g");
                }
                await().atMost(Duration.ofSeconds(60)).until(() -> count(s, "SELECT count(*) FROM ledger") == 400);
                assertThat(dev.fencedjobs.lease.LeaseRow.of(owner, "scheduler")
                                .orElseThrow()
                                .token())
                        .isGreaterThan(token);
                assertThat(count(s, "SELECT count(DISTINCT job_id) FROM ledger"))
                        .isEqualTo(400);
                assertThat(
                                count(
                                        s,
                                        "SELECT count(*) FROM jobs j JOIN ledger l ON l.job_id = j.id AND l.fencing_token = j.completed_by_token"))
                        .as("every effect carries the token that completed its job")
                        .isEqualTo(400);
                assertThat(count(s, "SELECT max(completed_by_token) FROM jobs")).isGreaterThan(token.value());
                // One job's journey as `fenced-jobs journey` reads it: completed, published, applied with its token.
                long last = count(s, "SELECT max(id) FROM jobs");
                await().atMost(Duration.ofSeconds(30))
                        .until(() -> Boolean.TRUE.equals(
                                part(JobJourney.read(owner, owner, last, null).orElseThrow(), "outbox")
                                        .get("published")));
                Map<String, Object> journey =
                        JobJourney.read(owner, owner, last, null).orElseThrow();
                assertThat(part(journey, "job")).containsEntry("state", "completed");
                Object completedBy = part(journey, "job").get("completed_by_token");
                assertThat(part(journey, "outbox"))
                        .containsEntry("fencing_token", completedBy)
                        .containsEntry("publish_error", null);
                assertThat(part(part(journey, "consumer"), "processed"))
                        .containsEntry("outcome", "applied")
                        .containsEntry("fencing_token", completedBy);
            }
            assertThat(output).anyMatch(l -> l.contains("FOLLOWER -> LEADER"));
            assertThat(output).anyMatch(l -> l.startsWith("effects"));
        } finally {
            // SIGTERM through the handle: Process.destroy() would also close our end of its output.
            stack.toHandle().destroy();
            if (!stack.waitFor(60, TimeUnit.SECONDS)) {
                stack.destroyForcibly();
            }
            reader.join(5_000); // the last lines, printed on the way out
            java.nio.file.Files.write(Path.of("target", "local-stack-it.log"), output);
        }
        assertThat(output)
                .as("Ctrl-C / SIGTERM stops the stack cleanly")
                .anyMatch(l -> l.contains("Stopping: services first"));
        List<String> afterStop = output.subList(
                output.indexOf(output.stream()
                        .filter(l -> l.contains("Stopping: services first"))
                        .findFirst()
                        .orElseThrow()),
                output.size());
        // The in-JVM broker's directory was deleted by a shutdown hook while the broker still wrote its checkpoints.
        assertThat(afterStop)
                .as("no stack trace on the way out")
                .noneMatch(l -> l.startsWith("\tat ") || l.contains("Exception"));
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> part(Map<String, Object> journey, String name) {
        assertThat(journey.get(name)).as(name).isInstanceOf(Map.class);
        return (Map<String, Object>) journey.get(name);
    }

    private static long count(Statement s, String sql) throws Exception {
        try (ResultSet rs = s.executeQuery(sql)) {
            rs.next();
            return rs.getLong(1);
        }
    }
}
