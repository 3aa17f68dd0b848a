package dev.fencedjobs.lease;

import dev.fencedjobs.db.internal.Ticker;
import java.time.OffsetDateTime;

/**
 * A successful acquisition or renewal.
 *
 * @param role the role held
 * @param holderId who holds it
 * @param token the fencing token: the same on a renewal, one more on every takeover
 * @param expiresAt lease expiry in database time, as the database wrote it
 * @param localDeadlineNanos {@link Ticker} reading by which the holder should stop starting work:
 *     the reading taken before the request was sent, plus the lease duration. Scheduling only;
 *     the in-transaction guard is what protects data.
 */
public record Grant(
        String role, String holderId, FencingToken token, OffsetDateTime expiresAt, long localDeadlineNanos) {}
