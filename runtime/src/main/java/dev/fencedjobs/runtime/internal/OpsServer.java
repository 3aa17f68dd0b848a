package dev.fencedjobs.runtime.internal;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.fencedjobs.runtime.OpsAccess;
import dev.fencedjobs.runtime.ServiceConfig;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.function.BiFunction;
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
 *   <li>{@code GET /}: the dashboard, one self-contained page that reads {@code /dashboard.json}, and
 *       {@code /dashboard/job?id=…} (or {@code ?key=…}) to find one job.
 * </ul>
 *
 * <p><b>The health endpoints never wait.</b> They answer on the server's own thread from flags
 * the service keeps, and touch nothing else. Whatever may query the database ({@code /status},
 * {@code /dashboard.json}, {@code /dashboard/job}, {@code /metrics}) runs on one worker thread of its own with a short
 * queue; when the database stalls, those requests wait there or are refused at once with 503,
 * and a kubelet's liveness probe still gets its answer.
 *
 * <p><b>Access.</b> It listens on {@link OpsAccess#bindAddress()}; with a token set, the four
 * above answer 401 to a request without {@code Authorization: Bearer <token>}. The health
 * endpoints and the dashboard's page itself (which holds no data) stay open.
 */
public final class OpsServer implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(OpsServer.class);
    private static final ObjectMapper JSON = new ObjectMapper()
            .enable(SerializationFeature.INDENT_OUTPUT)
            .disable(SerializationFeature.FAIL_ON_EMPTY_BEANS);

    static {
        // The JDK's server writes a response's headers and body apart; with Nagle's algorithm on, the
        // body waits for the client's delayed ACK of the headers: 40 ms a request, measured on
        // /health/live. Read once, when the server's configuration class loads; an application that
        // set it already keeps its own.
        if (System.getProperty("sun.net.httpserver.nodelay") == null) {
            System.setProperty("sun.net.httpserver.nodelay", "true");
        }
    }

    /** Requests for data that may wait behind one in hand; more are refused at once. */
    private static final int QUEUED = 8;

    private final HttpServer server;
    private final ExecutorService worker;

    private OpsServer(HttpServer server, ExecutorService worker) {
        this.server = server;
        this.worker = worker;
    }

    /**
     * Starts on {@code port} (0 picks a free one) of {@code access}'s address.
     *
     * @param metrics the Prometheus text, or null when the meters are not ours to show
     * @param ready must answer from memory: it runs on the server's own thread
     * @param dashboard what {@code /dashboard.json} answers, or null for no dashboard
     */
    public static OpsServer start(
            int port,
            OpsAccess access,
            Supplier<String> metrics,
            BooleanSupplier ready,
            Supplier<Map<String, Object>> status,
            Supplier<Map<String, Object>> dashboard) {
        return start(port, access, metrics, ready, status, dashboard, null);
    }

    /**
     * As above, with the dashboard's lookup of one job: {@code /dashboard/job?id=…} or
     * {@code ?key=…} answers {@code job.apply(id, key)}.
     */
    public static OpsServer start(
            int port,
            OpsAccess access,
            Supplier<String> metrics,
            BooleanSupplier ready,
            Supplier<Map<String, Object>> status,
            Supplier<Map<String, Object>> dashboard,
            BiFunction<String, String, Map<String, Object>> job) {
        HttpServer server = listen(port, access);
        server.setExecutor(Executors.newSingleThreadExecutor(daemon("ops-http")));
        ExecutorService worker = new ThreadPoolExecutor(
                1, 1, 0, TimeUnit.MILLISECONDS, new ArrayBlockingQueue<>(QUEUED), daemon("ops-data"));
        health(server, ready);
        data(server, access, worker, metrics, status, dashboard, job);
        server.createContext("/", ex -> {
            String path = ex.getRequestURI().getPath();
            if (dashboard != null && ("/".equals(path) || "/index.html".equals(path))) {
                respond(ex, 200, "text/html; charset=utf-8", DashboardPage.html());
            } else {
                respond(ex, 404, "text/plain", "try /, /health/live, /health/ready, /metrics or /status\n");
            }
        });
        server.start();
        log.info(
                "Ops endpoint on {}:{}: {}/health/live /health/ready /metrics /status{}",
                access.bindAddress(),
                server.getAddress().getPort(),
                dashboard == null ? "" : "/ (dashboard) ",
                access.token() == null ? "" : " (status, dashboard data and metrics need the bearer token)");
        return new OpsServer(server, worker);
    }

    private static HttpServer listen(int port, OpsAccess access) {
        try {
            return HttpServer.create(new InetSocketAddress(InetAddress.getByName(access.bindAddress()), port), 0);
        } catch (IOException e) {
            throw new UncheckedIOException(
                    ServiceConfig.HTTP_PORT + " " + port + " on " + access.bindAddress() + ": cannot listen ("
                            + e.getMessage() + ")",
                    e);
        }
    }

    /** The health endpoints: answered at once on the server's own thread, never behind a stalled database read. */
    private static void health(HttpServer server, BooleanSupplier ready) {
        server.createContext("/health/live", ex -> respond(ex, 200, "text/plain", "live\n"));
        server.createContext("/health/ready", ex -> {
            boolean ok = ready.getAsBoolean();
            respond(ex, ok ? 200 : 503, "text/plain", ok ? "ready\n" : "not ready: database unreachable\n");
        });
    }

    /** The endpoints that read data, behind the bearer token when one is set, on the data worker. */
    private static void data(
            HttpServer server,
            OpsAccess access,
            ExecutorService worker,
            Supplier<String> metrics,
            Supplier<Map<String, Object>> status,
            Supplier<Map<String, Object>> dashboard,
            BiFunction<String, String, Map<String, Object>> job) {
        server.createContext(
                "/metrics",
                ex -> guarded(
                        ex,
                        access,
                        worker,
                        () -> metrics == null
                                ? new Reply(
                                        404,
                                        "text/plain",
                                        "this service's meters go to the registry of the application that embeds it\n")
                                : new Reply(200, "text/plain; version=0.0.4; charset=utf-8", metrics.get())));
        server.createContext(
                "/status",
                ex -> guarded(
                        ex,
                        access,
                        worker,
                        () -> new Reply(200, "application/json", JSON.writeValueAsString(status.get()) + "\n")));
        if (dashboard != null) {
            server.createContext(
                    "/dashboard.json",
                    ex -> guarded(
                            ex,
                            access,
                            worker,
                            () -> new Reply(200, "application/json", JSON.writeValueAsString(dashboard.get()) + "\n")));
        }
        if (job != null) {
            server.createContext(
                    "/dashboard/job",
                    ex -> guarded(ex, access, worker, () -> {
                        Map<String, String> query = query(ex.getRequestURI().getRawQuery());
                        return new Reply(
                                200,
                                "application/json",
                                JSON.writeValueAsString(job.apply(query.get("id"), query.get("key"))) + "\n");
                    }));
        }
    }

    /** A query string's parameters, decoded; the last of a repeated one. */
    static Map<String, String> query(String raw) {
        Map<String, String> params = new HashMap<>();
        if (raw == null || raw.isEmpty()) {
            return params;
        }
        for (String pair : raw.split("&")) {
            int eq = pair.indexOf('=');
            String name = URLDecoder.decode(eq < 0 ? pair : pair.substring(0, eq), StandardCharsets.UTF_8);
            params.put(name, eq < 0 ? "" : URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8));
        }
        return params;
    }

    private static ThreadFactory daemon(String name) {
        return r -> {
            Thread t = new Thread(r, name);
            t.setDaemon(true);
            return t;
        };
    }

    private record Reply(int code, String type, String body) {}

    private interface Work {
        Reply get() throws IOException;
    }

    /** Checks the token on the server's thread, then hands the work to the worker, or refuses it when the worker is behind. */
    private static void guarded(HttpExchange ex, OpsAccess access, ExecutorService worker, Work work)
            throws IOException {
        if (!access.admits(ex.getRequestHeaders().getFirst("Authorization"))) {
            ex.getResponseHeaders().set("WWW-Authenticate", "Bearer realm=\"fenced-jobs\"");
            respond(
                    ex,
                    401,
                    "text/plain",
                    "this endpoint needs the bearer token (OPS_TOKEN): Authorization: Bearer <token>\n");
            return;
        }
        try {
            worker.execute(() -> {
                try {
                    Reply r = work.get();
                    respond(ex, r.code(), r.type(), r.body());
                } catch (IOException | RuntimeException e) {
                    log.warn("Ops endpoint {} failed: {}", ex.getRequestURI(), e.toString());
                    ex.close();
                }
            });
        } catch (RejectedExecutionException e) {
            respond(ex, 503, "text/plain", "busy: earlier requests are still waiting for the database; try again\n");
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
        worker.shutdownNow();
    }
}
