package dev.fencedjobs.cli;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.fencedjobs.runtime.internal.OpsServer;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;

/**
 * The services' health check in docker-compose.yml, run as Compose runs it (a CMD test is executed
 * as given; a CMD-SHELL one under /bin/sh, which is dash on the Ubuntu-based eclipse-temurin images
 * and has no /dev/tcp) against a real ops endpoint: healthy while ready, unhealthy while not ready
 * and while nothing listens.
 */
class ComposeHealthCheckTest {

    @SuppressWarnings("unchecked")
    static List<String> healthCheck() throws Exception {
        for (String line : Files.readAllLines(Path.of("..", "docker-compose.yml"))) {
            String t = line.trim();
            if (t.startsWith("test:") && t.contains("/health/ready")) {
                return new ObjectMapper()
                        .readValue(t.substring("test:".length()).trim(), List.class);
            }
        }
        throw new AssertionError("no health check on /health/ready in docker-compose.yml");
    }

    /** As Compose runs a health check: CMD as given, CMD-SHELL under /bin/sh (dash here too, as on the images). */
    private static int run(List<String> command, int port) throws Exception {
        List<String> args = new ArrayList<>();
        if (command.get(0).equals("CMD-SHELL")) {
            args.addAll(List.of("/bin/sh", "-c"));
        }
        for (String a : command.subList(1, command.size())) {
            args.add(a.replace("127.0.0.1/8080", "127.0.0.1/" + port));
        }
        Process p = new ProcessBuilder(args).redirectErrorStream(true).start();
        assertThat(p.waitFor(10, TimeUnit.SECONDS))
                .as("the health check returns within Compose's 3 s timeout and then some")
                .isTrue();
        return p.exitValue();
    }

    @Test
    void theHealthCheckRunsWithoutAShellAndTellsReadyFromNotReady() throws Exception {
        List<String> check = healthCheck();
        AtomicBoolean ready = new AtomicBoolean(true);
        OpsServer ops = OpsServer.start(
                0,
                dev.fencedjobs.runtime.OpsAccess.OPEN,
                new PrometheusMeterRegistry(PrometheusConfig.DEFAULT)::scrape,
                ready::get,
                Map::of,
                null);
        int port = ops.port();
        try {
            assertThat(run(check, port)).as("ready: healthy").isZero();
            ready.set(false);
            assertThat(run(check, port)).as("503: unhealthy").isNotZero();
        } finally {
            ops.close();
        }
        assertThat(run(check, port)).as("nothing listening: unhealthy").isNotZero();
    }
}
