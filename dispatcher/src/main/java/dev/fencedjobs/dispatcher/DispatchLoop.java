package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.lease.Grants;
import dev.fencedjobs.runtime.internal.Backoff;
import dev.fencedjobs.runtime.internal.Faults;
import dev.fencedjobs.runtime.internal.LeaderService;
import dev.fencedjobs.runtime.internal.Next;
import dev.fencedjobs.runtime.internal.PurgeSchedule;
import dev.fencedjobs.runtime.internal.Purger;
import dev.fencedjobs.runtime.internal.ReadCache;
import dev.fencedjobs.runtime.internal.TraceContext;
import dev.fencedjobs.runtime.internal.Tracing;
import dev.fencedjobs.runtime.internal.Wakeup;
import io.micrometer.core.instrument.MeterRegistry;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.SpanKind;
import io.opentelemetry.api.trace.StatusCode;
import java.time.Duration;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.slf4j.MDC;

/**
 * The leader's work loop, on a thread of its own:
 *
 * <ol>
 *   <li>no usable grant (follower, or past the local deadline): wait for a leadership change;
 *   <li>run a batch under the grant; a rejected guard or a failed transaction steps down at once;
 *   <li>a full batch: go again; otherwise ask for the earliest pending due time and sleep until
 *       then, or until a notification names an earlier one, or leadership changes.
 * </ol>
 *
 * <p>While idle it sends nothing to the database: it wakes only for notifications and leadership.
 *
 * <p>Each pass is one {@link #step()}, which answers what to do next ({@link Next}: go again,
 * sleep until, back off, stepped down, wait); {@link Next#drive} is the thread around it, and a
 * test calls the step on a settable clock.
 *
 * <p><b>Where a batch starts.</b> After the last job this tenure completed, not at the start of
 * {@code jobs_pending_due}, which completed jobs' entries fill until VACUUM: a {@link ScanPosition},
 * which the {@code jobs_due} notifications and a read from the start every second keep honest.
 *
 * <p><b>The policy path.</b> While a rate limit is defined or a pending job names a priority or a
 * dispatch key, each batch is {@code dispatch_batch} (R__jobs.sql, docs/dispatch.md): by key, in
 * rank order, within each key's limit, starting at the key after the last batch's. It reads no
 * position; it says itself whether to go again, or until when to sleep: the next due job, the next
 * token of a key held back, or a second when SKIP LOCKED passed a job over. With none of them it
 * sleeps until a notification, sending nothing, as on the plain path.
 *
 * <p><b>Schedules.</b> While it leads, a {@link ScheduleFirer} thread beside the loop turns the
 * occurrences of recurring schedules into jobs; they reach this loop as any inserted job does.
 *
 * <p><b>Retention.</b> While it leads, a {@link Purger} thread beside the loop deletes completed
 * and cancelled jobs past {@code JOBS_RETENTION}, {@value #PURGE_CHUNK} at a time, the oldest first, on a {@link
 * PurgeSchedule}: again 50 ms later while each delete finds a full chunk (so it keeps up with any
 * completion rate a leader reaches, 40,000 jobs/s), otherwise once a minute or half the retention,
 * whichever is shorter. Each delete is one statement on completed rows, which no batch locks, on a
 * pooled connection of the purge thread's own while it runs: a slow one (up to a second under
 * load) holds up no batch.
 */
final class DispatchLoop implements LeaderService.Worker {

    private static final Logger log = LoggerFactory.getLogger(DispatchLoop.class);

    static final int PURGE_CHUNK = 2000;
    static final Duration HELD_JOBS_EVERY = Duration.ofSeconds(5);
    /** How long the loop's stop waits for a purge delete in flight. */
    private static final Duration PURGER_STOP = Duration.ofSeconds(5);

    private final Grants leadership;
    private final Tracing tracing;
    private final JobBatches batches;
    private final int batchSize;
    private final Duration jobsRetention;
    private final Ticker ticker;
    private final Purger purger;
    private final Schedules schedules;
    private final Wakeup wakeup = new Wakeup();
    /** Where the plain path's next batch starts; the loop thread's own, but for the notifications. */
    private final ScanPosition scan = new ScanPosition();
    /** The loop thread's own: where the next policy batch's keys start. */
    private String policyKey;

    private final Backoff backoff = new Backoff(Duration.ofMillis(50), Duration.ofSeconds(2));
    private volatile boolean running = true;
    private volatile boolean warmedUp;
    private volatile LastBatch lastBatch;
    /** The loop thread's own: the sleep of an idle leader. */
    private final IdleSleep idle;

