package dev.fencedjobs.lease;

import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;
import static dev.fencedjobs.db.jooq.Tables.LEADER_LEASE;
import static org.jooq.impl.DSL.val;
import static org.jooq.impl.DSL.when;

import dev.fencedjobs.db.Settings;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.db.jooq.tables.records.LeaderLeaseRecord;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.Objects;
import java.util.Optional;
import java.util.function.Function;
import org.jooq.Condition;
import org.jooq.DSLContext;
import org.jooq.Field;
import org.jooq.InsertOnConflictConditionStep;
import org.jooq.Record1;
import org.jooq.UpdateConditionStep;
import org.jooq.impl.DSL;
import org.jooq.types.DayToSecond;

/**
 * The fenced lease of one role for one holder, as in the article "Leader Election Patterns".
 *
 * <ol>
 *   <li>{@link #acquireOrRenew()}: one upsert. It takes an absent or expired lease (token + 1, or 1
 *       for a new role), renews a live lease the caller holds (same token), and returns nothing
 *       while another holder's lease is live.
 *   <li>{@link #guard(DSLContext, FencingToken)}: inside the caller's transaction, locks the lease row and
 *       checks holder, token and expiry. A takeover then waits for that transaction to end, so a
 *       protected write that passed the guard commits before any newer holder exists.
 *   <li>{@link #release(FencingToken)}: ends a live lease early, only if it is still this holder's with this
 *       token; a newer holder's lease is never touched.
 * </ol>
 *
 * <p>Every expiry decision is made in database time, {@code clock_timestamp()}, which, unlike
 * {@code now()}, is not frozen at transaction start. The JVM clock is never consulted; the
 * {@link Ticker} only gives the holder a local deadline for scheduling. The row is never deleted,
 * so tokens never restart (a trigger also refuses it).
 */
public final class Lease implements LeaseOps {

    private final DSLContext dsl;
    private final String role;
    private final String holderId;
    private final Duration duration;
    private final Ticker ticker;

    public Lease(DSLContext dsl, String role, String holderId, Duration duration, Ticker ticker) {
        this.dsl = Objects.requireNonNull(dsl, "dsl");
        this.role = requireText("role", role);
        this.holderId = requireText("holderId", holderId);
        this.duration = Settings.requirePositive(LeaseConfig.DURATION, duration);
        this.ticker = Objects.requireNonNull(ticker, "ticker");
    }

    /** Acquires or renews; empty when another holder's lease is live (a lost race, not a fault). */
    @Override
    public Optional<Grant> acquireOrRenew() {
        long sentAt = ticker.nanoTime();
        return upsert().returning(LEADER_LEASE.FENCING_TOKEN, LEADER_LEASE.EXPIRES_AT)
                .fetchOptional()
                .map(r -> grant(r.getFencingToken(), r.getExpiresAt(), sentAt));
    }

    /**
     * {@link #acquireOrRenew()} that also takes the granted token's sign of life, in the same
     * statement ({@link LeaseSession}): the lock is taken before the statement commits, so no
     * session ever reads the new token without its sign of life held. {@code held} is the token
     * whose lock this session holds already (taken again, a session-level lock would be counted twice).
     */
    Optional<SignedGrant> acquireOrRenewSigned(FencingToken held) {
        long sentAt = ticker.nanoTime();
        return upsert().returningResult(LEADER_LEASE.FENCING_TOKEN, LEADER_LEASE.EXPIRES_AT, signOfLifeLock(held))
                .fetchOptional()
                .map(r -> new SignedGrant(grant(r.value1(), r.value2(), sentAt), r.value3()));
    }

    /** The one upsert: an absent or expired lease, or this holder's own, is granted; another's live lease is left alone. */
    private InsertOnConflictConditionStep<LeaderLeaseRecord> upsert() {
        Field<OffsetDateTime> expiry = CLOCK_TIMESTAMP.plus(val(DayToSecond.valueOf(duration)));
        return dsl.insertInto(LEADER_LEASE)
                .set(LEADER_LEASE.ROLE, role)
                .set(LEADER_LEASE.HOLDER_ID, holderId)
                .set(LEADER_LEASE.FENCING_TOKEN, 1L)
                .set(LEADER_LEASE.EXPIRES_AT, expiry)
                .onConflict(LEADER_LEASE.ROLE)
                .doUpdate()
                .set(LEADER_LEASE.HOLDER_ID, holderId)
                .set(
                        LEADER_LEASE.FENCING_TOKEN,
                        when(
                                        LEADER_LEASE
                                                .HOLDER_ID
                                                .eq(holderId)
                                                .and(LEADER_LEASE.EXPIRES_AT.gt(CLOCK_TIMESTAMP)),
                                        LEADER_LEASE.FENCING_TOKEN)
                                .otherwise(LEADER_LEASE.FENCING_TOKEN.plus(1L)))
                .set(LEADER_LEASE.EXPIRES_AT, expiry)
                .where(LEADER_LEASE.EXPIRES_AT.le(CLOCK_TIMESTAMP).or(LEADER_LEASE.HOLDER_ID.eq(holderId)));
    }

