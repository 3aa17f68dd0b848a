package dev.fencedjobs.runtime.internal;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.fencedjobs.lease.FencingToken;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import java.time.format.DateTimeParseException;

/**
 * The record value the relay publishes, version 1: a JSON object
 *
 * <pre>{@code
 * {"version":1,"outboxId":812,"jobId":4711,"resource":"account-17","fencingToken":3,
 *  "payload":{"action":"charge"},"dueAt":"2026-11-30T08:00:00Z","completedAt":"2026-11-30T08:00:00.004Z",
 *  "jobCreatedAt":"2026-11-30T07:59:58.120Z","tokenHolder":"host-1/4242/9f1c","tokenAcquiredAt":"2026-11-30T07:00:00.001Z"}
 * }</pre>
 *
 * <p>The last three fields are optional (records written before they existed lack them), and they
 * are what tells two things apart that a database rolled back by a failover can give the same
 * number: {@code jobId} with {@code jobCreatedAt} is the job's identity, and {@code fencingToken}
 * with {@code tokenHolder} and {@code tokenAcquiredAt} is the tenure's.
 *
 * <p>The record key is the resource (UTF-8), so a resource's records share a partition and keep
 * their order. Headers repeat what a consumer may want before parsing: {@value #JOB_ID_HEADER},
 * {@value #TOKEN_HEADER}, {@value #OUTBOX_ID_HEADER} and {@value #VERSION_HEADER}, each a decimal
 * number in UTF-8. A consumer must ignore fields it does not know.
 */
public record Envelope(
        int version,
        long outboxId,
        long jobId,
        String resource,
        FencingToken fencingToken,
        String payloadJson,
        OffsetDateTime dueAt,
        OffsetDateTime completedAt,
        OffsetDateTime jobCreatedAt,
        String tokenHolder,
        OffsetDateTime tokenAcquiredAt) {

    public static final int VERSION = 1;
    public static final String JOB_ID_HEADER = "fj-job-id";
    public static final String TOKEN_HEADER = "fj-fencing-token";
    public static final String OUTBOX_ID_HEADER = "fj-outbox-id";
    public static final String VERSION_HEADER = "fj-envelope-version";

    /** An envelope without the optional identity fields. */
    public Envelope(
            int version,
            long outboxId,
            long jobId,
            String resource,
            FencingToken fencingToken,
            String payloadJson,
            OffsetDateTime dueAt,
            OffsetDateTime completedAt) {
        this(version, outboxId, jobId, resource, fencingToken, payloadJson, dueAt, completedAt, null, null, null);
    }

    private static final JsonFactory FACTORY = new JsonFactory();
    private static final ObjectMapper MAPPER = new ObjectMapper();

    /** Writes the envelope; the payload is copied in as it is (it is jsonb text, so valid JSON). */
    public byte[] toJson() {
        ByteArrayOutputStream out = new ByteArrayOutputStream(256 + payloadJson.length());
        try (JsonGenerator g = FACTORY.createGenerator(out)) {
            g.writeStartObject();
            g.writeNumberField("version", version);
            g.writeNumberField("outboxId", outboxId);
            g.writeNumberField("jobId", jobId);
            g.writeStringField("resource", resource);
            g.writeNumberField("fencingToken", fencingToken.value());
            g.writeFieldName("payload");
            g.writeRawValue(payloadJson);
            g.writeStringField("dueAt", dueAt.toString());
            g.writeStringField("completedAt", completedAt.toString());
            if (jobCreatedAt != null) {
                g.writeStringField("jobCreatedAt", jobCreatedAt.toString());
            }
            if (tokenHolder != null) {
                g.writeStringField("tokenHolder", tokenHolder);
            }
            if (tokenAcquiredAt != null) {
                g.writeStringField("tokenAcquiredAt", tokenAcquiredAt.toString());
            }
            g.writeEndObject();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return out.toByteArray();
    }

    /**
     * Reads and checks an envelope. Throws {@link InvalidEnvelope} with the reason when the bytes
     * are not JSON, a required field is missing or has the wrong type, or the token is not positive.
     */
    public static Envelope parse(byte[] value) {
        if (value == null) {
            throw new InvalidEnvelope("no value (null record)");
        }
        JsonNode root;
        try {
            root = MAPPER.readTree(value);
        } catch (JsonProcessingException e) {
            throw new InvalidEnvelope("not JSON: " + e.getOriginalMessage());
        } catch (IOException e) {
            throw new InvalidEnvelope("not JSON: " + e.getMessage());
        }
        if (root == null || !root.isObject()) {
            throw new InvalidEnvelope("not a JSON object");
        }
        int version = (int) requiredLong(root, "version");
        if (version != VERSION) {
            throw new InvalidEnvelope(
                    "unsupported envelope version " + version + " (this consumer reads " + VERSION + ")");
        }
        long token = requiredLong(root, "fencingToken");
        if (token <= 0) {
            throw new InvalidEnvelope("fencingToken must be positive, got " + token);
        }
        long jobId = requiredLong(root, "jobId");
        if (jobId <= 0) {
            throw new InvalidEnvelope("jobId must be positive, got " + jobId);
        }
        JsonNode resource = root.get("resource");
        if (resource == null || !resource.isTextual() || resource.asText().isEmpty()) {
            throw new InvalidEnvelope("resource is missing or not a non-empty string");
        }
        JsonNode payload = root.get("payload");
        if (payload == null || payload.isMissingNode()) {
            throw new InvalidEnvelope("payload is missing");
        }
        JsonNode holder = root.get("tokenHolder");
        if (holder != null && !holder.isNull() && !holder.isTextual()) {
            throw new InvalidEnvelope("tokenHolder must be a string, got " + holder);
        }
        return new Envelope(
                version,
                requiredLong(root, "outboxId"),
                jobId,
                resource.asText(),
                FencingToken.of(token),
                payload.toString(),
                requiredTime(root, "dueAt"),
                requiredTime(root, "completedAt"),
                optionalTime(root, "jobCreatedAt"),
                holder == null || holder.isNull() ? null : holder.asText(),
                optionalTime(root, "tokenAcquiredAt"));
    }

    private static OffsetDateTime optionalTime(JsonNode root, String field) {
        JsonNode node = root.get(field);
        return node == null || node.isNull() ? null : requiredTime(root, field);
    }

    private static long requiredLong(JsonNode root, String field) {
        JsonNode node = root.get(field);
        if (node == null || node.isNull()) {
            throw new InvalidEnvelope(field + " is missing");
        }
        if (!node.isIntegralNumber() || !node.canConvertToLong()) {
            throw new InvalidEnvelope(field + " must be a whole number, got " + node);
        }
        return node.asLong();
    }

    private static OffsetDateTime requiredTime(JsonNode root, String field) {
        JsonNode node = root.get(field);
        if (node == null || !node.isTextual()) {
            throw new InvalidEnvelope(field + " is missing or not a string");
        }
        try {
            return OffsetDateTime.parse(node.asText());
        } catch (DateTimeParseException e) {
            throw new InvalidEnvelope(field + " is not an ISO-8601 timestamp: " + node.asText());
        }
    }

    public static byte[] header(long value) {
        return Long.toString(value).getBytes(StandardCharsets.UTF_8);
    }

    /** The reason an envelope was refused; it goes to the dead letters as it is. */
    public static final class InvalidEnvelope extends RuntimeException {
        private static final long serialVersionUID = 1L;

        public InvalidEnvelope(String reason) {
            super(reason);
        }
    }
}