    private final DispatchMeters meters;
    /** On the ticker: when the loop last counted the jobs held back by limits. */
    private long heldJobsCountedAt;
    /**
     * The loop thread's own: on the ticker, when to look again whether the shard map still drains;
     * {@link #NOT_DRAINING} while it does not (docs/shards.md).
     */
    private long drainCheckAt = NOT_DRAINING;

    private static final long NOT_DRAINING = Long.MIN_VALUE;
    /**
     * How often a leader looks at the map while it drains, with a read that takes no lock: no batch
     * runs meanwhile, as none could complete a job, so neither the holders' lease rows nor the jobs
     * table are taken from the switch that ends the drain (a batch woken by every producer's
     * notification did, and under load the switch's lock waits failed).
     */
    static final Duration DRAIN_CHECK = Duration.ofMillis(50);

    /** Whether the last batch took the policy path: written by the loop thread, read by status too. */
    private volatile boolean policyPath;

    record LastBatch(FencingToken token, int completed, double millis, Instant finishedAt) {}

    DispatchLoop(
            Grants leadership,
            JobBatches batches,
            int batchSize,
            Duration jobsRetention,
            Ticker ticker,
            MeterRegistry registry,
            Schedules schedules,
            Tracing tracing) {
        this(leadership, batches, batchSize, jobsRetention, ticker, registry, schedules, tracing, 0);
    }

    /**
     * The loop of one shard (docs/shards.md). Shard 0's also purges completed jobs of every shard;
     * the schedules are given to it alone ({@code schedules} is {@link Schedules#NONE} for the others).
     */
    DispatchLoop(
            Grants leadership,
            JobBatches batches,
            int batchSize,
            Duration jobsRetention,
            Ticker ticker,
            MeterRegistry registry,
            Schedules schedules,
            Tracing tracing,
            int shard) {
        this.leadership = leadership;
        this.tracing = tracing;
        this.schedules = schedules;
        this.batches = batches;
        this.batchSize = batchSize;
        this.jobsRetention = jobsRetention;
        this.ticker = ticker;
        this.idle = new IdleSleep(scan, ticker);
        PurgeSchedule purges = new PurgeSchedule(PURGE_CHUNK, jobsRetention, ticker);
        this.meters = new DispatchMeters(
                registry, new ReadCache<>(batches::backlog, ticker), new ReadCache<>(batches::paused, ticker), shard);
        boolean purges0 = shard == 0;
        this.purger = new Purger(
                "dispatcher-purge" + (shard == 0 ? "" : "-" + shard),
                purges,
                () -> purges0 && leadership.current().isPresent(),
                () -> batches.purgeCompleted(jobsRetention, purges.chunk()),
                deleted -> {
                    meters.jobsPurged.increment(deleted);
                    log.debug("Deleted {} jobs completed more than {} ago", deleted, jobsRetention);
                },
                e -> log.warn(
                        "Deleting completed jobs past JOBS_RETENTION failed; next try in {}: {}",
                        purges.idleInterval(),
                        Faults.describe(e)));
        leadership.onChange(wakeup::signal);
        leadership.onChange(purger::wake);
    }

    /**
     * {@code jobs_due}: pending jobs were inserted or moved earlier; the payload is the earliest
     * due time among them, epoch milliseconds in database time.
     */
    @Override
    public void onNotification(String channel, String payload) {
        if (ScheduleFirer.SCHEDULES_CHANGED.equals(channel)) {
            schedules.wake();
            return;
        }
        scan.notified(payload);
        wakeup.signal();
    }

    /** The notification stream restarted: whatever it missed is found by one batch. */
    @Override
    public void onListenerConnected() {
        schedules.wake();
        scan.lost();
        wakeup.signal();
    }

    @Override
    public void stop() {
        running = false;
        wakeup.signal();
    }

    /**
     * Ready once the start-up warm-up (each batch statement run once in a rolled-back
     * transaction) is over, so that a follower reported ready takes over at full speed.
     */
    @Override
    public boolean ready() {
        return warmedUp;
    }

