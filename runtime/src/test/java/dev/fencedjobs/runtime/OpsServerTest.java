package dev.fencedjobs.runtime;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.internal.OpsServer;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.Test;

class OpsServerTest {

    private static final String TOKEN = "s3cret-token-of-32-characters-xx";
    private final HttpClient http =
            HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    private int code(int port, String path, String authorization) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .timeout(Duration.ofSeconds(10));
        if (authorization != null) {
            b.header("Authorization", authorization);
        }
        return http.send(b.build(), HttpResponse.BodyHandlers.ofString()).statusCode();
    }

    @Test
    void withATokenTheDataNeedsItAndTheHealthEndpointsAndThePageStayOpen() throws Exception {
        try (OpsServer ops = OpsServer.start(
                0,
                new OpsAccess("127.0.0.1", TOKEN),
                () -> "# metrics\n",
                () -> true,
                () -> Map.of("holder", "h-1"),
                () -> Map.of("roles", "r"),
                (id, key) -> Map.of("id", id))) {
            int port = ops.port();
            for (String path : new String[] {"/status", "/dashboard.json", "/dashboard/job?id=4711", "/metrics"}) {
                assertThat(code(port, path, null)).as(path + " without a token").isEqualTo(401);
                assertThat(code(port, path, "Bearer wrong-token-of-some-length"))
                        .as(path + " with a wrong one")
                        .isEqualTo(401);
                assertThat(code(port, path, "Basic " + TOKEN))
                        .as(path + " with another scheme")
                        .isEqualTo(401);
                assertThat(code(port, path, "Bearer " + TOKEN))
                        .as(path + " with the token")
                        .isEqualTo(200);
            }
            assertThat(code(port, "/health/live", null)).isEqualTo(200);
            assertThat(code(port, "/health/ready", null)).isEqualTo(200);
            assertThat(code(port, "/", null)).as("the page holds no data").isEqualTo(200);
        }
    }

    @Test
    void itListensOnTheBindAddressOnly() throws Exception {
        try (OpsServer ops =
                OpsServer.start(0, OpsAccess.OPEN.withBindAddress("127.0.0.1"), null, () -> true, Map::of, null)) {
            assertThat(code(ops.port(), "/health/live", null)).isEqualTo(200);
            String other = java.net.InetAddress.getLocalHost().getHostAddress();
            if (!other.startsWith("127.")) {
                assertThatThrownBy(() -> codeAt(ops.port(), "/health/live", other))
                        .isInstanceOf(java.io.IOException.class);
            }
        }
    }

    private int codeAt(int port, String path, String host) throws Exception {
        return http.send(
                        HttpRequest.newBuilder(URI.create("http://" + host + ":" + port + path))
                                .timeout(Duration.ofSeconds(5))
                                .build(),
                        HttpResponse.BodyHandlers.ofString())
                .statusCode();
    }

    @Test
    void theSettingsAreCheckedAndTheTokenNeverShown() {
        OpsAccess access =
                OpsAccess.from(Settings.of(Map.of(OpsAccess.TOKEN, TOKEN, OpsAccess.BIND_ADDRESS, "127.0.0.1")));
        assertThat(access.toString()).doesNotContain(TOKEN).contains("[hidden]");
        assertThat(OpsAccess.from(Settings.of(Map.of())).bindAddress()).isEqualTo("0.0.0.0");
        assertThatThrownBy(() -> OpsAccess.from(Settings.of(Map.of(OpsAccess.TOKEN, "short"))))
                .isInstanceOf(ConfigException.class)
                .hasMessageStartingWith("OPS_TOKEN: must be at least 16 characters");
        assertThatThrownBy(() -> OpsAccess.from(Settings.of(Map.of(OpsAccess.BIND_ADDRESS, "no such host.invalid"))))
                .hasMessageStartingWith("HTTP_BIND_ADDRESS: is not an address of this host");
        assertThatThrownBy(
                        () -> OpsAccess.from(Settings.of(Map.of(OpsAccess.TOKEN, TOKEN, OpsAccess.TOKEN_FILE, "/x"))))
                .hasMessageContaining("are both set");
    }
}
