package dev.fencedjobs.dispatcher;

import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;
import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static dev.fencedjobs.db.jooq.Tables.OUTBOX;
import static dev.fencedjobs.db.jooq.Tables.SHARD_MAP;
import static org.jooq.impl.DSL.inline;
import static org.jooq.impl.DSL.min;
import static org.jooq.impl.DSL.name;
import static org.jooq.impl.DSL.noCondition;
import static org.jooq.impl.DSL.row;
import static org.jooq.impl.DSL.select;
import static org.jooq.impl.DSL.update;
import static org.jooq.impl.DSL.val;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.db.jooq.tables.records.JobsRecord;
import dev.fencedjobs.db.jooq.tables.records.OutboxRecord;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.lease.Lease;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import org.jooq.CommonTableExpression;
import org.jooq.Condition;
import org.jooq.DSLContext;
import org.jooq.Field;
import org.jooq.InsertOnDuplicateStep;
import org.jooq.Query;
import org.jooq.Record;
import org.jooq.Record1;
import org.jooq.Record2;
import org.jooq.Record3;
import org.jooq.Record5;
import org.jooq.Result;
import org.jooq.ResultQuery;
import org.jooq.TableField;
import org.jooq.impl.DSL;
import org.jooq.types.DayToSecond;

/**
 * The leader's batch, in three statements and a commit:
 *
 * <ol>
 *   <li>the lease guard ({@code SELECT … FOR UPDATE} of the lease row: holder, token, expiry);
 *   <li>{@code SET LOCAL enable_sort = off} and {@code SET LOCAL jit = off} (the plan, below);
 *   <li>one statement that picks the due jobs, completes them with the token and inserts their
 *       outbox rows:
 *       <pre>
 * WITH due AS (SELECT id FROM jobs WHERE state = 'pending' AND shard = :shard AND due_at &lt;= clock_timestamp()
 *              AND NOT EXISTS (SELECT id FROM shard_map WHERE target_count IS NOT NULL)
 *              ORDER BY due_at, id LIMIT :limit FOR UPDATE SKIP LOCKED),
 *      completed AS (UPDATE jobs SET state = 'completed', completed_by_token = :token,
 *                    completed_at = clock_timestamp() FROM due WHERE jobs.id = due.id
 *                    RETURNING id, resource, payload, due_at, completed_at, created_at, traceparent, tracestate)
 * INSERT INTO outbox (job_id, shard, resource, fencing_token, payload, due_at, completed_at, job_created_at, traceparent, tracestate)
 * SELECT id, :shard, resource, :token, payload, due_at, completed_at, created_at, traceparent, tracestate
 * FROM completed ORDER BY due_at, id</pre>
 * </ol>
 *
 * <p>SKIP LOCKED lets the batch pass over a job a producer is still updating instead of waiting
 * on it; there is only ever one writer that holds the guard.
 *
 * <p><b>The plan.</b> The batch and the purge run with {@code SET LOCAL enable_sort = off}, so
 * that each reads its index in order ({@code jobs_pending_due}, {@code jobs_completed_at}) and
 * stops at its limit. Without it, while {@code jobs} has no statistics yet (a new database, a
 * bulk insert before autovacuum's ANALYZE), PostgreSQL 17 chose a bitmap scan of every pending job
 * and a sort of them all under the row locks, which LIMIT cannot bound: measured in the soak
 * benchmark, each batch sorted the whole due backlog on disk, the dispatcher fell to 4,000 jobs/s
 * and 30 s behind for a minute, until the first ANALYZE. ({@link #preferIndexOrder}.)
 *
 * <p>And {@code jit = off}: the batch statement's last step sorts the rows it wrote (a few
 * hundred at most), and with sorts disabled the planner adds its disable cost (10^10) to that
 * step's estimate, far above {@code jit_above_cost}. On a PostgreSQL built with LLVM (the official
 * image, Debian's and most distributions' packages; not the embedded test server) every batch then
 * compiled its plan with inlining and optimisation: measured on postgres:17, 24 functions per
 * batch, and under CPU load batches of 50 jobs ran past a 500 ms statement timeout, the shards'
 * lease renewals queued behind them and timed out. The services' own connections have it off for
 * the session too ({@code Database.sessionSql}); this covers a data source an embedding
 * application passes in.
 *
 * <p><b>The batch's state is a literal</b> ({@code state = 'pending'}), not a bind value. A plan
 * made for any value of a bound state cannot use an index whose predicate names one, so
 * PostgreSQL's plan for any value (its generic plan, tried after five executions of a prepared
 * statement) read the table another way and cost more, and it planned the batch again at every
 * execution, for its values (0.5 ms of planning a batch beside 1.4 ms of execution,
 * pg_stat_statements at 400 jobs/s over two shards). With the literal, the plan for any value
 * reads the index as the plan for the values does (BatchPlanTest), and the plain path runs it
 * ({@link #policyActive}).
 */