    @Override
    public Map<String, Object> status() {
        Map<String, Object> status = new LinkedHashMap<>();
        status.put("warmedUp", warmedUp);
        status.put("batchSize", batchSize);
        status.put("jobsRetention", jobsRetention.toString());
        status.put("jobsPurged", (long) meters.jobsPurged.count());
        status.put("batchesSentBack", meters.sentBackCounts());
        status.put("policyPath", policyPath);
        status.put("heldKeys", meters.heldKeys.get());
        status.put("heldJobs", meters.heldJobs.get());
        try {
            status.put("dispatch", batches.overview().toMap());
        } catch (RuntimeException e) {
            status.put("dispatch", Map.of("error", Faults.describe(e)));
        }
        status.put("schedules", schedules.status());
        LastBatch b = lastBatch;
        if (b != null) {
            Map<String, Object> batch = new LinkedHashMap<>();
            batch.put("token", b.token().value());
            batch.put("completed", b.completed());
            batch.put("millis", b.millis());
            batch.put("finishedAt", b.finishedAt().toString());
            status.put("lastBatch", batch);
        }
        return status;
    }

    @Override
    public void run() {
        try {
            batches.warmUp();
        } catch (RuntimeException e) {
            log.debug("Warm-up failed (the first batch will be slower): {}", Faults.describe(e));
        } finally {
            warmedUp = true;
        }
        purger.start();
        schedules.start();
        try {
            Next.drive(this::step, wakeup, ticker);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            MDC.clear();
            schedules.close();
            purger.close(PURGER_STOP);
        }
        log.debug("Dispatch loop stopped");
    }

    /**
     * One step: no grant, wait for one; idle under this grant, sleep on until the earliest
     * pending job is due (or a notification or the read from the start every second ends it);
     * otherwise one batch, and after a batch that was not full, the next due time.
     */
    Next step() {
        if (!running) {
            return Next.stopped();
        }
        Optional<Grant> current = leadership.current();
        if (current.isEmpty()) {
            MDC.clear();
            idle.clear();
            drainCheckAt = NOT_DRAINING;
            return Next.await();
        }
        Grant grant = current.get();
        MDC.put("role", grant.role());
        MDC.put("token", String.valueOf(grant.token()));
        if (drainCheckAt != NOT_DRAINING) {
            return drainWait(grant);
        }
        Next sleep = idle.resume(grant.token());
        if (sleep != null) {
            return sleep;
        }
        return runBatch(grant);
    }

    /**
     * The gauge of due jobs held back by a limit: counted (a bounded read, {@link
     * DispatchOverview#HELD}) at most every {@link #HELD_JOBS_EVERY} while keys are held, zero at
     * once when none is.
     */
    private void countHeldJobs(int keysHeld) {
        if (keysHeld == 0) {
            meters.heldJobs.set(0);
            return;
        }
        long now = ticker.nanoTime();
        if (meters.heldJobs.get() > 0 && now - heldJobsCountedAt < HELD_JOBS_EVERY.toNanos()) {
            return;
        }
        heldJobsCountedAt = now;
        try {
            meters.heldJobs.set(batches.heldJobs());
        } catch (RuntimeException e) {
            log.debug("Counting the jobs held back by limits failed: {}", Faults.describe(e));
        }
    }

    /**
     * While the map drains: a sleep until the next look ({@link #DRAIN_CHECK}; notifications do not
     * shorten it), then the next-due read, which says whether it still drains.
     */
    private Next drainWait(Grant grant) {
        if (ticker.nanoTime() - drainCheckAt < 0) {
            return Next.sleepUntil(drainCheckAt);
        }
        drainCheckAt = NOT_DRAINING;
        return afterPartialBatch(grant);
    }

    /** The map drains: no batch until it has switched; the first look in {@link #DRAIN_CHECK}. */
    private Next drain() {
        idle.clear();
        drainCheckAt = ticker.nanoTime() + DRAIN_CHECK.toNanos();
        return Next.sleepUntil(drainCheckAt);
    }

    /** One batch under {@code grant}, and what follows it: again at once, a sleep until the next due job, or a step-down. */
    private Next runBatch(Grant grant) {
        long started = ticker.nanoTime();
        JobBatches.Position after = scan.startFor(grant.token(), started, meters::sentBack);
        if (policyPath) {
            // The policy batch reads the next due time itself: a notification from here on may
            // be of a job it did not see, and shortens the sleep after it.
            scan.takeEarliestNotified();
        }
        JobBatches.BatchResult result;
        try {
            result = completeDue(grant, after);
        } catch (RuntimeException e) {
            scan.forget();
            meters.batchFailures.increment();
            log.warn("Batch under token {} failed, rolled back: {}", grant.token(), Faults.describe(e));
            String reason = "batch failed (" + e.getClass().getSimpleName() + ")";
            leadership.stepDown(grant, reason);
            return Next.backOff(ticker.nanoTime() + backoff.nextNanos(), reason);
        }
        long elapsed = ticker.nanoTime() - started;
        if (!result.leaseHeld()) {
            meters.guardRejections.increment();
            String reason = "lease guard rejected token " + grant.token() + "; nothing was written";
            leadership.stepDown(grant, reason);
            return Next.steppedDown(reason);
        }
        backoff.reset();
        recordBatch(grant, after, started, elapsed, result);
        JobBatches.Policy policy = result.policy();
        if (policy != null) {
            if (policy.next().draining()) {
                return drain();
            }
            return policy.more()
                    ? Next.again()
                    : idle.plan(new IdleSleep.Plan(grant.token(), policy.next(), ticker.nanoTime()));
        }
        if (result.completed() >= batchSize) {
            return Next.again();
        }
        return afterPartialBatch(grant);
    }

