package dev.fencedjobs.runtime.internal;

import io.micrometer.core.instrument.MeterRegistry;
import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.OpenTelemetry;
import javax.sql.DataSource;

/**
 * What an application that embeds a service lends it. Whatever is left out the service makes for
 * itself, as it does when it runs on its own.
 *
 * @param dataSource the application's pool, or null for a pool of the service's own built from its
 *     {@code DatabaseConfig}
 * @param meterRegistry where the service's meters go, or null for a Prometheus registry of its own
 *     (served at {@code /metrics})
 * @param opsServer whether the service listens on its {@code HTTP_PORT} for health, metrics, status
 *     and the dashboard
 * @param openTelemetry where the service's spans go, or null for {@link GlobalOpenTelemetry} (what
 *     the OpenTelemetry Java agent installs; a no-op without one)
 */
public record Embedding(
        DataSource dataSource, MeterRegistry meterRegistry, boolean opsServer, OpenTelemetry openTelemetry) {

    /** A service on its own: its own pool, its own registry, its own ops endpoint, the global OpenTelemetry. */
    public static final Embedding STANDALONE = new Embedding(null, null, true, null);

    /** The service's tracing: the lent OpenTelemetry's, else the global one's. */
    public Tracing tracing() {
        return openTelemetry != null ? new Tracing(openTelemetry) : Tracing.global();
    }
}