final class FencedJobBatches implements JobBatches {

    static final String PENDING = "pending";
    static final String COMPLETED = "completed";
    static final String CANCELLED = "cancelled";

    private static final Position WARM_UP_POSITION = new Position(OffsetDateTime.parse("2000-01-01T00:00:00Z"), 0);

    private final DSLContext dsl;
    private final Lease lease;
    /** The shard whose jobs this leader completes (docs/shards.md): the lease is that shard's. */
    private final int shard;

    FencedJobBatches(DSLContext dsl, Lease lease) {
        this(dsl, lease, 0);
    }

    FencedJobBatches(DSLContext dsl, Lease lease, int shard) {
        this.dsl = dsl;
        this.lease = lease;
        this.shard = shard;
    }

    @Override
    public DispatchOverview.Overview overview() {
        return dsl.connectionResult(DispatchOverview::read);
    }

    @Override
    public long heldJobs() {
        return dsl.connectionResult(DispatchOverview::held);
    }

    @Override
    public BatchResult completeDue(Grant grant, int limit, Position after, String startKey) {
        return completeDue(grant, limit, after, startKey, false);
    }

    @Override
    public BatchResult completeDue(Grant grant, int limit, Position after, String startKey, boolean traces) {
        return lease.inGuardedTransaction(
                        grant.token(),
                        tx -> policyActive(tx)
                                ? policyBatch(tx, grant.token(), shard, limit, startKey, traces)
                                : traces
                                        ? tracedPlainBatch(tx, grant.token(), shard, limit, after)
                                        : plainBatch(tx, grant.token(), shard, limit, after))
                .orElse(BatchResult.leaseLost());
    }

    /**
     * {@link #preferIndexOrder} and, in the same round trip, whether the policy path decides this
     * batch ({@code dispatch_policy_active()}, R__jobs.sql: a limit or a pause defined, or a pending
     * job with a priority or a key). The plain path then costs what it did before the policy existed.
     * It runs first in the batch's transaction after the lease guard: {@code dispatch_batch_begin()}
     * holds {@code jobs} in ROW EXCLUSIVE mode from here to the commit, so a pause either committed
     * before this and is seen by the batch, or waits for the batch's commit (docs/dispatch.md, "Pause
     * and resume").
     *
     * <p>For the plain path, also {@code plan_cache_mode = force_generic_plan}: the batch statement
     * runs the plan it was given once per connection, which reads {@code jobs_pending_due} in order
     * as every plan made for it does under {@code enable_sort = off} (BatchPlanTest). Left to
     * choose, PostgreSQL planned it anew at most executions or at none, by estimates that vary with
     * the table: 0.5 ms of planning a batch where it did (pg_stat_statements, 400 jobs/s over two
     * shards, beside 1.4 ms of execution). The policy path's statements keep PostgreSQL's choice.
     */
    private static boolean policyActive(DSLContext tx) {
        return tx.fetchSingle("SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true),"
                        + " set_config('plan_cache_mode', CASE WHEN p.active THEN 'auto' ELSE 'force_generic_plan' END, true),"
                        + " p.active FROM dispatch_batch_begin() AS p(active)")
                .get(3, Boolean.class);
    }

