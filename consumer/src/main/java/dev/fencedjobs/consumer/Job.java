package dev.fencedjobs.consumer;

import dev.fencedjobs.lease.FencingToken;
import java.time.Instant;
import java.time.OffsetDateTime;

/**
 * A completed job as the consumer hands it to an {@link Effect}.
 *
 * @param jobId the job's id, the same on every redelivery; unique on one database, but a standby
 *     promoted after missing some commits can hand it out again to another job (see {@code createdAt})
 * @param resource the resource the effect touches
 * @param fencingToken the token of the leader that completed the job; never below the highest
 *     token already accepted for the resource when it reaches an effect, except for a late record
 *     of an earlier tenure (one that arrived after rows committed later; see {@code FenceDecisions})
 * @param payloadJson the job's payload, as JSON text
 * @param outboxId the job's outbox row: outbox ids are commit order
 * @param createdAt when the database inserted the job; with {@code jobId} the job's identity, which
 *     no rollback reissues. Null for a record written before it was recorded.
 */
public record Job(
        long jobId,
        String resource,
        FencingToken fencingToken,
        String payloadJson,
        OffsetDateTime dueAt,
        OffsetDateTime completedAt,
        long outboxId,
        OffsetDateTime createdAt) {

    /**
     * The key an external receiver must deduplicate by: stable across redeliveries and retries.
     * {@code fenced-job-<id>-<creation time in microseconds since the epoch>}, so that a job given a
     * reissued id after a failover has a key of its own; {@code fenced-job-<id>} for a record without
     * the creation time.
     */
    public String idempotencyKey() {
        if (createdAt == null) {
            return "fenced-job-" + jobId;
        }
        Instant at = createdAt.toInstant();
        return "fenced-job-" + jobId + "-" + (at.getEpochSecond() * 1_000_000 + at.getNano() / 1_000);
    }

    /** Whether two jobs with the same id are the same job: their creation times agree, or one is not known. */
    boolean sameJobAs(long otherId, OffsetDateTime otherCreatedAt) {
        return jobId == otherId && (createdAt == null || otherCreatedAt == null || createdAt.isEqual(otherCreatedAt));
    }
}
