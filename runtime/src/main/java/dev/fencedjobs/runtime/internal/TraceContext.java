package dev.fencedjobs.runtime.internal;

import java.util.HexFormat;
import java.util.concurrent.ThreadLocalRandom;

/**
 * A job's W3C trace context (https://www.w3.org/TR/trace-context/): the {@code traceparent} and
 * {@code tracestate} a producer gave it, kept in {@code jobs} and {@code outbox}, and sent by the
 * relay as the Kafka headers of the same names, which OpenTelemetry's Kafka instrumentation reads.
 * The database checks the format when the job is inserted (migration V12), so a context read back
 * from it is well formed. The headers are not signed: they steer only tracing, never a decision.
 */
public record TraceContext(String traceparent, String tracestate) {

    public static final String TRACEPARENT_HEADER = "traceparent";
    public static final String TRACESTATE_HEADER = "tracestate";

    /** The job's context as stored: null when the job has none. */
    public static TraceContext of(String traceparent, String tracestate) {
        return traceparent == null ? null : new TraceContext(traceparent, tracestate);
    }

    /**
     * A new trace for a job nobody submitted in one, such as a schedule's occurrence: random trace
     * and parent ids, sampled (flags 01), so a parent-based sampler keeps it.
     */
    public static String newTraceparent() {
        ThreadLocalRandom random = ThreadLocalRandom.current();
        HexFormat hex = HexFormat.of();
        long high;
        long low;
        long parent;
        do {
            high = random.nextLong();
            low = random.nextLong();
        } while (high == 0 && low == 0);
        do {
            parent = random.nextLong();
        } while (parent == 0);
        return "00-" + hex.toHexDigits(high) + hex.toHexDigits(low) + "-" + hex.toHexDigits(parent) + "-01";
    }

    /** The trace id: the 32 hex digits after the version. */
    public String traceId() {
        return traceparent.substring(3, 35);
    }
}