    /**
     * The policy path: {@code dispatch_batch} (R__jobs.sql) picks the jobs by key, priority and
     * limit, completes them with the token, writes their outbox rows and spends the limits'
     * tokens, in this transaction.
     */
    private static BatchResult policyBatch(
            DSLContext tx, FencingToken token, int shard, int limit, String startKey, boolean traces) {
        Record r = tx.fetchSingle(
                "SELECT completed, next_key, more, next_at, held_keys, database_now,"
                        + " EXISTS (SELECT 1 FROM shard_map m WHERE m.target_count IS NOT NULL) AS draining"
                        + " FROM dispatch_batch(?, ?, ?, ?)",
                token.value(),
                shard,
                limit,
                startKey);
        OffsetDateTime nextAt = r.get("next_at", OffsetDateTime.class);
        OffsetDateTime now = r.get("database_now", OffsetDateTime.class);
        NextDue next = new NextDue(
                now.toInstant().toEpochMilli(),
                nextAt == null ? Long.MAX_VALUE : nextAt.toInstant().toEpochMilli(),
                r.get("draining", Boolean.class));
        Policy policy = new Policy(
                r.get("next_key", String.class), r.get("more", Boolean.class), next, r.get("held_keys", Integer.class));
        int completed = r.get("completed", Integer.class);
        return new BatchResult(
                true,
                completed,
                null,
                null,
                policy,
                traces && completed > 0 ? policyTraces(tx, token, now) : List.of());
    }

    /**
     * The trace contexts of the jobs {@code dispatch_batch} completed in this transaction: those it
     * stamped with its clock ({@code database_now}) and the token, read back through {@code
     * jobs_completed_at}; run only while the batch's span records.
     */
    private static List<JobTrace> policyTraces(DSLContext tx, FencingToken token, OffsetDateTime completedAt) {
        return tx.select(JOBS.ID, JOBS.TRACEPARENT, JOBS.TRACESTATE)
                .from(JOBS)
                .where(JOBS.STATE.eq(COMPLETED))
                .and(JOBS.COMPLETED_AT.eq(completedAt))
                .and(JOBS.COMPLETED_BY_TOKEN.eq(token.value()))
                .and(JOBS.TRACEPARENT.isNotNull())
                .fetch(j -> new JobTrace(j.value1(), j.value2(), j.value3()));
    }

    /**
     * Makes the rest of this transaction read indexes in order rather than sort, and never compile
     * its plans (see the class comment).
     */
    static void preferIndexOrder(DSLContext tx) {
        tx.execute("SET LOCAL enable_sort = off; SET LOCAL jit = off");
    }

    private static BatchResult completeAndWriteOutbox(
            DSLContext tx, FencingToken token, int shard, int limit, Position after) {
        preferIndexOrder(tx);
        return plainBatch(tx, token, shard, limit, after);
    }

    /** The plain path: the batch statement (class comment), after {@link #preferIndexOrder}. */
    private static BatchResult plainBatch(DSLContext tx, FencingToken token, int shard, int limit, Position after) {
        return result(batchStatement(tx, token, shard, limit, after).fetch());
    }

    /** What the batch statement's rows say (job id, due time, snapshot first): how many, the last position, the statement's snapshot. */
    private static BatchResult result(List<? extends Record> written) {
        Position last = null;
        for (Record r : written) {
            Position p = new Position(r.get(1, OffsetDateTime.class), r.get(0, Long.class));
            if (last == null || p.isAfter(last)) {
                last = p;
            }
        }
        DbSnapshot seen =
                written.isEmpty() ? null : DbSnapshot.parse(written.get(0).get(2, String.class));
        return new BatchResult(true, written.size(), last, seen);
    }

