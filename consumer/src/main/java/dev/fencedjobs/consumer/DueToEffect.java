package dev.fencedjobs.consumer;

import dev.fencedjobs.runtime.internal.LatencyWindow;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * The time from each applied job's due time to the commit of its effect, for the dashboard's chart:
 * notes the due time of each job whose effect runs (around {@code inner}), and records them once
 * the batch committed; a batch that rolls back records nothing (its jobs are applied again). The
 * due time is the database's clock and the commit this JVM's, so clocks apart skew it (a negative
 * one counts as 0). Used by the consumer's loop thread only.
 */
final class DueToEffect implements BatchProcessor.Handling {

    private final BatchProcessor.Handling inner;
    private final LatencyWindow window;
    private final List<OffsetDateTime> due = new ArrayList<>();

    DueToEffect(BatchProcessor.Handling inner, LatencyWindow window) {
        this.inner = inner;
        this.window = window;
    }

    LatencyWindow window() {
        return window;
    }

    /** A batch's transaction begins. */
    void begin() {
        due.clear();
    }

    @Override
    public BatchProcessor.Handled enter(ConsumerRecord<String, byte[]> record, Job job, boolean current) {
        if (job.dueAt() != null) {
            due.add(job.dueAt());
        }
        return inner.enter(record, job, current);
    }

    @Override
    public String storing(ConsumerRecord<String, byte[]> record) {
        return inner.storing(record);
    }

    /** The batch begun last committed at {@code at}. */
    void committed(Instant at) {
        long atNanos = at.getEpochSecond() * 1_000_000_000L + at.getNano();
        for (OffsetDateTime d : due) {
            window.record(atNanos - (d.toEpochSecond() * 1_000_000_000L + d.getNano()));
        }
        due.clear();
    }
}
