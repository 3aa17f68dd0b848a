package dev.fencedjobs.consumer;

import java.time.OffsetDateTime;

/**
 * A completed job as the consumer hands it to an {@link Effect}.
 *
 * @param jobId the job's id: unique, and the same on every redelivery
 * @param resource the resource the effect touches
 * @param fencingToken the token of the leader that completed the job; never below the highest
 *     token already accepted for the resource when it reaches an effect, except for a late record
 *     of an earlier tenure (one that arrived after rows committed later; see {@code BatchProcessor})
 * @param payloadJson the job's payload, as JSON text
 * @param outboxId the job's outbox row: outbox ids are commit order
 */
public record Job(long jobId, String resource, long fencingToken, String payloadJson, OffsetDateTime dueAt,
        OffsetDateTime completedAt, long outboxId) {

    /** The key an external receiver must deduplicate by: stable across redeliveries and retries. */
    public String idempotencyKey() {
        return "fenced-job-" + jobId;
    }
}
