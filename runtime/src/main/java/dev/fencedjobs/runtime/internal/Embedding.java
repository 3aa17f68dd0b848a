package dev.fencedjobs.runtime.internal;

import io.micrometer.core.instrument.MeterRegistry;
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
 */
public record Embedding(DataSource dataSource, MeterRegistry meterRegistry, boolean opsServer) {

    /** A service on its own: its own pool, its own registry, its own ops endpoint. */
    public static final Embedding STANDALONE = new Embedding(null, null, true);
}
