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
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
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
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
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
 * <p><b>Where a batch starts.</b> A completed job's entry stays in {@code jobs_pending_due} until
 * VACUUM removes it, at the left of the index where a scan for the earliest due job begins; read
 * from the start, every batch and next-due query would step over all of them (5 ms each after two
 * minutes at 2,000 jobs/s without a vacuum, measured). So batches and next-due reads start after
 * the last job this tenure completed, a {@link JobBatches.Position}. A job can only be pending
 * before it if it came after the read: inserted or moved earlier (both notify {@code jobs_due} on
 * commit, and a notification at or before the position sends the next batch back to the start,
 * unless the batches since the last read from the start had seen its transaction: a {@link
 * ScanChain}), or locked by another transaction when its turn came (SKIP LOCKED). To find those
 * and anything a lost notification hid, a batch reads from the start at least every {@value #FROM_START_EVERY_MS}
 * ms while the position is in use, and always after a new grant, a failure, or the LISTEN connection
 * coming back.
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
    private static final long NOTHING = Long.MAX_VALUE;
    /** Forces a batch: set after the LISTEN connection (re)connects, when notifications may be lost. */
    private static final long CATCH_UP = Long.MIN_VALUE;

    static final int PURGE_CHUNK = 2000;
    static final long FROM_START_EVERY_MS = 1000;
    static final int MAX_QUEUED = 10_000;

    /** A {@code jobs_due} notification: the earliest due time it names (epoch ms) and its transaction, -1 when the payload names none. */
    record Notified(long dueMillis, long xid) {

        /** {@code "<due ms>"} (migrations before V8) or {@code "<due ms> <xid8>"}; {@code null} when neither. */
        static Notified parse(String payload) {
            try {
                int space = payload.indexOf(' ');
                return space < 0
                        ? new Notified(Long.parseLong(payload), -1)
                        : new Notified(
                                Long.parseLong(payload.substring(0, space)),
                                Long.parseLong(payload.substring(space + 1)));
            } catch (NumberFormatException | NullPointerException e) {
                return null;
            }
        }
    }
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
    private final AtomicLong earliestNotified = new AtomicLong(NOTHING);
    /** The notifications since the last batch began, to check against the position and the {@link ScanChain}; at most {@value #MAX_QUEUED}. */
    private final ConcurrentLinkedQueue<Notified> notifiedSinceBatch = new ConcurrentLinkedQueue<>();

    private final AtomicInteger queued = new AtomicInteger();
    /** Set by a notification that could not be checked (unparseable, or too many queued) or a LISTEN reconnect: the next batch reads from the start. */
    private final AtomicBoolean fromStartNext = new AtomicBoolean();
    /** The loop thread's own: the batches since the last one from the start. */
    private final ScanChain chain = new ScanChain();
    /** The loop thread's own: where the next batch starts, under which token, and when a batch last read from the start. */
    private JobBatches.Position position;

    private FencingToken positionToken;
    private long fromStartAtNanos;
    /** The loop thread's own: where the next policy batch's keys start. */
    private String policyKey;

    private final Backoff backoff = new Backoff(Duration.ofMillis(50), Duration.ofSeconds(2));
    private volatile boolean running = true;
    private volatile boolean warmedUp;
    private volatile LastBatch lastBatch;
    /** The loop thread's own: set while the leader sleeps until the next due time. */
    private Idle idle;

    private final Counter jobsCompleted;
    private final Counter guardRejections;
    private final Counter batchFailures;
    private final Timer batchLatency;
    private final DistributionSummary batchJobs;
    private final Counter jobsPurged;
    private final Counter policyBatches;
    private final AtomicInteger heldKeys = new AtomicInteger();
    private final AtomicLong heldJobs = new AtomicLong();
    /** Due jobs and the longest wait, read from the database at most once a second, and only when scraped. */
    private final ReadCache<JobBatches.Backlog> backlog;
    /** On the ticker: when the loop last counted {@link #heldJobs}. */
    private long heldJobsCountedAt;
    /** Whether the last batch took the policy path: written by the loop thread, read by status too. */
    private volatile boolean policyPath;

    private final MeterRegistry registry;
    static final Duration HELD_JOBS_EVERY = Duration.ofSeconds(5);
    private final Map<String, Counter> sentBack = new ConcurrentHashMap<>();

    record LastBatch(FencingToken token, int completed, double millis, Instant finishedAt) {}

    /**
     * An idle leader's plan: under {@code token}, the earliest pending due time ({@link #NOTHING}
     * when none; {@link #CATCH_UP} to run a batch at once) as of the database's {@code
     * databaseNowMillis}, asked at {@code askedAtNanos} on the ticker.
     */
    private record Idle(FencingToken token, long dueMillis, long databaseNowMillis, long askedAtNanos) {}

    /** The schedule firer beside the loop, as the loop sees it: started and stopped with it, woken by its channel. */
    interface Schedules {
        /** For a loop without schedules. */
        Schedules NONE = new Schedules() {
            @Override
            public void start() {}

            @Override
            public void wake() {}

            @Override
            public Map<String, Object> status() {
                return Map.of();
            }

            @Override
            public void close() {}
        };

        void start();

        void wake();

        Map<String, Object> status();

        void close();
    }

    DispatchLoop(
            Grants leadership,
            JobBatches batches,
            int batchSize,
            Duration jobsRetention,
            Ticker ticker,
            MeterRegistry registry,
            Schedules schedules,
            Tracing tracing) {
        this.leadership = leadership;
        this.tracing = tracing;
        this.schedules = schedules;
        this.batches = batches;
        this.batchSize = batchSize;
        this.jobsRetention = jobsRetention;
        this.ticker = ticker;
        this.registry = registry;
        PurgeSchedule purges = new PurgeSchedule(PURGE_CHUNK, jobsRetention, ticker);
        jobsCompleted = Counter.builder("fencedjobs_jobs_completed")
                .description("jobs completed by this replica")
                .register(registry);
        guardRejections = Counter.builder("fencedjobs_guard_rejections")
                .description("batches whose lease guard failed: nothing written, stepped down")
                .register(registry);
        batchFailures = Counter.builder("fencedjobs_batch_failures")
                .description("batches that failed with a database error: rolled back, stepped down")
                .register(registry);
        batchLatency = Timer.builder("fencedjobs_batch")
                .description("batch transaction latency")
                .register(registry);
        batchJobs = DistributionSummary.builder("fencedjobs_batch_jobs")
                .description("jobs completed per batch")
                .register(registry);
        jobsPurged = Counter.builder("fencedjobs_jobs_purged")
                .description("completed jobs deleted after JOBS_RETENTION")
                .register(registry);
        policyBatches = Counter.builder("fencedjobs_policy_batches")
                .description(
                        "batches that took the policy path (a rate limit defined, or pending jobs with a priority or a key)")
                .register(registry);
        registry.gauge("fencedjobs_dispatch_held_keys", heldKeys);
        registry.gauge("fencedjobs_dispatch_held_jobs", heldJobs);
        // Every replica, leader or not, reads these when scraped: a stopped scheduler shows too.
        backlog = new ReadCache<>(batches::backlog, ticker);
        Gauge.builder("fencedjobs_jobs_due", backlog, c -> c.gauge(JobBatches.Backlog::due))
                .description("pending jobs due now, counted up to " + DispatchOverview.DUE_CAP)
                .register(registry);
        Gauge.builder("fencedjobs_jobs_oldest_due_seconds", backlog, c -> c.gauge(JobBatches.Backlog::oldestDueSeconds))
                .description("how long the earliest-due pending job has been due")
                .register(registry);
        this.purger = new Purger(
                "dispatcher-purge",
                purges,
                () -> leadership.current().isPresent(),
                () -> batches.purgeCompleted(jobsRetention, purges.chunk()),
                deleted -> {
                    jobsPurged.increment(deleted);
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
        Notified n = Notified.parse(payload);
        if (n == null) {
            earliestNotified.set(CATCH_UP);
            fromStartNext.set(true);
        } else {
            earliestNotified.accumulateAndGet(n.dueMillis(), Math::min);
            if (queued.incrementAndGet() <= MAX_QUEUED) {
                notifiedSinceBatch.add(n);
            } else {
                queued.decrementAndGet();
                fromStartNext.set(true);
            }
        }
        wakeup.signal();
    }

    /** The notification stream restarted: whatever it missed is found by one batch. */
    @Override
    public void onListenerConnected() {
        schedules.wake();
        earliestNotified.set(CATCH_UP);
        fromStartNext.set(true);
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
        status.put("jobsPurged", (long) jobsPurged.count());
        Map<String, Long> back = new TreeMap<>();
        sentBack.forEach((why, c) -> back.put(why, (long) c.count()));
        status.put("batchesSentBack", back);
        status.put("policyPath", policyPath);
        status.put("heldKeys", heldKeys.get());
        status.put("heldJobs", heldJobs.get());
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
            idle = null;
            return Next.await();
        }
        Grant grant = current.get();
        MDC.put("role", grant.role());
        MDC.put("token", String.valueOf(grant.token()));
        if (idle != null) {
            Next sleep = idle.token().equals(grant.token()) ? sleepUntilDue(idle) : null;
            if (sleep != null) {
                return sleep;
            }
            idle = null;
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
            heldJobs.set(0);
            return;
        }
        long now = ticker.nanoTime();
        if (heldJobs.get() > 0 && now - heldJobsCountedAt < HELD_JOBS_EVERY.toNanos()) {
            return;
        }
        heldJobsCountedAt = now;
        try {
            heldJobs.set(batches.heldJobs());
        } catch (RuntimeException e) {
            log.debug("Counting the jobs held back by limits failed: {}", Faults.describe(e));
        }
    }

    private Next runBatch(Grant grant) {
        long started = ticker.nanoTime();
        JobBatches.Position after = startFor(grant, started);
        if (policyPath) {
            // The policy batch reads the next due time itself: a notification from here on may
            // be of a job it did not see, and shortens the sleep after it.
            earliestNotified.set(NOTHING);
        }
        JobBatches.BatchResult result;
        // A span per batch, a root of its own (its jobs come from many producers' traces), linked
        // to each job's context: asked of the batch only while the span records.
        Span span = tracing.tracer()
                .spanBuilder("dispatch batch")
                .setSpanKind(SpanKind.INTERNAL)
                .setNoParent()
                .setAttribute(Tracing.LEASE_TOKEN, grant.token().value())
                .startSpan();
        boolean recording = span.isRecording();
        try {
            result = recording
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
        } catch (RuntimeException e) {
            span.recordException(e);
            span.setStatus(StatusCode.ERROR, "rolled back");
            position = null;
            batchFailures.increment();
            log.warn("Batch under token {} failed, rolled back: {}", grant.token(), Faults.describe(e));
            String reason = "batch failed (" + e.getClass().getSimpleName() + ")";
            leadership.stepDown(grant, reason);
            return Next.backOff(ticker.nanoTime() + backoff.nextNanos(), reason);
        } finally {
            span.end();
        }
        long elapsed = ticker.nanoTime() - started;
        if (!result.leaseHeld()) {
            guardRejections.increment();
            String reason = "lease guard rejected token " + grant.token() + "; nothing was written";
            leadership.stepDown(grant, reason);
            return Next.steppedDown(reason);
        }
        backoff.reset();
        if (after == null) {
            fromStartAtNanos = started;
        }
        JobBatches.Policy policy = result.policy();
        policyPath = policy != null;
        if (policy != null) {
            // The policy path reads by key, not from a position: the plain path, when it comes
            // back, starts from the start of the index.
            position = null;
            policyKey = policy.nextKey();
            heldKeys.set(policy.heldKeys());
            policyBatches.increment();
            countHeldJobs(policy.heldKeys());
        } else {
            heldKeys.set(0);
            heldJobs.set(0);
        }
        if (result.last() != null && (position == null || result.last().isAfter(position))) {
            position = result.last();
            positionToken = grant.token();
            chain.ran(result.last(), result.seen());
        }
        batchLatency.record(elapsed, TimeUnit.NANOSECONDS);
        batchJobs.record(result.completed());
        jobsCompleted.increment(result.completed());
        if (result.completed() > 0) {
            lastBatch = new LastBatch(grant.token(), result.completed(), elapsed / 1e6, Instant.now());
            log.debug(
                    "Completed {} jobs under token {} in {} ms",
                    result.completed(),
                    grant.token(),
                    elapsed / 1_000_000);
        }
        if (policy != null) {
            if (policy.more()) {
                return Next.again();
            }
            idle = new Idle(
                    grant.token(),
                    policy.next().earliestDueMillis(),
                    policy.next().databaseNowMillis(),
                    ticker.nanoTime());
            Next sleep = sleepUntilDue(idle);
            if (sleep == null) {
                idle = null;
                return Next.again();
            }
            return sleep;
        }
        if (result.completed() >= batchSize) {
            return Next.again();
        }
        // The notification mark is reset before the query, so a job inserted after the query's
        // snapshot still shortens the sleep.
        earliestNotified.set(NOTHING);
        JobBatches.NextDue next;
        try {
            next = batches.nextDue(position);
        } catch (RuntimeException e) {
            position = null;
            batchFailures.increment();
            log.warn("Reading the next due time failed: {}", Faults.describe(e));
            String reason = "next-due query failed (" + e.getClass().getSimpleName() + ")";
            leadership.stepDown(grant, reason);
            return Next.steppedDown(reason);
        }
        idle = new Idle(grant.token(), next.earliestDueMillis(), next.databaseNowMillis(), ticker.nanoTime());
        Next sleep = sleepUntilDue(idle);
        if (sleep == null) {
            idle = null;
            return Next.again();
        }
        return sleep;
    }

    /**
     * Where this batch starts: after the position, unless it belongs to another grant, a
     * notification since the last batch named a due time at or before it in a transaction the
     * {@link ScanChain} did not see (or could not be checked), or the last read from the start was
     * {@value #FROM_START_EVERY_MS} ms or more ago; then from the start, which begins a new chain.
     */
    private JobBatches.Position startFor(Grant grant, long now) {
        boolean catchUp = fromStartNext.getAndSet(false);
        boolean back = false;
        for (Notified n; (n = notifiedSinceBatch.poll()) != null; ) {
            queued.decrementAndGet();
            if (position != null
                    && n.dueMillis() <= position.dueAt().toInstant().toEpochMilli()
                    && !chain.saw(n.dueMillis(), n.xid())) {
                back = true;
            }
        }
        if (position != null) {
            String why = !grant.token().equals(positionToken)
                    ? "new grant"
                    : catchUp
                            ? "catch-up"
                            : back
                                    ? "notification"
                                    : now - fromStartAtNanos >= TimeUnit.MILLISECONDS.toNanos(FROM_START_EVERY_MS)
                                            ? "every second"
                                            : null;
            if (why != null) {
                position = null;
                sentBack.computeIfAbsent(
                                why,
                                w -> Counter.builder("fencedjobs_batches_sent_back")
                                        .description(
                                                "batches sent back from the scan position to the start of the index, by reason")
                                        .tag("reason", w)
                                        .register(registry))
                        .increment();
            }
        }
        if (position == null) {
            chain.restart();
        }
        return position;
    }

    /**
     * How long an idle leader sleeps: until the earliest pending job is due (the planned due time,
     * lowered by any notification since), and while batches start after a position, no later than
     * the next read from the start; {@code null} when a batch is due now.
     */
    private Next sleepUntilDue(Idle plan) {
        long planned = Math.min(plan.dueMillis(), earliestNotified.getAndSet(NOTHING));
        idle = plan = new Idle(plan.token(), planned, plan.databaseNowMillis(), plan.askedAtNanos());
        if (planned == CATCH_UP) {
            return null;
        }
        // In differences of ticker readings, never in absolute readings, which may wrap: a job due
        // in the year 9999 saturates its wait, and must not win over the next read from the start.
        long now = ticker.nanoTime();
        // While batches start after a position: the next batch from the start (at most a second away).
        long wait = position == null
                ? Long.MAX_VALUE
                : fromStartAtNanos + TimeUnit.MILLISECONDS.toNanos(FROM_START_EVERY_MS) - now;
        if (planned != NOTHING) {
            // Due times are in database time: offset from the database's "now" at the query,
            // plus a millisecond for the rounding of due_at to whole milliseconds.
            long untilDue = TimeUnit.MILLISECONDS.toNanos(Math.max(-1, planned - plan.databaseNowMillis()) + 1);
            wait = Math.min(wait, untilDue - (now - plan.askedAtNanos()));
        }
        if (wait == Long.MAX_VALUE) {
            return Next.await();
        }
        return wait > 0 ? Next.sleepUntil(now + wait) : null;
    }
}
