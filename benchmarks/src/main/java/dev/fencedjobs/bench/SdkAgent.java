package dev.fencedjobs.bench;

import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.propagation.ContextPropagators;
import io.opentelemetry.sdk.OpenTelemetrySdk;
import io.opentelemetry.sdk.common.CompletableResultCode;
import io.opentelemetry.sdk.trace.SdkTracerProvider;
import io.opentelemetry.sdk.trace.data.SpanData;
import io.opentelemetry.sdk.trace.export.BatchSpanProcessor;
import io.opentelemetry.sdk.trace.export.SpanExporter;
import java.lang.instrument.Instrumentation;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Collection;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The tracing phase's SDK in a service: this jar given as {@code -javaagent} (in {@code
 * JAVA_TOOL_OPTIONS}) installs, before the service's {@code main}, the OpenTelemetry SDK as the
 * global OpenTelemetry, which the services use once it is set. Every span is sampled and goes
 * through a batch span processor, as in production, to an in-memory exporter that keeps the last
 * {@value #KEPT} spans; the count of spans exported is printed to the service's log at exit.
 */
public final class SdkAgent {

    static final int KEPT = 10_000;
    /** What the service's log says at exit; the phase reads it. */
    static final String EXPORTED = "sdk agent: spans exported ";

    private SdkAgent() {}

    public static void premain(String arguments, Instrumentation instrumentation) {
        KeptSpans exporter = new KeptSpans();
        // A queue deep enough for a batch of thousands of records: a full queue drops spans, which would cost less than
        // keeping them.
        SdkTracerProvider tracerProvider = SdkTracerProvider.builder()
                .addSpanProcessor(BatchSpanProcessor.builder(exporter)
                        .setMaxQueueSize(65_536)
                        .setMaxExportBatchSize(2_048)
                        .setScheduleDelay(Duration.ofMillis(200))
                        .build())
                .build();
        OpenTelemetrySdk sdk = OpenTelemetrySdk.builder()
                .setTracerProvider(tracerProvider)
                .setPropagators(ContextPropagators.create(W3CTraceContextPropagator.getInstance()))
                .buildAndRegisterGlobal();
        Runtime.getRuntime()
                .addShutdownHook(new Thread(
                        () -> {
                            sdk.getSdkTracerProvider().shutdown().join(5, java.util.concurrent.TimeUnit.SECONDS);
                            System.out.println(EXPORTED + exporter.exported.get());
                        },
                        "sdk-agent-exit"));
    }

    /** An in-memory exporter that keeps the last {@value #KEPT} spans and counts them all. */
    private static final class KeptSpans implements SpanExporter {
        final AtomicLong exported = new AtomicLong();
        private final ArrayDeque<SpanData> kept = new ArrayDeque<>(KEPT);

        @Override
        public synchronized CompletableResultCode export(Collection<SpanData> spans) {
            for (SpanData span : spans) {
                if (kept.size() == KEPT) {
                    kept.removeFirst();
                }
                kept.addLast(span);
            }
            exported.addAndGet(spans.size());
            return CompletableResultCode.ofSuccess();
        }

        @Override
        public CompletableResultCode flush() {
            return CompletableResultCode.ofSuccess();
        }

        @Override
        public CompletableResultCode shutdown() {
            return CompletableResultCode.ofSuccess();
        }
    }
}