    private Grant grant(long token, OffsetDateTime expiresAt, long sentAt) {
        return new Grant(role, holderId, FencingToken.of(token), expiresAt, sentAt + duration.toNanos());
    }

    /**
     * In a {@code RETURNING} list: takes the returned token's sign of life on this session, unless
     * it is {@code held} already (null: none is); true when this session holds it. The token's low
     * 32 bits as a signed int are the lock's second key, as {@link FencingToken#lockKey()} gives them.
     */
    private Field<Boolean> signOfLifeLock(FencingToken held) {
        Condition heldHere = held == null ? DSL.falseCondition() : LEADER_LEASE.FENCING_TOKEN.eq(held.value());
        return DSL.field(
                "CASE WHEN {0} THEN true ELSE pg_try_advisory_lock({1}, ({2} & 4294967295)::bit(32)::int) END",
                Boolean.class, heldHere, val(signOfLifeKey(role)), LEADER_LEASE.FENCING_TOKEN);
    }

    /** A grant, and whether the session that sent the statement holds its token's sign of life. */
    record SignedGrant(Grant grant, boolean signOfLife) {}

    /**
     * Locks the lease row in the caller's transaction and checks that this holder still holds the
     * role with this token in database time. False means: write nothing, step down. The lock is
     * held until the caller's transaction ends, so keep that transaction short.
     */
    public boolean guard(DSLContext transaction, FencingToken token) {
        return transaction
                .select(LEADER_LEASE.FENCING_TOKEN)
                .from(LEADER_LEASE)
                .where(LEADER_LEASE.ROLE.eq(role))
                .and(LEADER_LEASE.HOLDER_ID.eq(holderId))
                .and(LEADER_LEASE.FENCING_TOKEN.eq(token.value()))
                .and(LEADER_LEASE.EXPIRES_AT.gt(CLOCK_TIMESTAMP))
                .forUpdate()
                .fetchOptional()
                .isPresent();
    }

    /**
     * Runs {@code work} in one transaction that first passes {@link #guard}: the protected write
     * commits only while this holder still holds the role with this token, and a takeover waits
     * for it. Empty, with nothing written, when the guard fails.
     */
    public <T> Optional<T> inGuardedTransaction(FencingToken token, Function<DSLContext, T> work) {
        return dsl.transactionResult(configuration -> {
            DSLContext tx = configuration.dsl();
            return guard(tx, token) ? Optional.of(work.apply(tx)) : Optional.<T>empty();
        });
    }

    /**
     * Ends this holder's live lease now, so a follower can take over without waiting for expiry.
     * Call it only after all leader work has stopped. Changes nothing, and returns false, when the
     * lease has expired or belongs to another holder or token.
     */
    @Override
    public boolean release(FencingToken token) {
        return release(dsl, role, holderId, token);
    }

    /** The conditional release, for operators who name the holder and token themselves. */
    public static boolean release(DSLContext dsl, String role, String holderId, FencingToken token) {
        return dsl.update(LEADER_LEASE)
                        .set(LEADER_LEASE.EXPIRES_AT, CLOCK_TIMESTAMP)
                        .where(LEADER_LEASE.ROLE.eq(role))
                        .and(LEADER_LEASE.HOLDER_ID.eq(holderId))
                        .and(LEADER_LEASE.FENCING_TOKEN.eq(token.value()))
                        .and(LEADER_LEASE.EXPIRES_AT.gt(CLOCK_TIMESTAMP))
                        .execute()
                == 1;
    }

    /**
     * How long the role's current lease has left, in database time; empty when there is no live
     * lease. For scheduling the next acquisition attempt only: by the time it is used the holder
     * may have renewed or released.
     */
    public Optional<Duration> remaining() {
        Field<Long> millis = DSL.field(
                "(extract(epoch FROM ({0} - clock_timestamp())) * 1000)::bigint", Long.class, LEADER_LEASE.EXPIRES_AT);
        return dsl.select(millis)
                .from(LEADER_LEASE)
                .where(LEADER_LEASE.ROLE.eq(role))
                .fetchOptional(Record1::value1)
                .filter(ms -> ms > 0)
                .map(Duration::ofMillis);
    }

