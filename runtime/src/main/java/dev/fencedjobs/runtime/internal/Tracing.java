package dev.fencedjobs.runtime.internal;

import io.opentelemetry.api.GlobalOpenTelemetry;
import io.opentelemetry.api.OpenTelemetry;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.Tracer;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapGetter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The services' spans, through the OpenTelemetry API only: a no-op unless the application lends an
 * OpenTelemetry ({@code openTelemetry(…)} on a builder) or the OpenTelemetry Java agent installs
 * one. Names and attributes follow OpenTelemetry's messaging semantic conventions (docs/tracing.md);
 * ours are under {@code fencedjobs.}.
 */
public final class Tracing {

    /** The instrumentation scope of every span the services make. */
    public static final String SCOPE = "dev.fencedjobs";

    public static final AttributeKey<String> MESSAGING_SYSTEM = AttributeKey.stringKey("messaging.system");
    public static final AttributeKey<String> DESTINATION = AttributeKey.stringKey("messaging.destination.name");
    public static final AttributeKey<String> OPERATION_TYPE = AttributeKey.stringKey("messaging.operation.type");
    public static final AttributeKey<String> OPERATION_NAME = AttributeKey.stringKey("messaging.operation.name");
    public static final AttributeKey<Long> BATCH_COUNT = AttributeKey.longKey("messaging.batch.message_count");
    public static final AttributeKey<String> PARTITION = AttributeKey.stringKey("messaging.destination.partition.id");
    public static final AttributeKey<Long> OFFSET = AttributeKey.longKey("messaging.kafka.offset");
    public static final AttributeKey<String> MESSAGE_KEY = AttributeKey.stringKey("messaging.kafka.message.key");
    public static final AttributeKey<String> CONSUMER_GROUP = AttributeKey.stringKey("messaging.consumer.group.name");
    public static final AttributeKey<Long> JOB_ID = AttributeKey.longKey("fencedjobs.job.id");
    public static final AttributeKey<String> RESOURCE = AttributeKey.stringKey("fencedjobs.resource");
    public static final AttributeKey<Long> FENCING_TOKEN = AttributeKey.longKey("fencedjobs.fencing_token");
    public static final AttributeKey<Long> OUTBOX_ID = AttributeKey.longKey("fencedjobs.outbox.id");
    public static final AttributeKey<Long> FIRST_OUTBOX_ID = AttributeKey.longKey("fencedjobs.outbox.first_id");
    public static final AttributeKey<Long> LAST_OUTBOX_ID = AttributeKey.longKey("fencedjobs.outbox.last_id");
    public static final AttributeKey<Long> LEASE_TOKEN = AttributeKey.longKey("fencedjobs.lease.fencing_token");
    public static final AttributeKey<String> OUTCOME = AttributeKey.stringKey("fencedjobs.outcome");
    public static final AttributeKey<Long> BATCH_COMPLETED = AttributeKey.longKey("fencedjobs.batch.completed");
    public static final AttributeKey<String> BATCH_PATH = AttributeKey.stringKey("fencedjobs.batch.path");
    /** On a link: what the linked span is to this one ({@code first attempt}). */
    public static final AttributeKey<String> LINK_KIND = AttributeKey.stringKey("fencedjobs.link.kind");
    /** On a patient retry's span: which attempt it is, the first being the one that failed. */
    public static final AttributeKey<Long> ATTEMPT = AttributeKey.longKey("fencedjobs.attempt");

    private static final TextMapGetter<Headers> HEADERS = new TextMapGetter<>() {
        // Deprecated in the API, which answers no keys by default; still asked by propagators that read
        // keys by prefix (Jaeger's baggage), which an application may install.
        @SuppressWarnings("deprecation")
        @Override
        public Iterable<String> keys(Headers carrier) {
            List<String> keys = new ArrayList<>();
            for (Header h : carrier) {
                keys.add(h.key());
            }
            return keys;
        }

        @Override
        public String get(Headers carrier, String key) {
            Header h = carrier == null ? null : carrier.lastHeader(key);
            return h == null || h.value() == null ? null : new String(h.value(), StandardCharsets.US_ASCII);
        }
    };

