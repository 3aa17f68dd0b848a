package dev.fencedjobs.runtime.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.testing.exporter.InMemorySpanExporter;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.export.SimpleSpanProcessor;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A service without a lent OpenTelemetry uses the global one, and only once something installs it:
 * it never sets the global itself, so an application that registers its SDK after starting a
 * service still can, and the service's spans then go there, from its next look (once a second: the
 * look takes a lock).
 */
class TracingGlobalTest {

    @AfterEach
    void reset() {
        GlobalOpenTelemetry.resetForTest();
    }

    @Test
    void theGlobalOpenTelemetryIsUsedOnceInstalledAndNeverSetByAService() {
        GlobalOpenTelemetry.resetForTest();
        AtomicLong clock = new AtomicLong(7);
        Tracing tracing = Tracing.global(clock::get);
        assertThat(tracing.tracer().spanBuilder("before").startSpan().isRecording())
                .as("a no-op until installed")
                .isFalse();
        assertThat(GlobalOpenTelemetry.isSet())
                .as("left for the application to set")
                .isFalse();

        InMemorySpanExporter exported = InMemorySpanExporter.create();
        OpenTelemetrySdk.builder()
                .setTracerProvider(SdkTracerProvider.builder()
                        .addSpanProcessor(SimpleSpanProcessor.create(exported))
                        .build())
                .buildAndRegisterGlobal();
        clock.addAndGet(999_999_999);
        tracing.tracer()
                .spanBuilder("within a second of the last look")
                .startSpan()
                .end();
        clock.addAndGet(1);
        tracing.tracer().spanBuilder("after").startSpan().end();
        assertThat(exported.getFinishedSpanItems())
                .extracting(
                        s -> s.getName() + " " + s.getInstrumentationScopeInfo().getName())
                .containsExactly("after " + Tracing.SCOPE);
    }
}
