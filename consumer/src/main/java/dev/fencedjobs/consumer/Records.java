package dev.fencedjobs.consumer;

import dev.fencedjobs.runtime.internal.Envelope;
import java.nio.charset.StandardCharsets;
import java.time.OffsetDateTime;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/** Reading a job out of a record, and showing a record in logs and in what the consumer stores. */
final class Records {

    /** Reads the job out of a record whose batch failed in the effect, for the one-by-one retry; null when it cannot be read. */
    static Job jobOf(ConsumerRecord<String, byte[]> record) {
        try {
            return jobOf(Envelope.parse(record.value()));
        } catch (Envelope.InvalidEnvelope e) {
            return null;
        }
    }

    static Job jobOf(Envelope e) {
        return new Job(
                e.jobId(),
                e.resource(),
                e.fencingToken(),
                e.payloadJson(),
                e.dueAt(),
                e.completedAt(),
                e.outboxId(),
                asStored(e.jobCreatedAt()));
    }

    /**
     * The time as PostgreSQL stores it: microseconds, rounded half to even. Identities read from
     * the consumer's tables are compared with those from records, and a record written by anything
     * but the relay (which copies the database's values) may carry nanoseconds: without this, a job
     * would never equal itself and every record of it would be taken for a reuse.
     */
    static OffsetDateTime asStored(OffsetDateTime t) {
        if (t == null) {
            return null;
        }
        int nanos = t.getNano();
        int below = nanos % 1000;
        OffsetDateTime micros = t.minusNanos(below);
        if (below > 500 || (below == 500 && (nanos / 1000) % 2 == 1)) {
            micros = micros.plusNanos(1000);
        }
        return micros;
    }

    static String truncate(String s, int max) {
        return s.length() <= max ? s : s.substring(0, max - 1) + "…";
    }

    static String describe(ConsumerRecord<String, byte[]> r) {
        return r.topic() + "-" + r.partition() + "@" + r.offset() + " key=" + r.key() + " value="
                + (r.value() == null ? "null" : truncate(new String(r.value(), StandardCharsets.UTF_8), 200));
    }

    private Records() {}
}
