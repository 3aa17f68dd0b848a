package dev.fencedjobs.consumer;

import dev.fencedjobs.consumer.FenceDecisions.Fence;
import dev.fencedjobs.consumer.FenceDecisions.Tenure;
import dev.fencedjobs.runtime.internal.Envelope;
import java.util.Locale;
import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * What the fence made of one record of a batch, before the claims: the record, whether the fence
 * admitted it, and the resource's fence as it stood for this record ({@code before}; null for a
 * dead letter, which no fence decides).
 */
record Decision(Candidate candidate, Outcome outcome, Fence before) {

    /** How a job's claim row ends, as {@code consumer_processed.outcome} stores it. */
    enum Outcome {
        APPLIED,
        REJECTED,
        DEAD_LETTER;

        String stored() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    /** A parsed record, with the tenure of its token (either part null when not known). */
    record Candidate(ConsumerRecord<String, byte[]> record, Job job, Tenure tenure) {

        static Candidate of(ConsumerRecord<String, byte[]> record, Envelope e) {
            return new Candidate(
                    record, Records.jobOf(e), new Tenure(e.tokenHolder(), Records.asStored(e.tokenAcquiredAt())));
        }
    }

    /** A reuse to report: of a job id ({@code kind} "job_id", with what was processed under it) or of a token ("token"). */
    record Reuse(Decision decision, String kind, String previous) {}

    Job job() {
        return candidate.job();
    }

    ConsumerRecord<String, byte[]> record() {
        return candidate.record();
    }
}