    private static final TextMapGetter<Map<String, String>> MAP = new TextMapGetter<>() {
        @SuppressWarnings("deprecation") // as HEADERS' keys
        @Override
        public Iterable<String> keys(Map<String, String> carrier) {
            return carrier.keySet();
        }

        @Override
        public String get(Map<String, String> carrier, String key) {
            return carrier == null ? null : carrier.get(key);
        }
    };

    private static final Tracer NOOP = OpenTelemetry.noop().getTracer(SCOPE);

    /** How often {@link #global()} looks whether the global OpenTelemetry was installed: the look takes a lock. */
    private static final long LOOK_EVERY_NANOS = 1_000_000_000L;

    /** Null until the global OpenTelemetry is installed, for {@link #global()}. */
    private volatile Tracer tracer;
    /** For {@link #global()}: its clock, and when it looks next; racy on purpose: an extra look is harmless. */
    private final LongSupplier nanoTime;

    private long nextLook;

    /** Spans to {@code openTelemetry}. */
    public Tracing(OpenTelemetry openTelemetry) {
        this.tracer = openTelemetry.getTracer(SCOPE);
        this.nanoTime = System::nanoTime;
    }

    private Tracing(LongSupplier nanoTime) {
        this.nanoTime = nanoTime;
        this.nextLook = nanoTime.getAsLong();
    }

    /**
     * Spans to {@link GlobalOpenTelemetry} once something installs it (the Java agent does, before
     * {@code main}; looked for at most once a second): until then a no-op, and the global is left unset, so an application that
     * registers its SDK after starting a service still can ({@code GlobalOpenTelemetry.get()} would
     * have set a no-op for good).
     */
    public static Tracing global() {
        return global(System::nanoTime);
    }

    /** {@link #global()} on the clock {@code nanoTime}. */
    static Tracing global(LongSupplier nanoTime) {
        return new Tracing(nanoTime);
    }

    public Tracer tracer() {
        Tracer t = tracer;
        if (t != null) {
            return t;
        }
        long now = nanoTime.getAsLong();
        if (now - nextLook >= 0) {
            nextLook = now + LOOK_EVERY_NANOS;
            if (GlobalOpenTelemetry.isSet()) {
                t = GlobalOpenTelemetry.get().getTracer(SCOPE);
                tracer = t;
                return t;
            }
        }
        return NOOP;
    }

    /**
     * Whether spans may record: an OpenTelemetry was lent, or the global one installed. False
     * while {@link #tracer()} is the no-op, when a caller may skip what it does only for its spans
     * (reading a record's trace headers, for one: a consumer's header keys are decoded on first
     * use, and a header that is absent is looked for in every key).
     */
    public boolean installed() {
        return tracer() != NOOP;
    }

    /**
     * The job's context that a record's {@code traceparent} and {@code tracestate} headers carry (the
     * producer's, as the relay sent it), on top of the root context; the root context when the
     * record has none. W3C always: those are the headers the relay writes, whatever propagators the
     * application configured.
     */
    public static Context jobContext(Headers headers) {
        if (headers.lastHeader(TraceContext.TRACEPARENT_HEADER) == null) {
            return Context.root();
        }
        return W3CTraceContextPropagator.getInstance().extract(Context.root(), headers, HEADERS);
    }

    /** The job's context as kept in {@code jobs} and {@code outbox}. */
    public static Context jobContext(TraceContext trace) {
        Map<String, String> carrier = new HashMap<>(4);
        carrier.put(TraceContext.TRACEPARENT_HEADER, trace.traceparent());
        if (trace.tracestate() != null) {
            carrier.put(TraceContext.TRACESTATE_HEADER, trace.tracestate());
        }
        return W3CTraceContextPropagator.getInstance().extract(Context.root(), carrier, MAP);
    }

    /** The span context of the job's producer that {@link #jobContext} holds; invalid when none. */
    public static SpanContext producer(Context jobContext) {
        return Span.fromContext(jobContext).getSpanContext();
    }
}
