package dev.fencedjobs.relay;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RecordTrust;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.testing.RestartablePostgres;
import dev.fencedjobs.testing.TestKafka;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * A stalled database must not take the liveness probe with it: a kubelet would restart a healthy
 * process exactly when the database struggles. The relay's {@code /status} reads the outbox lag
 * from the database, so it is stuck while the server is paused; {@code /health/live} is not.
 */
class OpsEndpointStallTest {

    private final HttpClient http =
            HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    private HttpRequest get(int port, String path) {
        return HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .timeout(Duration.ofSeconds(30))
                .build();
    }

    @Test
    void theHealthEndpointsAnswerAtOnceWhileTheDatabaseIsPausedAndStatusIsStuck() throws Exception {
        try (RestartablePostgres pg = new RestartablePostgres()) {
            DatabaseConfig db = DatabaseConfig.of(pg.url(), pg.user(), pg.password());
            KafkaSettings kafka = new KafkaSettings(
                            TestKafka.shared().bootstrapServers(), "ops-stall-" + UUID.randomUUID())
                    .withTrust(RecordTrust.generate());
            try (Relay relay = Relay.builder(kafka).database(db).opsServer(0).start()) {
                await().atMost(Duration.ofSeconds(30)).until(() -> relay.state() == RunningService.State.LEADING);
                int port = relay.httpPort();
                // No /status before the pause: the relay keeps the outbox lag it read for a second.

                CompletableFuture<HttpResponse<String>> status;
                List<Long> liveMillis = new ArrayList<>();
                List<Integer> moreStatus = new ArrayList<>();
                try (AutoCloseable paused = pg.pause()) {
                    status = http.sendAsync(get(port, "/status"), HttpResponse.BodyHandlers.ofString());
                    for (int i = 0; i < 10; i++) {
                        long t0 = System.nanoTime();
                        HttpResponse<String> live =
                                http.send(get(port, "/health/live"), HttpResponse.BodyHandlers.ofString());
                        liveMillis.add((System.nanoTime() - t0) / 1_000_000);
                        assertThat(live.statusCode()).isEqualTo(200);
                    }
                    assertThat(http.send(get(port, "/health/ready"), HttpResponse.BodyHandlers.ofString())
                                    .statusCode())
                            .isIn(200, 503);
                    // The worker is stuck on the first /status; a queue's worth more wait, the rest are refused at
                    // once.
                    List<CompletableFuture<HttpResponse<String>>> queued = new ArrayList<>();
                    for (int i = 0; i < 12; i++) {
                        queued.add(http.sendAsync(get(port, "/status"), HttpResponse.BodyHandlers.ofString()));
                    }
                    await().atMost(Duration.ofSeconds(10))
                            .until(() -> queued.stream()
                                            .filter(CompletableFuture::isDone)
                                            .count()
                                    >= 4);
                    queued.stream()
                            .filter(CompletableFuture::isDone)
                            .forEach(f -> moreStatus.add(f.join().statusCode()));
                    assertThat(status)
                            .as(
                                    "/status waits for the paused database: %s",
                                    status.isDone() ? status.join().body() : "")
                            .isNotDone();
                }
                System.out.println("/health/live while the database was paused, ms: " + liveMillis);
                liveMillis.sort(null);
                assertThat(liveMillis.get(liveMillis.size() / 2))
                        .as("median /health/live, ms")
                        .isLessThan(100);
                assertThat(moreStatus)
                        .as("requests beyond the queue refused at once")
                        .containsOnly(503);
                assertThat(status.get().statusCode())
                        .as("/status once the database answers again")
                        .isEqualTo(200);
                assertThat(status.get().body()).containsPattern("\"unpublishedRows\" : \\d+");
            }
        }
    }
}
