package dev.fencedjobs.runtime;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The endpoint every service exposes, on the JDK's built-in HTTP server:
 *
 * <ul>
 *   <li>{@code GET /health/live}: 200 while the process runs;
 *   <li>{@code GET /health/ready}: 200 when connected to the database, else 503;
 *   <li>{@code GET /metrics}: Prometheus text format (404 when the service's meters go to a registry
 *       of the application that embeds it);
 *   <li>{@code GET /status}: JSON from the service;
 *   <li>{@code GET /}: the dashboard, one self-contained page that reads {@code /dashboard.json}.
 * </ul>
 */
public final class OpsServer implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(OpsServer.class);
    private static final ObjectMapper JSON = new ObjectMapper()
            .enable(SerializationFeature.INDENT_OUTPUT)
            .disable(SerializationFeature.FAIL_ON_EMPTY_BEANS);

    private final HttpServer server;

    private OpsServer(HttpServer server) {
        this.server = server;
    }

    /**
     * Starts on {@code port} (0 picks a free one).
     *
     * @param metrics the Prometheus text, or null when the meters are not ours to show
     * @param dashboard what {@code /dashboard.json} answers, or null for no dashboard
     */
    public static OpsServer start(int port, Supplier<String> metrics, BooleanSupplier ready, Supplier<Map<String, Object>> status,
            Supplier<Map<String, Object>> dashboard) {
        try {
            HttpServer server = HttpServer.create(new InetSocketAddress(port), 0);
            server.setExecutor(Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, "ops-http");
                t.setDaemon(true);
                return t;
            }));
            server.createContext("/health/live", ex -> respond(ex, 200, "text/plain", "live\n"));
            server.createContext("/health/ready", ex -> {
                boolean ok = ready.getAsBoolean();
                respond(ex, ok ? 200 : 503, "text/plain", ok ? "ready\n" : "not ready: database unreachable\n");
            });
            server.createContext("/metrics", ex -> {
                if (metrics == null) {
                    respond(ex, 404, "text/plain", "this service's meters go to the registry of the application that embeds it\n");
                } else {
                    respond(ex, 200, "text/plain; version=0.0.4; charset=utf-8", metrics.get());
                }
            });
            server.createContext("/status", ex -> respond(ex, 200, "application/json", JSON.writeValueAsString(status.get()) + "\n"));
            if (dashboard != null) {
                server.createContext("/dashboard.json", ex -> respond(ex, 200, "application/json",
                        JSON.writeValueAsString(dashboard.get()) + "\n"));
            }
            server.createContext("/", ex -> {
                String path = ex.getRequestURI().getPath();
                if (dashboard != null && ("/".equals(path) || "/index.html".equals(path))) {
                    respond(ex, 200, "text/html; charset=utf-8", DashboardPage.html());
                } else {
                    respond(ex, 404, "text/plain", "try /, /health/live, /health/ready, /metrics or /status\n");
                }
            });
            server.start();
            log.info("Ops endpoint on port {}: {}/health/live /health/ready /metrics /status", server.getAddress().getPort(),
                    dashboard == null ? "" : "/ (dashboard) ");
            return new OpsServer(server);
        } catch (IOException e) {
            throw new UncheckedIOException("HTTP_PORT " + port + ": cannot listen (" + e.getMessage() + ")", e);
        }
    }

    private static void respond(HttpExchange exchange, int code, String type, String body) throws IOException {
        try (exchange) {
            if (!"GET".equals(exchange.getRequestMethod()) && !"HEAD".equals(exchange.getRequestMethod())) {
                exchange.sendResponseHeaders(405, -1);
                return;
            }
            byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().set("Content-Type", type);
            exchange.sendResponseHeaders(code, bytes.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(bytes);
            }
        } catch (RuntimeException e) {
            log.warn("Ops endpoint {} failed: {}", exchange.getRequestURI(), e.toString());
        }
    }

    public int port() {
        return server.getAddress().getPort();
    }

    @Override
    public void close() {
        server.stop(0);
    }
}