    /**
     * The batch statement, in a span of its own: a root (its jobs come from many producers'
     * traces) linked to each job's context, which is asked of the batch only while the span records.
     */
    private JobBatches.BatchResult completeDue(Grant grant, JobBatches.Position after) {
        Span span = tracing.tracer()
                .spanBuilder("dispatch batch")
                .setSpanKind(SpanKind.INTERNAL)
                .setNoParent()
                .setAttribute(Tracing.LEASE_TOKEN, grant.token().value())
                .startSpan();
        boolean recording = span.isRecording();
        try {
            JobBatches.BatchResult result = recording
                    ? batches.completeDue(grant, batchSize, after, policyKey, true)
                    : batches.completeDue(grant, batchSize, after, policyKey);
            if (recording) {
                for (JobBatches.JobTrace t : result.traces()) {
                    SpanContext job =
                            Tracing.producer(Tracing.jobContext(new TraceContext(t.traceparent(), t.tracestate())));
                    if (job.isValid()) {
                        span.addLink(job, Attributes.of(Tracing.JOB_ID, t.jobId()));
                    }
                }
            }
            span.setAttribute(Tracing.BATCH_COMPLETED, (long) result.completed());
            span.setAttribute(Tracing.BATCH_PATH, result.policy() != null ? "policy" : "plain");
            if (!result.leaseHeld()) {
                span.setStatus(StatusCode.ERROR, "lease guard rejected the token");
            }
            return result;
        } catch (RuntimeException e) {
            span.recordException(e);
            span.setStatus(StatusCode.ERROR, "rolled back");
            throw e;
        } finally {
            span.end();
        }
    }

    /** What a batch that held its lease leaves behind: the scan position or the policy's next key, the meters, the status. */
    private void recordBatch(
            Grant grant, JobBatches.Position after, long started, long elapsed, JobBatches.BatchResult result) {
        JobBatches.Policy policy = result.policy();
        policyPath = policy != null;
        if (policy != null) {
            // The policy path reads by key, not from a position: the plain path, when it comes
            // back, starts from the start of the index.
            scan.forget();
            policyKey = policy.nextKey();
            meters.heldKeys.set(policy.heldKeys());
            meters.policyBatches.increment();
            countHeldJobs(policy.heldKeys());
        } else {
            meters.heldKeys.set(0);
            meters.heldJobs.set(0);
        }
        scan.ran(after, started, grant.token(), result.last(), result.seen());
        meters.batchLatency.record(elapsed, TimeUnit.NANOSECONDS);
        meters.batchJobs.record(result.completed());
        meters.jobsCompleted.increment(result.completed());
        if (result.completed() > 0) {
            lastBatch = new LastBatch(grant.token(), result.completed(), elapsed / 1e6, Instant.now());
            log.debug(
                    "Completed {} jobs under token {} in {} ms",
                    result.completed(),
                    grant.token(),
                    elapsed / 1_000_000);
        }
    }

    /** After a plain batch that was not full, or a look at a draining map: the next due time, and a sleep until then. */
    private Next afterPartialBatch(Grant grant) {
        // The notification mark is reset before the query, so a job inserted after the query's
        // snapshot still shortens the sleep.
        scan.takeEarliestNotified();
        JobBatches.NextDue next;
        try {
            next = batches.nextDue(scan.current());
        } catch (RuntimeException e) {
            return nextDueFailed(grant, e);
        }
        if (next.draining()) {
            return drain();
        }
        return idle.plan(new IdleSleep.Plan(grant.token(), next, ticker.nanoTime()));
    }

    private Next nextDueFailed(Grant grant, RuntimeException e) {
        scan.forget();
        meters.batchFailures.increment();
        log.warn("Reading the next due time failed: {}", Faults.describe(e));
        String reason = "next-due query failed (" + e.getClass().getSimpleName() + ")";
        leadership.stepDown(grant, reason);
        return Next.steppedDown(reason);
    }
}
