package dev.fencedjobs.runtime.internal;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/** The dashboard's page: one self-contained HTML file (no CDN, no scripts from elsewhere) on the class path. */
final class DashboardPage {

    private static final String HTML = load();

    private DashboardPage() {}

    static String html() {
        return HTML;
    }

    private static String load() {
        try (InputStream in = DashboardPage.class.getResourceAsStream("dashboard.html")) {
            if (in == null) {
                throw new IllegalStateException("dashboard.html is missing from the runtime jar");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
