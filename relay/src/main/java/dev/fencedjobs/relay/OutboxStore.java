package dev.fencedjobs.relay;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.runtime.internal.TraceContext;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Map;

/** The relay's database operations on the outbox. */
interface OutboxStore {

    /** Up to {@code limit} unpublished rows (past the relay's position) in id order, which is commit order. */
    List<OutboxRow> unpublished(int limit);

    /**
     * In one transaction guarded by the relay's lease: records the errors of {@code failed} and
     * moves the relay's position to the last of these rows, which together are the first
     * unpublished rows in id order. False, and nothing marked, if the guard fails.
     */
    boolean markPublished(Grant grant, List<Long> published, Map<Long, String> failed);

    /** Deletes up to {@code limit} published rows completed more than {@code retention} ago. */
    int purgePublished(Duration retention, int limit);

    Lag lag();

    /**
     * One row; {@code jobCreatedAt} is null for a row written before it was recorded, the token's
     * holder and acquisition time are null when the takeover history lacks the token, and
     * {@code trace} is null for a job submitted without a trace context.
     */
    record OutboxRow(
            long id,
            long jobId,
            String resource,
            FencingToken token,
            String payloadJson,
            OffsetDateTime dueAt,
            OffsetDateTime completedAt,
            OffsetDateTime jobCreatedAt,
            String tokenHolder,
            OffsetDateTime tokenAcquiredAt,
            TraceContext trace) {}

    /** Unpublished rows and the age of the oldest, in database time. */
    record Lag(long rows, double oldestSeconds) {}
}