    /**
     * Takes the role over from token {@code token} now, whatever its expiry: for a follower that has
     * proved that token's holder session gone ({@link HolderWatch}). One update under the same rules
     * as every acquisition (database time, the triggers' token check and history row); empty when
     * the token has moved on meanwhile. Safety does not rest on the proof: a holder that still runs
     * fails its next guard, as after any takeover.
     */
    @Override
    public Optional<Grant> takeOver(FencingToken token) {
        long sentAt = ticker.nanoTime();
        return takeOverUpdate(token)
                .returning(LEADER_LEASE.FENCING_TOKEN, LEADER_LEASE.EXPIRES_AT)
                .fetchOptional()
                .map(r -> grant(r.getFencingToken(), r.getExpiresAt(), sentAt));
    }

    /** {@link #takeOver(FencingToken)} that also takes the new token's sign of life in the same statement, as {@link #acquireOrRenewSigned}. */
    Optional<SignedGrant> takeOverSigned(FencingToken token, FencingToken held) {
        long sentAt = ticker.nanoTime();
        return takeOverUpdate(token)
                .returningResult(LEADER_LEASE.FENCING_TOKEN, LEADER_LEASE.EXPIRES_AT, signOfLifeLock(held))
                .fetchOptional()
                .map(r -> new SignedGrant(grant(r.value1(), r.value2(), sentAt), r.value3()));
    }

    private UpdateConditionStep<LeaderLeaseRecord> takeOverUpdate(FencingToken token) {
        Field<OffsetDateTime> expiry = CLOCK_TIMESTAMP.plus(val(DayToSecond.valueOf(duration)));
        return dsl.update(LEADER_LEASE)
                .set(LEADER_LEASE.HOLDER_ID, holderId)
                .set(LEADER_LEASE.FENCING_TOKEN, LEADER_LEASE.FENCING_TOKEN.plus(1L))
                .set(LEADER_LEASE.EXPIRES_AT, expiry)
                .where(LEADER_LEASE.ROLE.eq(role))
                .and(LEADER_LEASE.FENCING_TOKEN.eq(token.value()));
    }

    /**
     * The role's holder as a follower sees it: who, which token, how long its lease has left in
     * database time (zero once expired), and whether a session holds that token's sign of life
     * ({@link #signOfLifeKey}). Empty when the role was never acquired.
     */
    @Override
    public Optional<Holder> holder() {
        Field<Long> millis = DSL.field(
                "greatest(0, (extract(epoch FROM ({0} - clock_timestamp())) * 1000)::bigint)",
                Long.class, LEADER_LEASE.EXPIRES_AT);
        Field<Boolean> alive = DSL.field(
                "EXISTS (SELECT 1 FROM pg_locks k WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 2"
                        + " AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                        + " AND k.classid = {0}::bigint::oid AND k.objid = ({1} & 4294967295)::oid)",
                Boolean.class, val(Integer.toUnsignedLong(signOfLifeKey(role))), LEADER_LEASE.FENCING_TOKEN);
        return dsl.select(LEADER_LEASE.HOLDER_ID, LEADER_LEASE.FENCING_TOKEN, millis, alive)
                .from(LEADER_LEASE)
                .where(LEADER_LEASE.ROLE.eq(role))
                .fetchOptional(r ->
                        new Holder(r.value1(), FencingToken.of(r.value2()), Duration.ofMillis(r.value3()), r.value4()));
    }

    /**
     * The role's current holder, read by a follower.
     *
     * @param remaining how long the lease has left, in database time; zero once it has expired
     * @param signOfLife whether some session holds the sign-of-life lock of {@code token}
     */
    public record Holder(String holderId, FencingToken token, Duration remaining, boolean signOfLife) {}

    /**
     * The first key of the role's sign-of-life lock, {@code pg_advisory_lock(key, token.lockKey())}: the
     * two-key form, so it never meets a one-key lock such as the migrations'. In {@code pg_locks}:
     * {@code locktype = 'advisory' AND objsubid = 2 AND classid = key} (as an unsigned number) and
     * {@code objid} the token's low 32 bits.
     */
    public static int signOfLifeKey(String role) {
        return ("fenced-jobs lease " + role).hashCode();
    }

    /** The same lease with its statements sent over another connection (a {@link LeaseSession}'s). */
    public Lease on(DSLContext other) {
        return new Lease(other, role, holderId, duration, ticker);
    }

    /** The role's lease row, if the role was ever acquired. */
    public static Optional<LeaseRow> read(DSLContext dsl, String role) {
        return dsl.connectionResult(c -> LeaseRow.of(c, role));
    }

    public Optional<LeaseRow> read() {
        return read(dsl, role);
    }

    public String role() {
        return role;
    }

    public String holderId() {
        return holderId;
    }

    public Duration duration() {
        return duration;
    }

    private static String requireText(String name, String value) {
        if (value == null || value.isBlank()) {
            throw new IllegalArgumentException(name + " must not be blank");
        }
        return value;
    }
}
