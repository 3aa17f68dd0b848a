package dev.fencedjobs.consumer;

import dev.fencedjobs.lease.FencingToken;
import java.time.OffsetDateTime;

/**
 * The consumer's exactly-once decisions, apart from their storage: pure functions of what the
 * consumer's tables held when the batch locked them. {@link FenceStore} and {@link ClaimStore} read
 * and write the tables and {@link BatchProcessor} runs the steps; everything the consumer decides
 * about one record is decided here, and FenceDecisionsTest covers every outcome.
 *
 * <p><b>Unknown</b> is {@code null} here and {@code NULL} in the tables: a tenure's holder or
 * acquisition time, a job's creation time (records of relays older than those fields), a resource's
 * highest token before any record of it was applied. Two columns keep an older encoding: {@code
 * consumer_resource_fence.highest_token} is 0 for a fence row locked before any record was applied
 * (read here as no token), and {@code consumer_resource_fence.token_first_outbox_id} is 0 when not known
 * (it is {@code NOT NULL}, and fences written before it existed hold 0), read here as {@link
 * Fence#UNKNOWN_OUTBOX_ID}. The {@code '-infinity'} in {@code consumer_waiting}'s unique index is no
 * value: it makes a job without a creation time unique by its id alone, as {@code NULL}s are
 * distinct in a unique index.
 */
final class FenceDecisions {

    /** How one record ends. */
    enum Verdict {
        /** Applied. */
        APPLIED,
        /** Applied, though below an outbox id already applied for its resource (out of commit order): counted and reported. */
        LATE,
        /** Applied as a new job: its id was processed before with another creation time (ids handed out again after a rollback). */
        REUSED,
        /** Not applied: a token below the resource's highest, and not a late row of an earlier tenure. Recorded as rejected. */
        STALE,
        /** Not applied: its job was processed already (earlier, in this batch, or by another instance now). */
        DUPLICATE,
        /** Not decided yet: its resource has records waiting for a patient retry, and it waits behind them. */
        WAITING
    }

    /** What claiming a record's job id found. */
    enum Claim {
        /** Nobody held the id: this record's job has it now. */
        NEW,
        /** The same job held it (or a creation time is not known on either side, and the id alone decides). */
        SAME_JOB,
        /** A job created at another time held it: this record is a new job under a reused id. */
        OTHER_JOB;

        /** The claim on a job id created at {@code createdAt}, where the id was held ({@code held}) by a job created at {@code heldCreatedAt}. */
        static Claim of(boolean held, OffsetDateTime heldCreatedAt, OffsetDateTime createdAt) {
            if (!held) {
                return NEW;
            }
            if (heldCreatedAt == null || createdAt == null || heldCreatedAt.isEqual(createdAt)) {
                return SAME_JOB;
            }
            return OTHER_JOB;
        }
    }

    /** Who held a token, since when; either part null when not known. */
    record Tenure(String holder, OffsetDateTime acquiredAt) {
        static final Tenure UNKNOWN = new Tenure(null, null);

        boolean known() {
            return holder != null && acquiredAt != null;
        }

        /** Both known and different: the same token was issued twice. */
        boolean contradicts(Tenure other) {
            return known() && other.known() && !(holder.equals(other.holder) && acquiredAt.isEqual(other.acquiredAt));
        }

        @Override
        public String toString() {
            return known() ? holder + " since " + acquiredAt : "(tenure not known)";
        }
    }

    /**
     * What the fence of one resource knows: its highest token (null: none applied yet) and that
     * token's tenure, the first outbox id applied with it ({@link #UNKNOWN_OUTBOX_ID}: not known)
     * and the highest outbox id applied.
     */
    record Fence(FencingToken highestToken, long tokenFirstOutboxId, long highestOutboxId, Tenure tenure) {

        static final long UNKNOWN_OUTBOX_ID = 0;
        /** A resource never seen. */
        static final Fence NEW = new Fence(null, UNKNOWN_OUTBOX_ID, 0, Tenure.UNKNOWN);

        /**
         * The fence after applying a record with this outbox id, token and tenure. A higher token
         * starts over from its first row: in commit order every row before it has a lower outbox id,
         * and after a failover the promoted database may hand out outbox ids already seen.
         */
        Fence after(long outboxId, FencingToken token, Tenure recordTenure) {
            if (highestToken == null || token.isAfter(highestToken)) {
                return new Fence(token, outboxId, outboxId, recordTenure);
            }
            long highestOutbox = Math.max(highestOutboxId, outboxId);
            if (token.equals(highestToken)) {
                long first = tokenFirstOutboxId != UNKNOWN_OUTBOX_ID
                        ? Math.min(tokenFirstOutboxId, outboxId)
                        : UNKNOWN_OUTBOX_ID;
                return new Fence(token, first, highestOutbox, recordTenure.known() ? recordTenure : tenure);
            }
            return new Fence(highestToken, tokenFirstOutboxId, highestOutbox, tenure);
        }

        /** The record carries the highest token, from another tenure: reported beside its verdict, and applied. */
        boolean tokenReusedBy(FencingToken token, Tenure recordTenure) {
            return token.equals(highestToken) && tenure.contradicts(recordTenure);
        }

        /** Below an outbox id applied, without a higher token (which starts over: see {@link #after}). */
        boolean late(long outboxId, FencingToken token) {
            return highestToken != null && !token.isAfter(highestToken) && outboxId < highestOutboxId;
        }

        /**
         * An equal or higher token is admitted; a lower one only as a late row of an earlier tenure:
         * below where the higher token begins. Where that is not known, a lower token is stale.
         */
        boolean admits(long outboxId, FencingToken token) {
            return highestToken == null
                    || !token.isBefore(highestToken)
                    || (tokenFirstOutboxId != UNKNOWN_OUTBOX_ID && outboxId < tokenFirstOutboxId);
        }
    }

    /**
     * One record's verdict, in the order the consumer decides: a record behind waiting records
     * waits; a job processed already is a duplicate; then the fence ({@code before}, as it stood
     * for this record in the batch) admits it or finds it stale; an admitted record under a reused
     * id is a new job; else it is late or simply applied.
     */
    static Verdict verdict(boolean waitingBehind, Claim claim, Fence before, long outboxId, FencingToken token) {
        if (waitingBehind) {
            return Verdict.WAITING;
        }
        if (claim == Claim.SAME_JOB) {
            return Verdict.DUPLICATE;
        }
        if (!before.admits(outboxId, token)) {
            return Verdict.STALE;
        }
        if (claim == Claim.OTHER_JOB) {
            return Verdict.REUSED;
        }
        return before.late(outboxId, token) ? Verdict.LATE : Verdict.APPLIED;
    }

    private FenceDecisions() {}
}
