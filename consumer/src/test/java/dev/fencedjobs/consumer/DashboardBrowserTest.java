package dev.fencedjobs.consumer;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.relay.Relay;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.internal.RecordSignatures;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TestKafka;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The dashboard at {@code /}, opened in headless Chromium (Debian's {@code chromium}) against a
 * dispatcher, a relay and a consumer sharing one database: what the page shows after it ran its
 * script, one job found by its key, and a screenshot with it ({@code target/dashboard.png}). The
 * README's, {@code docs/dashboard.png}, is taken under load by the local stack's demo
 * ({@code --screenshot}).
 */
class DashboardBrowserTest {

    private static final Path CHROMIUM = Path.of("/usr/bin/chromium");
    private static final String TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void thePageShowsRolesTokensTakeoversLagsDeadLettersAndStaleRejections() throws Exception {
        // Skipped on a developer's machine without Chromium; under CI (CI set, as .ci/run does, which
        // installs it) a missing browser fails the build instead of hiding an untested dashboard.
        String ci = System.getenv("CI");
        if (ci != null && !ci.isBlank()) {
            assertThat(CHROMIUM)
                    .as("CI is set: the dashboard must be tested in a browser; .ci/run installs Debian's chromium")
                    .isExecutable();
        }
        assumeTrue(Files.isExecutable(CHROMIUM), "needs Debian's chromium: apt-get install chromium");
        TestDatabase db = postgres.database();
        DatabaseConfig database = DatabaseConfig.of(db.url(), db.user(), db.password());
        String topic = "dashboard-" + UUID.randomUUID();
        String bootstrap = TestKafka.shared().bootstrapServers();
        TestKafka.createTopic(bootstrap, topic, 3);
        LeaseConfig lease = new LeaseConfig(Duration.ofSeconds(5), Duration.ofSeconds(1));
        // One shard, as the timeline below counts its tokens (with shards, each shard's leases draw from
        // one counter: docs/shards.md); the services would make a new database with four.
        dev.fencedjobs.db.internal.Database.migrate(
                database,
                dev.fencedjobs.db.internal.Database.MIGRATIONS,
                dev.fencedjobs.db.internal.Database.HISTORY_TABLE,
                0,
                1);
        List<RunningService> services = new ArrayList<>();
        RecordTrust trust = RecordTrust.generate();
        KafkaSettings kafka = new KafkaSettings(bootstrap, topic).withTrust(trust);
        try {
            Dispatcher first = Dispatcher.builder()
                    .database(database)
                    .lease(lease)
                    .opsServer(0)
                    .start();
            services.add(first);
            services.add(Relay.builder(kafka)
                    .database(database)
                    .lease(lease)
                    .topicLayout(3, (short) 1)
                    .pollInterval(Duration.ofSeconds(1))
                    .opsServer(0)
                    .start());
            FencedConsumer consumer = FencedConsumer.builder(kafka, "dashboard", new LedgerEffect())
                    .database(database)
                    .retries(EffectRetries.OFF)
                    .opsServer(0)
                    .start();
            services.add(consumer);
            await().atMost(Duration.ofSeconds(30)).until(() -> first.state() == RunningService.State.LEADING);
            // A handoff, for the timeline: the second replica takes over with token 2 once the first released the
            // lease.
            Dispatcher dispatcher =
                    Dispatcher.builder().database(database).lease(lease).start();
            services.add(dispatcher);
            first.close();
            await().atMost(Duration.ofSeconds(30)).until(() -> dispatcher.state() == RunningService.State.LEADING);
            assertThat(dispatcher.token()).hasValue(FencingToken.of(2));
            try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                    Statement s = c.createStatement()) {
                s.execute(
                        "INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || (g % 5), '{}', clock_timestamp() "
                                + "FROM generate_series(1, 50) g");
                // One to look up on the page, in a trace.
                s.execute(
                        "INSERT INTO jobs (resource, due_at, unique_key, traceparent) VALUES ('account-1', clock_timestamp(), 'traced-1', "
                                + "'00-" + TRACE_ID + "-00f067aa0ba902b7-01')");
            }
            await().atMost(Duration.ofSeconds(60))
                    .until(() -> ((Number) consumer.status().get("applied")).longValue() == 51);
            // A record the fence rejects (token 3 after token 5 of its resource) and one it cannot read.
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            try (KafkaProducer<String, byte[]> producer =
                    new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer())) {
                List<ProducerRecord<String, byte[]>> records = List.of(
                        new ProducerRecord<>(topic, "elsewhere", ConsumerFixture.envelope(1_000_000, "elsewhere", 5)),
                        new ProducerRecord<>(topic, "elsewhere", ConsumerFixture.envelope(1_000_001, "elsewhere", 3)),
                        new ProducerRecord<>(topic, "account-2", "not an envelope".getBytes(StandardCharsets.UTF_8)));
                RecordSignatures.sign(trust, System.currentTimeMillis(), records);
                for (ProducerRecord<String, byte[]> r : records) {
                    producer.send(r).get();
                }
            }
            await().atMost(Duration.ofSeconds(60))
                    .until(() -> ((Number) consumer.status().get("staleRejected")).longValue() == 1
                            && ((Number) consumer.status().get("deadLettered")).longValue() == 1);

            // A rate limit that holds jobs back: one token, then one a thousand seconds.
            try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                    Statement s = c.createStatement()) {
                s.execute(
                        "INSERT INTO dispatch_limits (dispatch_key, per_second, burst) VALUES ('tenant-slow', 0.001, 1)");
                s.execute(
                        "INSERT INTO jobs (resource, dispatch_key, payload, due_at) SELECT 'account-1', 'tenant-slow', '{}', clock_timestamp() "
                                + "FROM generate_series(1, 5) g");
            }
            await().atMost(Duration.ofSeconds(60))
                    .until(() -> dispatcher.status().get("heldJobs") instanceof Long n && n == 4);
            // A paused key with three due jobs, its reason written as a page must escape it.
            try (Connection c = DriverManager.getConnection(db.url(), db.user(), db.password());
                    Statement s = c.createStatement()) {
                s.execute(
                        "INSERT INTO dispatch_pauses (dispatch_key, reason) VALUES ('tenant-paused', 'billing <fix>')");
                s.execute(
                        "INSERT INTO jobs (resource, dispatch_key, payload, due_at) SELECT 'account-2', 'tenant-paused', '{}', clock_timestamp() "
                                + "FROM generate_series(1, 3) g");
            }

            String url = "http://localhost:" + consumer.httpPort() + "/";
            // A sample (every 5 s) taken since the jobs were completed and applied: the page's charts then have them.
            HttpClient http = HttpClient.newHttpClient();
            java.util.concurrent.atomic.AtomicReference<String> answer =
                    new java.util.concurrent.atomic.AtomicReference<>();
            try {
                await().atMost(Duration.ofSeconds(30)).until(() -> {
                    String json = http.send(
                                    HttpRequest.newBuilder(URI.create(url + "dashboard.json"))
                                            .build(),
                                    HttpResponse.BodyHandlers.ofString())
                            .body();
                    answer.set(json);
                    return json.matches("(?s).*\"completedPerSecond\" ?: ?[0-9.]*[1-9].*")
                            && json.matches("(?s).*\"appliedPerSecond\" ?: ?[0-9.]*[1-9].*")
                            && json.matches("(?s).*\"dueToEffectP99Seconds\" ?: ?[0-9].*");
                });
            } catch (org.awaitility.core.ConditionTimeoutException e) {
                throw new AssertionError(
                        "no sample with the jobs completed and applied; the dashboard's last answer: " + answer.get(),
                        e);
            }
            HttpResponse<String> page = HttpClient.newHttpClient()
                    .send(HttpRequest.newBuilder(URI.create(url)).build(), HttpResponse.BodyHandlers.ofString());
            assertThat(page.statusCode()).isEqualTo(200);
            assertThat(page.body())
                    .as("self-contained: nothing fetched from elsewhere")
                    .doesNotContain("src=\"http", "href=\"http", "@import");
            long token = dispatcher.token().orElseThrow().value();

            String dom = chromium("--dump-dom", url);
            assertThat(dom).contains("data-loaded=\"true\"");
            assertThat(dom)
                    .containsPattern(
                            "<tr data-role=\"scheduler\"><td>scheduler</td><td class=\"token\">" + token + "</td>");
            assertThat(dom).contains("<tr data-role=\"relay\">");
            assertThat(dom).contains("class=\"live\"");
            assertThat(dom)
                    .as("the takeover timeline")
                    .containsPattern("<td>scheduler</td><td>2</td>")
                    .containsPattern("<td>scheduler</td><td>1</td>");
            assertThat(dom).contains("id=\"dead-letters\">1<", "id=\"stale\">1<");
            assertThat(dom)
                    .as("every series sampled")
                    .contains(
                            "data-chart=\"dueBacklog\"><div class=\"label\"><span>Due backlog",
                            "data-chart=\"consumerLag\"><div class=\"label\"><span>Consumer lag (records behind)</span><span class=\"value\">");
            assertThat(dom)
                    .containsPattern(
                            "data-chart=\"outboxLagSeconds\"><div class=\"label\"><span>[^<]*</span><span class=\"value\">");
            // Sampled on the server since the services started, before any page was open: the jobs
            // completed and applied above are in the charts of a page opened only now.
            assertThat(dom)
                    .as("jobs per second, with the 51 jobs completed before the page opened")
                    .containsPattern(
                            "data-chart=\"completedPerSecond\"><div class=\"label\"><span>Jobs completed per second \\(all replicas\\)</span>"
                                    + "<span class=\"value\">[0-9.]+ (now|at [^,]+), max [0-9.]*[1-9][0-9.]*</span>")
                    .containsPattern("data-chart=\"appliedPerSecond\"><div class=\"label\"><span>[^<]*</span>"
                            + "<span class=\"value\">[0-9.]+ (now|at [^,]+), max [0-9.]*[1-9][0-9.]*</span>");
            assertThat(dom)
                    .as("due-to-effect latency of the jobs applied")
                    .containsPattern(
                            "data-chart=\"dueToEffectP99Seconds\"><div class=\"label\"><span>Due to effect, p99 \\(this consumer\\)</span>"
                                    + "<span class=\"value\">[0-9.]+ s (now|at [^(]+) \\(median [0-9.]+, slowest [0-9.]+\\), max [0-9.]+ s</span>")
                    .containsPattern("data-chart=\"dueToEffectP99Seconds\">.*?<svg[^>]*>(<polyline|<circle)");
            assertThat(dom).containsPattern("a sample every 5 s since [^;]+; the service keeps the last 10 minutes");
            assertThat(dom)
                    .as("the limit that holds jobs back, and the busiest key")
                    .containsPattern(
                            "<tr data-key=\"tenant-slow\" class=\"warn\"><td>tenant-slow</td><td>0.001</td><td>1</td><td>0(\\.\\d+)?</td>"
                                    + "<td class=\"waiting\">4 \\(held\\)</td></tr>")
                    .containsPattern(
                            "<table id=\"busiest\">(<tbody>)?<tr><th>key</th><th>due jobs</th><th>oldest due</th></tr>"
                                    + "<tr data-key=\"tenant-slow\"><td>tenant-slow</td><td>4</td>");

            assertThat(dom)
                    .as("the paused key, who paused it, its due jobs waiting and its reason, escaped")
                    .containsPattern("<table id=\"pauses\">(<tbody>)?<tr><th>paused</th>.*?</tr>"
                            + "<tr data-key=\"tenant-paused\" class=\"warn\"><td>tenant-paused</td><td>"
                            + java.util.regex.Pattern.quote(db.user()) + "</td><td>[0-9]+ s</td><td>3</td>"
                            + "<td>billing &lt;fix&gt;</td></tr>");

            // Where is a job: linked by its key, on the consumer's page.
            String journey = chromium("--dump-dom", url + "#key=traced-1");
            assertThat(journey)
                    .contains(
                            "data-loaded=\"true\"",
                            "<td id=\"job-state\">completed</td>",
                            "<td id=\"job-trace\"><code>" + TRACE_ID + "</code></td>");
            assertThat(journey)
                    .containsPattern("<td id=\"job-completed\">[^<]* with token " + token + "</td>")
                    .containsPattern("<td id=\"job-outbox\">row \\d+, token " + token
                            + ": published \\(the relay's position has passed it\\)</td>")
                    .containsPattern("<td id=\"job-consumer\">applied with token " + token + " at ");
            assertThat(chromium("--dump-dom", url + "#job=99999999"))
                    .contains("<span class=\"warn\" id=\"job-error\">no job with id 99999999</span>");

            Path shot = Path.of("target", "dashboard.png").toAbsolutePath();
            Files.deleteIfExists(shot);
            chromium("--screenshot=" + shot, "--window-size=1280,900", url + "#key=traced-1");
            assertThat(shot).exists();
            assertThat(Files.size(shot)).isGreaterThan(10_000);
        } finally {
            for (RunningService s : services) {
                s.close();
            }
        }
    }

    /** Runs headless Chromium on {@code url}, giving the page's script a few seconds of (virtual) time; returns its output. */
    private static String chromium(String what, String... rest) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>(List.of(
                CHROMIUM.toString(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--virtual-time-budget=4000",
                what));
        command.addAll(List.of(rest));
        Path out = Files.createTempFile("chromium", ".out");
        Process process = new ProcessBuilder(command)
                .redirectError(ProcessBuilder.Redirect.DISCARD)
                .redirectOutput(out.toFile())
                .start();
        if (!process.waitFor(90, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            throw new AssertionError("chromium did not finish: " + command);
        }
        String output = Files.readString(out);
        Files.delete(out);
        assertThat(process.exitValue()).as("chromium " + what + " exit code").isZero();
        return output;
    }
}