    /**
     * {@link #plainBatch}, also returning each job's trace context: the same statement with two
     * more columns, run only while the batch's span records (an SDK installed and sampling).
     */
    private static BatchResult tracedPlainBatch(
            DSLContext tx, FencingToken token, int shard, int limit, Position after) {
        Result<Record5<Long, OffsetDateTime, String, String, String>> written = batchInsert(
                        tx, token, shard, limit, after)
                .returningResult(OUTBOX.JOB_ID, OUTBOX.DUE_AT, SNAPSHOT, OUTBOX.TRACEPARENT, OUTBOX.TRACESTATE)
                .fetch();
        List<JobTrace> traces = new ArrayList<>();
        for (Record5<Long, OffsetDateTime, String, String, String> r : written) {
            if (r.value4() != null) {
                traces.add(new JobTrace(r.value1(), r.value4(), r.value5()));
            }
        }
        BatchResult plain = result(written);
        return new BatchResult(true, plain.completed(), plain.last(), plain.seen(), null, traces);
    }

    /**
     * The batch statement (class comment), not yet run: it returns each outbox row's job id and
     * due time, and the statement's own snapshot (the same on every row: an uncorrelated subquery,
     * so PostgreSQL computes it once per statement), which says which producers' transactions it saw.
     */
    static ResultQuery<Record3<Long, OffsetDateTime, String>> batchStatement(
            DSLContext tx, FencingToken token, int limit, Position after) {
        return batchStatement(tx, token, 0, limit, after);
    }

    /** {@link #batchStatement(DSLContext, FencingToken, int, Position)} of a shard's jobs. */
    static ResultQuery<Record3<Long, OffsetDateTime, String>> batchStatement(
            DSLContext tx, FencingToken token, int shard, int limit, Position after) {
        return batchInsert(tx, token, shard, limit, after).returningResult(OUTBOX.JOB_ID, OUTBOX.DUE_AT, SNAPSHOT);
    }

    /** The statement's own snapshot, on every row it returns. */
    private static final Field<String> SNAPSHOT = DSL.field("(SELECT pg_current_snapshot()::text)", String.class);

    /** The batch statement without its {@code RETURNING}. */
    private static InsertOnDuplicateStep<OutboxRecord> batchInsert(
            DSLContext tx, FencingToken token, int shard, int limit, Position after) {
        CommonTableExpression<Record1<Long>> due = name("due")
                .as(select(JOBS.ID)
                        .from(JOBS)
                        .where(JOBS.STATE.eq(inline(PENDING)))
                        .and(JOBS.SHARD.eq(shard))
                        .and(JOBS.DUE_AT.le(CLOCK_TIMESTAMP))
                        .and(NOT_DRAINING)
                        .and(after(after))
                        .orderBy(JOBS.DUE_AT, JOBS.ID)
                        // A literal, as the state: the plan made once (force_generic_plan) then knows the batch's
                        // size. With it bound, the planner took the CTE for a tenth of the pending jobs and joined the
                        // UPDATE to them by a hash over a sequential scan of jobs: every batch read the whole table
                        // (143 ms a batch of 500 with a million jobs, against 2 by the primary key; BatchPlanTest).
                        .limit(inline(limit))
                        .forUpdate()
                        .skipLocked());
        CommonTableExpression<JobsRecord> completed = name("completed")
                .as(update(JOBS)
                        .set(JOBS.STATE, COMPLETED)
                        .set(JOBS.COMPLETED_BY_TOKEN, token.value())
                        .set(JOBS.COMPLETED_AT, CLOCK_TIMESTAMP)
                        .from(due)
                        .where(JOBS.ID.eq(due.field(JOBS.ID)))
                        .returning(
                                JOBS.ID,
                                JOBS.RESOURCE,
                                JOBS.PAYLOAD,
                                JOBS.DUE_AT,
                                JOBS.COMPLETED_AT,
                                JOBS.CREATED_AT,
                                JOBS.TRACEPARENT,
                                JOBS.TRACESTATE));
        return tx.with(due)
                .with(completed)
                .insertInto(
                        OUTBOX,
                        OUTBOX.JOB_ID,
                        OUTBOX.SHARD,
                        OUTBOX.RESOURCE,
                        OUTBOX.FENCING_TOKEN,
                        OUTBOX.PAYLOAD,
                        OUTBOX.DUE_AT,
                        OUTBOX.COMPLETED_AT,
                        OUTBOX.JOB_CREATED_AT,
                        OUTBOX.TRACEPARENT,
                        OUTBOX.TRACESTATE)
                .select(select(
                                completed.field(JOBS.ID),
                                val(shard),
                                completed.field(JOBS.RESOURCE),
                                val(token.value()),
                                completed.field(JOBS.PAYLOAD),
                                completed.field(JOBS.DUE_AT),
                                completed.field(JOBS.COMPLETED_AT),
                                completed.field(JOBS.CREATED_AT),
                                completed.field(JOBS.TRACEPARENT),
                                completed.field(JOBS.TRACESTATE))
                        .from(completed)
                        .orderBy(completed.field(JOBS.DUE_AT), completed.field(JOBS.ID)));
    }

