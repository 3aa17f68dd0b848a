package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.internal.DispatchOverview;
import dev.fencedjobs.runtime.internal.ReadCache;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/** The dispatch loop's meters (docs/operations.md lists them). */
final class DispatchMeters {

    final Counter jobsCompleted;
    final Counter guardRejections;
    final Counter batchFailures;
    final Timer batchLatency;
    final DistributionSummary batchJobs;
    final Counter jobsPurged;
    final Counter policyBatches;
    /** Keys with due jobs held back by their limit, as the last policy batch said. */
    final AtomicInteger heldKeys = new AtomicInteger();
    /** Due jobs held back by limits, counted now and then while keys are held. */
    final AtomicLong heldJobs = new AtomicLong();

    private final MeterRegistry registry;
    private final Map<String, Counter> sentBack = new ConcurrentHashMap<>();
    /** Held here: a gauge keeps only a weak reference to what it reads, and would read NaN once it is collected. */
    private final ReadCache<JobBatches.Backlog> backlog;

    private final ReadCache<JobBatches.Paused> paused;

    /**
     * {@code backlog}: due jobs and the longest wait, which every replica, leader or not, reads when
     * scraped. With {@code shard}'s gauges (tag {@code shard}); the counters are the replica's, over every
     * shard it holds. {@code paused}, when given: the pauses, which are no shard's: the gauges of the
     * first shard's meters answer for the replica, held strongly, as they may outlive that shard's loop.
     */
    DispatchMeters(
            MeterRegistry registry,
            ReadCache<JobBatches.Backlog> backlog,
            ReadCache<JobBatches.Paused> paused,
            int shard) {
        this.registry = registry;
        this.backlog = backlog;
        this.paused = paused;
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
        Tags tags = Tags.of("shard", Integer.toString(shard));
        registry.gauge("fencedjobs_dispatch_held_keys", tags, heldKeys);
        registry.gauge("fencedjobs_dispatch_held_jobs", tags, heldJobs);
        Gauge.builder("fencedjobs_jobs_due", this.backlog, c -> c.gauge(JobBatches.Backlog::due))
                .description("pending jobs of the shard due now, counted up to " + DispatchOverview.DUE_CAP)
                .tags(tags)
                .register(registry);
        Gauge.builder(
                        "fencedjobs_jobs_oldest_due_seconds",
                        this.backlog,
                        c -> c.gauge(JobBatches.Backlog::oldestDueSeconds))
                .description("how long the shard's earliest-due pending job has been due")
                .tags(tags)
                .register(registry);
        // Registered once a replica, by its first shard's loop (a second registration would be ignored, with a
        // warning).
        if (paused != null && registry.find("fencedjobs_dispatch_paused_keys").meter() == null) {
            Gauge.builder("fencedjobs_dispatch_paused_keys", this.paused, c -> c.gauge(JobBatches.Paused::keys))
                    .description("dispatch keys paused (fenced-jobs pause): their jobs stay pending")
                    .strongReference(true)
                    .register(registry);
            Gauge.builder(
                            "fencedjobs_dispatch_paused_everything",
                            this.paused,
                            c -> c.gauge(p -> p.everything() ? 1 : 0))
                    .description("1 while everything is paused (fenced-jobs pause --all): no job completes")
                    .strongReference(true)
                    .register(registry);
            Gauge.builder(
                            "fencedjobs_dispatch_pause_longest_seconds",
                            this.paused,
                            c -> c.gauge(JobBatches.Paused::longestSeconds))
                    .description("how long the oldest pause has lasted; 0 while nothing is paused")
                    .strongReference(true)
                    .register(registry);
        }
    }

    /** A batch was sent back from the scan position to the start of the index, for {@code reason}. */
    void sentBack(String reason) {
        sentBack.computeIfAbsent(
                        reason,
                        r -> Counter.builder("fencedjobs_batches_sent_back")
                                .description(
                                        "batches sent back from the scan position to the start of the index, by reason")
                                .tag("reason", r)
                                .register(registry))
                .increment();
    }

    /** The batches sent back so far, by reason. */
    Map<String, Long> sentBackCounts() {
        Map<String, Long> counts = new TreeMap<>();
        sentBack.forEach((why, c) -> counts.put(why, (long) c.count()));
        return counts;
    }
}