    /**
     * Nothing completes while the shard map drains (R__shards.sql): a one-row read per batch. The
     * switch, not this, is what keeps a drain safe; this keeps it short.
     */
    private static final Condition NOT_DRAINING =
            DSL.notExists(select(SHARD_MAP.ID).from(SHARD_MAP).where(SHARD_MAP.TARGET_COUNT.isNotNull()));

    /**
     * After a position, as a row comparison that the index {@code jobs_pending_due (due_at, id)}
     * starts its scan at: without it, every batch and next-due read would begin at the left of the
     * index and step over the entry of every job completed since the last VACUUM.
     */
    private static Condition after(Position after) {
        return after == null ? noCondition() : row(JOBS.DUE_AT, JOBS.ID).gt(after.dueAt(), after.id());
    }

    /** The warm-up's token: the largest there is, which no lease reaches (an epoch is 2^32 takeovers), so its guard never passes. */
    private static final FencingToken WARM_UP_TOKEN = FencingToken.of(Long.MAX_VALUE);

    /**
     * The guard and the batch statement with LIMIT 0 (under {@link #WARM_UP_TOKEN}), in a
     * transaction that is rolled back, then the next-due query and a read of the lease: every
     * statement a new leader runs first, parsed, planned and mapped once, but for the batch's own
     * LIMIT, a literal, whose statement the first batch plans (about a millisecond). Nothing is
     * written or locked, and the statement triggers' notifications are discarded with the rollback.
     */
    @Override
    public void warmUp() {
        try {
            dsl.transaction(configuration -> {
                DSLContext tx = configuration.dsl();
                lease.guard(tx, WARM_UP_TOKEN);
                completeAndWriteOutbox(tx, WARM_UP_TOKEN, shard, 0, null);
                completeAndWriteOutbox(tx, WARM_UP_TOKEN, shard, 0, WARM_UP_POSITION);
                policyActive(tx);
                policyBatch(tx, WARM_UP_TOKEN, shard, 0, null, false);
                purgeCompleted(tx, Duration.ofDays(1), 0);
                throw new RolledBack();
            });
        } catch (RolledBack expected) {
            // The point: nothing stays.
        }
        nextDue(null);
        nextDue(WARM_UP_POSITION);
        lease.read();
    }

    private static final class RolledBack extends RuntimeException {
        private static final long serialVersionUID = 1L;

        RolledBack() {
            super(null, null, false, false);
        }
    }

    @Override
    public int purgeCompleted(Duration retention, int limit) {
        return dsl.transactionResult(configuration -> purgeCompleted(configuration.dsl(), retention, limit));
    }

    private static int purgeCompleted(DSLContext dsl, Duration retention, int limit) {
        preferIndexOrder(dsl);
        return purgeStatement(dsl, retention, limit).execute()
                + purgeCancelledStatement(dsl, retention, limit).execute();
    }

    /** The purge's delete of completed jobs, not yet run. */
    static Query purgeStatement(DSLContext dsl, Duration retention, int limit) {
        return purgeStatement(dsl, COMPLETED, JOBS.COMPLETED_AT, retention, limit);
    }

    /** The purge of cancelled jobs (by the time they were cancelled, through {@code jobs_cancelled_at}), not yet run. */
    static Query purgeCancelledStatement(DSLContext dsl, Duration retention, int limit) {
        return purgeStatement(dsl, CANCELLED, JOBS.CANCELLED_AT, retention, limit);
    }

    /** Jobs in {@code state} whose {@code since} is older than the retention, the oldest first, through that state's partial index. */
    private static Query purgeStatement(
            DSLContext dsl, String state, TableField<JobsRecord, OffsetDateTime> since, Duration retention, int limit) {
        return dsl.deleteFrom(JOBS)
                .where(JOBS.ID.in(select(JOBS.ID)
                        .from(JOBS)
                        .where(JOBS.STATE.eq(state))
                        .and(since.lt(CLOCK_TIMESTAMP.minus(val(DayToSecond.valueOf(retention)))))
                        .orderBy(since)
                        .limit(limit)));
    }

    /**
     * The state a literal, as in the batch: with it bound, PostgreSQL planned this read for its values
     * at every call (0.45 ms of planning beside 0.05 of execution at 400 jobs/s over two shards); now
     * it runs its plan for any values (26 plans in 775 calls, 0.04 ms of execution). One earlier run
     * with the literal had each read take 2 ms: the follower's fast-path wait then held back vacuum's
     * horizon for up to a lease, and each read stepped over the entries of the jobs completed since
     * (Leadership.WATCH_WAIT; docs/benchmarks/2026-12-07-shards.md).
     */
    @Override
    public NextDue nextDue(Position after) {
        Record3<OffsetDateTime, OffsetDateTime, Boolean> r =
                nextDueStatement(dsl, shard, after).fetchSingle();
        long now = r.value2().toInstant().toEpochMilli();
        long due = r.value1() == null ? Long.MAX_VALUE : r.value1().toInstant().toEpochMilli();
        return new NextDue(now, due, r.value3());
    }

    /** The next-due read of {@code shard}'s jobs after {@code after}: the earliest due time, the database's clock, and whether the map drains. */
    static ResultQuery<Record3<OffsetDateTime, OffsetDateTime, Boolean>> nextDueStatement(
            DSLContext dsl, int shard, Position after) {
        return dsl.select(min(JOBS.DUE_AT), CLOCK_TIMESTAMP, DSL.field(DSL.not(NOT_DRAINING)))
                .from(JOBS)
                .where(JOBS.STATE.eq(inline(PENDING)))
                .and(JOBS.SHARD.eq(shard))
                .and(after(after));
    }

    @Override
    public Paused paused() {
        Record3<Long, Boolean, Double> r = dsl.resultQuery(DispatchOverview.PAUSE_SUMMARY)
                .coerce(
                        DSL.field("keys", Long.class),
                        DSL.field("everything", Boolean.class),
                        DSL.field("longest", Double.class))
                .fetchSingle();
        return new Paused(r.value1(), r.value2(), r.value3());
    }

    @Override
    public Backlog backlog() {
        // This shard's: the count stops at DUE_CAP index entries; the earliest due time is the shard's first entry of
        // jobs_pending_due.
        Record2<Long, Double> r = dsl.resultQuery(
                        "SELECT (" + DispatchOverview.dueBacklogOf(shard) + "), coalesce(extract(epoch FROM "
                                + "clock_timestamp() - (SELECT min(due_at) FROM jobs WHERE state = 'pending' AND shard = "
                                + shard
                                + " AND due_at <= clock_timestamp()))::float8, 0)")
                .coerce(DSL.field("due", Long.class), DSL.field("oldest", Double.class))
                .fetchSingle();
        return new Backlog(r.value1(), r.value2());
    }
}
