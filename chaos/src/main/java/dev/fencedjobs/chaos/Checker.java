package dev.fencedjobs.chaos;

import dev.fencedjobs.chaos.History.DeadLetter;
import dev.fencedjobs.chaos.History.Effect;
import dev.fencedjobs.chaos.History.Fault;
import dev.fencedjobs.chaos.History.Forged;
import dev.fencedjobs.chaos.History.Job;
import dev.fencedjobs.chaos.History.OutboxRow;
import dev.fencedjobs.chaos.History.Processed;
import dev.fencedjobs.chaos.History.Rejection;
import dev.fencedjobs.chaos.History.Takeover;
import dev.fencedjobs.chaos.History.TopicRecord;
import dev.fencedjobs.runtime.internal.Occurrences;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.stream.Collectors;

/**
 * Checks a run's {@link History} against every invariant that docs/fault-injection.md lists, after the system drained.
 * Each violation names the invariant, says what is wrong, and carries the rows that show it.
 */
public final class Checker {

    public static final String SCHEDULER = "scheduler";
    public static final String RELAY = "relay";

    /** One broken invariant, with the history that shows it. */
    public record Violation(String invariant, String message, List<String> evidence) {
        @Override
        public String toString() {
            StringBuilder sb = new StringBuilder("VIOLATION [")
                    .append(invariant)
                    .append("] ")
                    .append(message);
            for (String line : evidence) {
                sb.append("\n    ").append(line);
            }
            return sb.toString();
        }
    }

    /** What the checker counted and found. */
    public record Result(
            String seed,
            int submitted,
            int scheduled,
            int jobs,
            int completed,
            int effects,
            Map<String, Integer> faults,
            Map<String, Integer> takeovers,
            long duplicatesAbsorbed,
            int staleRejected,
            int deadLetters,
            int forged,
            int unauthenticated,
            int limitedKeys,
            int limitedJobs,
            List<Violation> violations) {

        public boolean ok() {
            return violations.isEmpty();
        }

        /** The one summary line of a run. */
        public String summary() {
            int faultTotal =
                    faults.values().stream().mapToInt(Integer::intValue).sum();
            return "chaos " + (ok() ? "PASS" : "FAIL") + " seed=" + seed
                    + " jobs=" + jobs + " (inserted " + submitted + ", from schedules " + scheduled + ")"
                    + " completed=" + completed + " effects=" + effects
                    + " faults=" + faultTotal + " " + faults
                    + " takeovers=" + takeovers
                    + " duplicates-absorbed=" + duplicatesAbsorbed
                    + " stale-rejected=" + staleRejected
                    + " dead-letters=" + deadLetters
                    + " forged-inputs=" + forged
                    + " unauthenticated=" + unauthenticated
                    + " limited-keys=" + limitedKeys + " limited-jobs=" + limitedJobs
                    + " violations=" + violations.size();
        }
    }

    private final History h;
    private final List<Violation> violations = new ArrayList<>();
    private final Map<Long, Job> jobs;
    private final Map<Long, List<OutboxRow>> outboxByJob;
    private final Map<Long, List<TopicRecord>> topicByJob;
    private final Map<Long, List<Effect>> effectsByJob;
    private final Map<Long, Processed> processedByJob;
    private final Map<Long, List<Rejection>> rejectionsByJob;
    private final Map<String, TreeMap<Long, Takeover>> takeovers;
    /** The takeovers of each role family (a role and its shards: scheduler, scheduler/1, ...), by token. */
    private final Map<String, TreeMap<Long, Takeover>> families;

    private final Map<Long, Forged> forgedByJob = new HashMap<>();

    private Checker(History h) {
        this.h = h;
        this.jobs = h.jobs.stream()
                .collect(Collectors.toMap(Job::id, Function.identity(), (a, b) -> a, LinkedHashMap::new));
        this.outboxByJob = h.outbox.stream().collect(Collectors.groupingBy(OutboxRow::jobId));
        this.topicByJob =
                h.topic.stream().filter(r -> r.jobId() != null).collect(Collectors.groupingBy(TopicRecord::jobId));
        this.effectsByJob = h.effects.stream().collect(Collectors.groupingBy(Effect::jobId));
        this.processedByJob =
                h.processed.stream().collect(Collectors.toMap(Processed::jobId, Function.identity(), (a, b) -> a));
        this.rejectionsByJob = h.rejections.stream().collect(Collectors.groupingBy(Rejection::jobId));
        this.takeovers = new TreeMap<>();
        this.families = new TreeMap<>();
        for (Takeover t : h.takeovers) {
            takeovers.computeIfAbsent(t.role(), r -> new TreeMap<>()).put(t.fencingToken(), t);
            families.computeIfAbsent(family(t.role()), r -> new TreeMap<>()).put(t.fencingToken(), t);
        }
        for (Forged f : h.forged) {
            if (f.jobId() != null && !f.kind().equals("duplicate")) {
                forgedByJob.put(f.jobId(), f);
            }
        }
    }

    public static Result check(History history) {
        Checker c = new Checker(history);
        for (String crash : history.crashes) {
            c.violation("services stay up", crash, List.of());
        }
        c.checkTokens();
        c.checkJobsAndOutbox();
        c.checkTokensPerResource();
        c.checkTopic();
        c.checkEffects();
        c.checkAccounting();
        c.checkSchedules();
        c.checkLimits();
        c.checkRankOrder();
        c.checkPauses();
        Map<String, Integer> takeoverCounts = new TreeMap<>();
        c.takeovers.forEach((role, byToken) -> takeoverCounts.put(role, byToken.size()));
        long validRecords =
                history.topic.stream().filter(r -> r.jobId() != null).count();
        long distinctJobs = history.topic.stream()
                .map(TopicRecord::jobId)
                .filter(Objects::nonNull)
                .distinct()
                .count();
        int completed = (int)
                history.jobs.stream().filter(j -> "completed".equals(j.state())).count();
        int scheduled = (int) history.jobs.stream()
                .filter(j -> j.uniqueKey() != null && j.uniqueKey().startsWith("schedule:"))
                .count();
        Set<String> limited =
                history.limits.stream().map(History.Limit::dispatchKey).collect(Collectors.toSet());
        int limitedJobs = (int)
                history.jobs.stream().filter(j -> limited.contains(j.key())).count();
        return new Result(
                history.seed,
                history.submitted.size(),
                scheduled,
                history.jobs.size(),
                completed,
                history.effects.size(),
                history.faultCounts(),
                takeoverCounts,
                validRecords - distinctJobs,
                history.rejections.size(),
                history.deadLetters.size(),
                history.forged.size(),
                (int) history.deadLetters.stream()
                        .filter(d -> d.reason() != null && d.reason().startsWith("unauthenticated"))
                        .count(),
                limited.size(),
                limitedJobs,
                List.copyOf(c.violations));
    }

    // Invariants 1 and 2: one holder at a time, tokens only grow, every takeover recorded. A database
    // failover starts a fencing epoch: the first token of epoch e (timeline e + 1) is e << 32 + 1. With
    // shards (invariant 16), a role family's shards draw from one counter: every new token of any of
    // them is the family's next, so the family's tokens, not each role's, follow one another.
    private void checkTokens() {
        for (Map.Entry<String, TreeMap<Long, Takeover>> e : families.entrySet()) {
            long expected = 1;
            Takeover previous = null;
            for (Takeover t : e.getValue().values()) {
                long epoch = t.fencingToken() >>> 32;
                if (epoch > (expected >>> 32)) {
                    expected = (epoch << 32) + 1;
                }
                if (t.fencingToken() != expected) {
                    violation(
                            "2 tokens",
                            "role " + t.role() + ": token " + t.fencingToken() + " follows "
                                    + (previous == null ? "no token" : previous.fencingToken()) + " where " + expected
                                    + " was due, so a takeover is missing from the history",
                            List.of(show(t)));
                }
                if (previous != null && t.acquiredAt() <= previous.acquiredAt()) {
                    violation(
                            "1-2 one holder, tokens grow",
                            "role " + t.role() + ": token " + t.fencingToken() + " was granted no later than token "
                                    + previous.fencingToken(),
                            List.of(show(previous), show(t)));
                }
                expected = t.fencingToken() + 1;
                previous = t;
            }
        }
        for (History.Lease lease : h.leases) {
            TreeMap<Long, Takeover> byToken = takeovers.getOrDefault(lease.role(), new TreeMap<>());
            long max = byToken.isEmpty() ? 0 : byToken.lastKey();
            if (lease.fencingToken() != max) {
                violation(
                        "2 tokens",
                        "role " + lease.role() + ": the lease holds token " + lease.fencingToken()
                                + " but the takeover history ends at " + max,
                        List.of(lease.toString()));
            }
        }
    }

    // Invariants 3 and 4, and "nothing lost" on the producer side.
    private void checkJobsAndOutbox() {
        Set<String> keys = new HashSet<>();
        for (Job j : jobs.values()) {
            if (j.uniqueKey() != null) {
                keys.add(j.uniqueKey());
            }
        }
        for (String key : h.submitted) {
            if (!keys.contains(key)) {
                violation(
                        "nothing lost",
                        "the insert of job " + key + " was acknowledged but no such job exists",
                        List.of());
            }
        }
        for (Job j : jobs.values()) {
            List<OutboxRow> rows = outboxByJob.getOrDefault(j.id(), List.of());
            if (!"completed".equals(j.state())) {
                violation(
                        "nothing lost",
                        "job " + j.id() + " is still " + j.state() + " after the drain",
                        evidence(j.id()));
                if (!rows.isEmpty()) {
                    violation(
                            "4 outbox", "job " + j.id() + " is not completed but has an outbox row", evidence(j.id()));
                }
                continue;
            }
            if (rows.isEmpty()) {
                violation("4 outbox", "completed job " + j.id() + " has no outbox row", evidence(j.id()));
            } else if (rows.size() > 1) {
                violation(
                        "3 completed once",
                        "job " + j.id() + " was completed " + rows.size() + " times (outbox rows with tokens "
                                + rows.stream().map(OutboxRow::fencingToken).toList() + ")",
                        evidence(j.id()));
            }
            for (OutboxRow r : rows) {
                if (!Objects.equals(r.fencingToken(), j.completedByToken())) {
                    violation(
                            "4 outbox",
                            "job " + j.id() + " was completed with token " + j.completedByToken()
                                    + " but its outbox row carries " + r.fencingToken(),
                            evidence(j.id()));
                }
            }
            Long token = j.completedByToken();
            // The lease of the job's shard (its shard when completed: a pending job moves only with a switch).
            TreeMap<Long, Takeover> scheduler =
                    takeovers.getOrDefault(shardRole(SCHEDULER, j.shard()), new TreeMap<>());
            Takeover granted = token == null ? null : scheduler.get(token);
            if (granted == null) {
                violation(
                        "3/16 valid token",
                        "job " + j.id() + " (shard " + j.shard() + ") was completed with token " + token
                                + ", which its shard's scheduler lease never granted",
                        evidence(j.id()));
                continue;
            }
            Map.Entry<Long, Takeover> following = scheduler.higherEntry(token);
            Takeover next = following == null ? null : following.getValue();
            if (j.completedAt() < granted.acquiredAt() || (next != null && j.completedAt() >= next.acquiredAt())) {
                violation(
                        "3/8 fenced writes",
                        "job " + j.id() + " was completed with token " + token + " at " + j.completedAt()
                                + ", outside that token's tenure [" + granted.acquiredAt() + ", "
                                + (next == null ? "now" : String.valueOf(next.acquiredAt()))
                                + "): a stale leader wrote",
                        evidence(j.id()));
            }
        }
        for (OutboxRow r : h.outbox) {
            if (!jobs.containsKey(r.jobId())) {
                violation(
                        "4 outbox",
                        "outbox row " + r.id() + " is for job " + r.jobId() + ", which does not exist",
                        List.of(show(r)));
            }
        }
    }

    // Invariant 5: every outbox row reaches the topic, with its token, per resource in commit order.
    private void checkTopic() {
        for (OutboxRow r : h.outbox) {
            if (r.publishError() != null) {
                continue;
            }
            List<TopicRecord> records = topicByJob.getOrDefault(r.jobId(), List.of());
            if (records.stream().noneMatch(t -> Objects.equals(t.outboxId(), r.id()))) {
                violation(
                        "5 published",
                        "outbox row " + r.id() + " (job " + r.jobId() + ") never reached the topic",
                        evidence(r.jobId()));
            }
        }
        for (Map.Entry<Long, List<TopicRecord>> e : topicByJob.entrySet()) {
            long jobId = e.getKey();
            if (forgedByJob.containsKey(jobId)) {
                continue;
            }
            List<OutboxRow> rows = outboxByJob.getOrDefault(jobId, List.of());
            for (TopicRecord t : e.getValue()) {
                if (rows.stream().noneMatch(r -> r.id() == t.outboxId() && r.fencingToken() == t.fencingToken())) {
                    violation(
                            "5 published",
                            "the topic holds a record for job " + jobId + " (outbox " + t.outboxId() + ", token "
                                    + t.fencingToken() + ") that matches no outbox row",
                            evidence(jobId));
                    break;
                }
            }
        }
        // Per resource, in offset order, a record never seen before must have a larger outbox id than
        // every record of that resource before it (re-sent copies of earlier rows are fine).
        Map<String, Long> highest = new HashMap<>();
        Set<Long> seen = new HashSet<>();
        List<TopicRecord> ordered = h.topic.stream()
                .filter(r -> r.outboxId() != null && !forgedByJob.containsKey(r.jobId()))
                .sorted(Comparator.comparingInt(TopicRecord::partition).thenComparingLong(TopicRecord::offset))
                .toList();
        Map<String, Integer> partitionOf = new HashMap<>();
        for (TopicRecord r : ordered) {
            Integer p = partitionOf.putIfAbsent(r.resource(), r.partition());
            if (p != null && p != r.partition()) {
                violation(
                        "5 order",
                        "resource " + r.resource() + " has records in partitions " + p + " and " + r.partition(),
                        List.of(show(r)));
            }
            if (!seen.add(r.outboxId())) {
                continue;
            }
            Long before = highest.get(r.resource());
            if (before != null && r.outboxId() < before) {
                violation(
                        "5 order",
                        "resource " + r.resource() + ": outbox row " + r.outboxId() + " reached the topic after row "
                                + before + ", against commit order",
                        evidence(r.jobId()));
            }
            highest.merge(r.resource(), r.outboxId(), Math::max);
        }
        // What the consumer saw of it: a record it had to apply late.
        for (History.Late l : h.late) {
            violation(
                    "5 order",
                    "the consumer applied job " + l.jobId() + " (outbox " + l.outboxId() + ") of resource "
                            + l.resource() + " late, after outbox row " + l.highestOutboxId(),
                    evidence(l.jobId()));
        }
        // A reuse is what a rolled-back database leaves; the suite's standby is synchronous, so nothing may roll back.
        for (History.Reused u : h.reused) {
            violation(
                    "2/6 identities",
                    "the consumer saw "
                            + (u.kind().equals("token") ? "token " + u.fencingToken() : "job id " + u.jobId())
                            + " reused (" + u.resource() + ", after " + u.previous() + "): the database rolled back",
                    evidence(u.jobId()));
        }
    }

    // Invariants 6 and 7: one effect per completed job, never with a token below the resource's high-water mark.
    private void checkEffects() {
        for (Job j : jobs.values()) {
            if (!"completed".equals(j.state())) {
                continue;
            }
            List<Effect> effects = effectsByJob.getOrDefault(j.id(), List.of());
            if (effects.isEmpty()) {
                violation("6 exactly once", "completed job " + j.id() + " has no effect", evidence(j.id()));
            } else if (effects.size() > 1) {
                violation("6 exactly once", "job " + j.id() + " has " + effects.size() + " effects", evidence(j.id()));
            }
            for (Effect e : effects) {
                if (!Objects.equals(e.fencingToken(), j.completedByToken())
                        || !e.resource().equals(j.resource())) {
                    violation(
                            "6 exactly once",
                            "the effect of job " + j.id() + " carries resource " + e.resource() + ", token "
                                    + e.fencingToken() + "; the job has " + j.resource() + ", token "
                                    + j.completedByToken(),
                            evidence(j.id()));
                }
            }
        }
        for (Map.Entry<Long, List<Effect>> e : effectsByJob.entrySet()) {
            long jobId = e.getKey();
            if (jobs.containsKey(jobId)) {
                continue;
            }
            Forged f = forgedByJob.get(jobId);
            if (f != null && Forger.UNAUTHENTICATED.contains(f.kind())) {
                violation(
                        "13 authenticated",
                        "an effect was applied for job " + jobId + ", a forged " + f.kind()
                                + " record that no trusted key signed",
                        evidence(jobId));
            } else if (f == null || !f.kind().equals("fresh")) {
                violation(
                        "6 exactly once",
                        "an effect was applied for job " + jobId + ", which was never completed"
                                + (f == null ? "" : " (a forged " + f.kind() + " record)"),
                        evidence(jobId));
            } else if (e.getValue().size() != 1) {
                violation(
                        "6 exactly once",
                        "forged job " + jobId + " has " + e.getValue().size() + " effects",
                        evidence(jobId));
            }
        }
        Map<String, Effect> highest = new HashMap<>();
        for (Effect e :
                h.effects.stream().sorted(Comparator.comparingLong(Effect::id)).toList()) {
            Effect before = highest.get(e.resource());
            if (before != null && e.fencingToken() < before.fencingToken()) {
                violation(
                        "7 fence",
                        "effect of job " + e.jobId() + " on " + e.resource() + " was applied with token "
                                + e.fencingToken() + " after token " + before.fencingToken() + " (job " + before.jobId()
                                + ") had been accepted",
                        List.of(show(before), show(e)));
            }
            if (before == null || e.fencingToken() >= before.fencingToken()) {
                highest.put(e.resource(), e);
            }
        }
    }

    // Invariants 7 and 9: every stale or malformed input is accounted for.
    private void checkAccounting() {
        Map<String, DeadLetter> deadByPosition = new HashMap<>();
        for (DeadLetter d : h.deadLetters) {
            deadByPosition.put(d.partition() + "@" + d.offset(), d);
        }
        for (TopicRecord r : h.topic) {
            if (r.jobId() == null) {
                if (!deadByPosition.containsKey(r.partition() + "@" + r.offset())) {
                    violation(
                            "9 bad input",
                            "the malformed record at partition " + r.partition() + " offset " + r.offset()
                                    + " was neither dead-lettered nor reported",
                            List.of(show(r)));
                }
                continue;
            }
            Forged forged = forgedByJob.get(r.jobId());
            if (forged != null && Forger.UNAUTHENTICATED.contains(forged.kind())) {
                continue; // checked below: never decided, dead-lettered as unauthenticated
            }
            Processed p = processedByJob.get(r.jobId());
            if (p == null) {
                violation(
                        "6 exactly once",
                        "the record of job " + r.jobId() + " at partition " + r.partition() + " offset " + r.offset()
                                + " was never decided by the consumer",
                        evidence(r.jobId()));
                continue;
            }
            boolean accounted = switch (p.outcome()) {
                case "applied" -> effectsByJob.containsKey(r.jobId());
                case "rejected" -> rejectionsByJob.containsKey(r.jobId());
                case "dead_letter" -> h.deadLetters.stream().anyMatch(d -> Objects.equals(d.jobId(), r.jobId()));
                default -> false;
            };
            if (!accounted) {
                violation(
                        "7/9 accounted",
                        "job " + r.jobId() + " is recorded as " + p.outcome() + " but no matching row exists",
                        evidence(r.jobId()));
            }
        }
        for (Forged f : h.forged) {
            if (Forger.UNAUTHENTICATED.contains(f.kind())) {
                DeadLetter d = deadByPosition.get(f.partition() + "@" + f.offset());
                if (d == null || d.reason() == null || !d.reason().startsWith("unauthenticated")) {
                    violation(
                            "13 authenticated",
                            "forged " + f.kind() + " record for job " + f.jobId() + " at partition " + f.partition()
                                    + " offset " + f.offset() + " was not dead-lettered as unauthenticated"
                                    + (d == null ? "" : " (" + d.reason() + ")"),
                            evidence(f.jobId()));
                }
                if (processedByJob.containsKey(f.jobId())) {
                    violation(
                            "13 authenticated",
                            "forged " + f.kind() + " record for job " + f.jobId() + " claimed its job id as "
                                    + processedByJob.get(f.jobId()).outcome(),
                            evidence(f.jobId()));
                }
                continue;
            }
            switch (f.kind()) {
                case "malformed" -> {
                    if (!deadByPosition.containsKey(f.partition() + "@" + f.offset())) {
                        violation(
                                "9 bad input",
                                "forged malformed record at partition " + f.partition() + " offset " + f.offset()
                                        + " was not dead-lettered",
                                List.of(f.toString()));
                    }
                }
                case "stale" -> {
                    List<Rejection> rejected = rejectionsByJob.getOrDefault(f.jobId(), List.of());
                    if (rejected.isEmpty()) {
                        violation(
                                "7 fence",
                                "forged stale record for job " + f.jobId() + " (token " + f.fencingToken() + " on "
                                        + f.resource() + ") was not rejected",
                                evidence(f.jobId()));
                    }
                }
                default -> {
                    // fresh and duplicate: checked with the effects.
                }
            }
        }
        for (Rejection r : h.rejections) {
            if (r.fencingToken() >= r.highestToken()) {
                violation(
                        "7 fence",
                        "job " + r.jobId() + " was rejected as stale with token " + r.fencingToken()
                                + " though the resource's highest was " + r.highestToken(),
                        List.of(show(r)));
            }
            if (effectsByJob.containsKey(r.jobId())) {
                violation("7 fence", "job " + r.jobId() + " was both rejected and applied", evidence(r.jobId()));
            }
        }
    }

    /** How old an undecided occurrence may be when the runner pauses its schedule (the dispatchers' default misfire grace). */
    static final long SCHEDULE_GRACE_MICROS = 60_000_000L;

    /**
     * Invariant 10: every occurrence of every schedule, from its start to its {@code next_fire_at},
     * became exactly one job (its key names the schedule and the fire time, and it is due then) or
     * lies in exactly one recorded skip: none twice, none missing. A skip is {@code paused} only
     * before a resume the runner made; a {@code misfire} skip means occurrences were left undecided
     * longer than the grace, which no fault of a run lasts. When the runner paused a schedule for
     * good, its occurrences older than the grace had all been decided.
     */
    private void checkSchedules() {
        Map<String, List<Job>> jobsBySchedule = new HashMap<>();
        for (Job j : jobs.values()) {
            if (j.uniqueKey() != null && j.uniqueKey().startsWith("schedule:")) {
                jobsBySchedule
                        .computeIfAbsent(
                                j.uniqueKey()
                                        .substring(
                                                "schedule:".length(),
                                                j.uniqueKey().lastIndexOf('@')),
                                n -> new ArrayList<>())
                        .add(j);
            }
        }
        for (History.Schedule s : h.schedules) {
            Instant start = instant(s.startsAt());
            Occurrences rule = s.cron() != null
                    ? Occurrences.cron(s.cron(), s.timeZone(), start)
                    : Occurrences.every(Duration.ofNanos(s.everyMicros() * 1000), start);
            Map<Instant, Job> byFireTime = new HashMap<>();
            for (Job j : jobsBySchedule.getOrDefault(s.name(), List.of())) {
                Instant at = fireTime(j.uniqueKey());
                if (byFireTime.put(at, j) != null) {
                    violation(
                            "10 schedule occurrences",
                            "schedule " + s.name() + ": two jobs for the occurrence at " + at,
                            evidence(j.id()));
                }
            }
            List<History.ScheduleSkip> skips = h.scheduleSkips.stream()
                    .filter(k -> k.name().equals(s.name()))
                    .toList();
            List<History.SchedulePause> pauses = h.schedulePauses.stream()
                    .filter(p -> p.name().equals(s.name()))
                    .toList();
            Instant next = s.nextFireAt() == null ? start : instant(s.nextFireAt());
            long occurrences = 0;
            long asJobs = 0;
            for (Instant t = rule.first(); t != null && t.isBefore(next); t = rule.after(t)) {
                occurrences++;
                long micros = micros(t);
                List<History.ScheduleSkip> in = skips.stream()
                        .filter(k -> k.firstFireAt() <= micros && micros <= k.lastFireAt())
                        .toList();
                boolean job = byFireTime.remove(t) != null;
                asJobs += job ? 1 : 0;
                if ((job ? 1 : 0) + in.size() != 1) {
                    violation(
                            "10 schedule occurrences",
                            "schedule " + s.name() + ": the occurrence at " + t + " became " + (job ? 1 : 0)
                                    + " job(s) and lies in " + in.size() + " skip(s)",
                            in.stream().map(Checker::show).toList());
                }
                for (History.ScheduleSkip k : in) {
                    boolean resumedAfter = pauses.stream().anyMatch(p -> !p.paused() && p.at() > micros);
                    if (k.reason().equals("paused") && !resumedAfter) {
                        violation(
                                "10 schedule occurrences",
                                "schedule " + s.name() + ": the occurrence at " + t
                                        + " was skipped as paused, but no resume came after it",
                                List.of(show(k)));
                    } else if (k.reason().equals("misfire")) {
                        violation(
                                "10 schedule occurrences",
                                "schedule " + s.name() + ": the occurrence at " + t
                                        + " was skipped as missed: it was left undecided longer than the grace",
                                List.of(show(k)));
                    }
                }
            }
            for (Map.Entry<Instant, Job> left : byFireTime.entrySet()) {
                violation(
                        "10 schedule occurrences",
                        "schedule " + s.name() + ": job " + left.getValue().id() + " is for " + left.getKey()
                                + ", which is not an occurrence before its next_fire_at " + next,
                        evidence(left.getValue().id()));
            }
            if (asJobs != s.fired() || occurrences - asJobs != s.skipped()) {
                violation(
                        "10 schedule occurrences",
                        "schedule " + s.name() + " counts " + s.fired() + " fired and " + s.skipped()
                                + " skipped; its jobs and skips are " + asJobs + " and " + (occurrences - asJobs),
                        List.of(s.toString()));
            }
            pauses.stream()
                    .filter(History.SchedulePause::paused)
                    .reduce((a, b) -> b)
                    .ifPresent(last -> {
                        boolean resumedLater = pauses.stream().anyMatch(p -> !p.paused() && p.at() > last.at());
                        long nextMicros = s.nextFireAt() == null ? s.startsAt() : s.nextFireAt();
                        if (!resumedLater && nextMicros < last.at() - SCHEDULE_GRACE_MICROS) {
                            violation(
                                    "10 schedule occurrences",
                                    "schedule " + s.name() + " was paused at " + instant(last.at())
                                            + " with occurrences from " + instant(nextMicros) + " not yet decided",
                                    List.of(s.toString()));
                        }
                    });
        }
    }

    /**
     * Invariant 14: per limited key, the jobs completed in any one second of database time, both
     * ends included, are at most {@code per_second + burst}: a full bucket at the window's start
     * plus one second of refill. It holds across takeovers because the bucket is written only in
     * the guarded batch, and a job's {@code completed_at} is the instant its batch refilled and
     * spent the bucket. Checked against the limits the run left (it never changes them). Reports
     * each key's busiest window.
     */
    private void checkLimits() {
        Map<String, List<Long>> completions = new HashMap<>();
        for (Job j : jobs.values()) {
            if ("completed".equals(j.state()) && j.completedAt() != null) {
                completions.computeIfAbsent(j.key(), k -> new ArrayList<>()).add(j.completedAt());
            }
        }
        for (History.Limit limit : h.limits) {
            long allowed = (long) Math.floor(limit.perSecond() + limit.burst() + 1e-9);
            long[] times = completions.getOrDefault(limit.dispatchKey(), List.of()).stream()
                    .mapToLong(Long::longValue)
                    .sorted()
                    .toArray();
            int worst = 0;
            int worstStart = 0;
            for (int first = 0, last = 0; first < times.length; first++) {
                while (last < times.length && times[last] <= times[first] + 1_000_000L) {
                    last++;
                }
                if (last - first > worst) {
                    worst = last - first;
                    worstStart = first;
                }
            }
            if (worst > allowed) {
                violation(
                        "14 rate limits",
                        "key " + limit.dispatchKey() + " (" + limit.perSecond() + "/s, burst " + limit.burst() + "): "
                                + worst + " jobs completed in the second from " + instant(times[worstStart])
                                + ", where at most " + allowed + " may be",
                        List.of(limit.toString()));
            }
        }
    }

    /**
     * Invariant 15: a key whose jobs were all committed before any could be completed (the run's
     * backlog) has them completed in rank order: no job completed before one that ranks ahead of
     * it in its key (due time moved earlier by the priority, then id). Batches of one key take its
     * due jobs in that order, under limits and across takeovers alike. Reports the first inversion.
     */
    private void checkRankOrder() {
        // Rank order holds within a shard (docs/shards.md): each shard's batches rank its own jobs.
        Set<String> keysInShards = new TreeSet<>();
        for (String key : h.rankOrderedKeys) {
            jobs.values().stream()
                    .filter(j -> key.equals(j.key()))
                    .forEach(j -> keysInShards.add(j.shard() + "\u0000" + key));
        }
        for (String keyInShard : keysInShards) {
            int shard = Integer.parseInt(keyInShard.substring(0, keyInShard.indexOf('\u0000')));
            String key = keyInShard.substring(keyInShard.indexOf('\u0000') + 1);
            List<Job> ranked = jobs.values().stream()
                    .filter(j -> key.equals(j.key())
                            && j.shard() == shard
                            && "completed".equals(j.state())
                            && j.dueAt() != null
                            && j.completedAt() != null)
                    .sorted(Comparator.comparingLong(Job::rank).thenComparingLong(Job::id))
                    .toList();
            int inversions = 0;
            Job first = null;
            Job firstAhead = null;
            for (int b = 0; b < ranked.size(); b++) {
                Job j = ranked.get(b);
                // A job ahead of j completed after it, and in j's shard when j completed: a change of the shard count
                // may have moved it there only later (docs/shards.md: a shard ranks the jobs it holds).
                Job ahead = null;
                for (int a = 0; a < b; a++) {
                    Job k = ranked.get(a);
                    if (k.completedAt() > j.completedAt()
                            && inShardAt(k, shard, j.completedAt())
                            && (ahead == null || k.completedAt() > ahead.completedAt())) {
                        ahead = k;
                    }
                }
                if (ahead != null && inversions++ == 0) {
                    first = j;
                    firstAhead = ahead;
                }
            }
            if (inversions > 0) {
                violation(
                        "15 rank order",
                        "key " + key + ": " + inversions
                                + " job(s) completed before a job that ranks ahead of them; the first, job "
                                + first.id() + " (priority " + first.priority() + "), at "
                                + instant(first.completedAt()) + ", before job " + firstAhead.id()
                                + " (priority " + firstAhead.priority() + ") at " + instant(firstAhead.completedAt()),
                        List.of(show(firstAhead), show(first)));
            }
        }
    }

    /**
     * Invariant 19: no job of a paused key completed while its pause stood. A batch that completes
     * jobs holds {@code jobs} from before it reads its clock to its commit, and a pause waits for it
     * (docs/dispatch.md, "Pause and resume"), so a job completed at or after the pause's {@code
     * paused_at} was completed by a batch that started after the pause committed; and up to the
     * clock read in the resume's transaction, before it deleted the row, every such batch saw the
     * pause. Reports each pause's first such job.
     */
    private void checkPauses() {
        for (History.KeyPause p : h.keyPauses) {
            List<Job> during = jobs.values().stream()
                    .filter(j -> "completed".equals(j.state()) && j.completedAt() != null)
                    .filter(j -> p.key().equals(j.key()))
                    .filter(j -> j.completedAt() >= p.pausedAt() && j.completedAt() <= p.checkedAt())
                    .sorted(Comparator.comparingLong(Job::completedAt))
                    .toList();
            if (!during.isEmpty()) {
                Job first = during.get(0);
                violation(
                        "19 pauses",
                        "key " + p.key() + ", paused from " + instant(p.pausedAt()) + " to " + instant(p.checkedAt())
                                + ": " + during.size() + " job(s) completed meanwhile; the first, job " + first.id()
                                + ", at " + instant(first.completedAt()),
                        List.of(show(first)));
            }
        }
    }

    /**
     * Whether pending job {@code k} was in {@code shard} at {@code micros}, under every shard count
     * that may have been in force then: the counts before and after each change the run made
     * ({@code reshard} faults, "shard map 2 -> 3"), the change's window (asked for to seen in
     * force) counting as either. With no change, its shard now.
     */
    private boolean inShardAt(Job k, int shard, long micros) {
        List<Integer> counts = null;
        for (Fault f : h.faults) {
            if (!"reshard".equals(f.kind())) {
                continue;
            }
            String[] change = f.target().substring("shard map ".length()).split(" -> ");
            int before = Integer.parseInt(change[0]);
            int after = Integer.parseInt(change[1]);
            long askedAt = (h.startedAtMillis + f.atMillis()) * 1000;
            if (micros < askedAt) {
                if (counts == null) {
                    counts = List.of(before);
                }
                break;
            }
            counts = micros <= askedAt + f.heldMillis() * 1000 ? List.of(before, after) : List.of(after);
        }
        return counts == null || counts.stream().allMatch(c -> shardOf(k.resource(), c) == shard);
    }

    /** shard_of (R__shards.sql): the first 32 bits of the MD5 of the resource, as a signed integer, its sign bit off, modulo the count. */
    static int shardOf(String resource, int count) {
        if (count <= 1) {
            return 0;
        }
        try {
            byte[] md5 = MessageDigest.getInstance("MD5").digest(resource.getBytes(StandardCharsets.UTF_8));
            int first = ((md5[0] & 0xff) << 24) | ((md5[1] & 0xff) << 16) | ((md5[2] & 0xff) << 8) | (md5[3] & 0xff);
            return (first & 0x7fffffff) % count;
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * Invariant 17: for every resource, the tokens on its outbox rows, in id order (each shard's
     * commit order; a switch of the shard map puts the new map's rows after every row of the old),
     * never go back: across takeovers of its shard and across changes of the shard count.
     */
    private void checkTokensPerResource() {
        Map<String, OutboxRow> last = new HashMap<>();
        for (OutboxRow r : h.outbox) {
            OutboxRow before = last.put(r.resource(), r);
            if (before != null && r.fencingToken() < before.fencingToken()) {
                violation(
                        "17 tokens grow per resource",
                        "resource " + r.resource() + ": outbox row " + r.id() + " has token " + r.fencingToken()
                                + ", below token " + before.fencingToken() + " of row " + before.id() + " before it",
                        List.of(show(before), show(r)));
            }
        }
    }

    /** A role's family: the role without its shard ({@code scheduler/3} is of {@code scheduler}). */
    static String family(String role) {
        int slash = role.indexOf('/');
        return slash < 0 ? role : role.substring(0, slash);
    }

    /** The lease role of a shard, as {@code shard_role} names it. */
    static String shardRole(String base, int shard) {
        return shard == 0 ? base : base + "/" + shard;
    }

    /** The fire time a schedule occurrence's key names: schedule:<name>@<fire time>. */
    static Instant fireTime(String key) {
        return Instant.parse(key.substring(key.lastIndexOf('@') + 1));
    }

    static long micros(Instant t) {
        return t.getEpochSecond() * 1_000_000L + t.getNano() / 1000;
    }

    private static Instant instant(long micros) {
        return Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L) * 1000);
    }

    private static String show(History.ScheduleSkip k) {
        return "skip of " + k.name() + " from " + instant(k.firstFireAt()) + " to " + instant(k.lastFireAt()) + ": "
                + k.occurrences() + " occurrence(s), " + k.reason();
    }

    private void violation(String invariant, String message, List<String> evidence) {
        violations.add(new Violation(invariant, message, evidence));
    }

    /** Every row that mentions a job, and the takeovers around its token: the history of one job. */
    private List<String> evidence(long jobId) {
        List<String> lines = new ArrayList<>();
        Job j = jobs.get(jobId);
        if (j != null) {
            lines.add(show(j));
        }
        Forged f = forgedByJob.get(jobId);
        if (f != null) {
            lines.add("forged by the runner: " + f);
        }
        outboxByJob.getOrDefault(jobId, List.of()).forEach(r -> lines.add(show(r)));
        topicByJob.getOrDefault(jobId, List.of()).forEach(r -> lines.add(show(r)));
        Processed p = processedByJob.get(jobId);
        if (p != null) {
            lines.add(p.toString());
        }
        effectsByJob.getOrDefault(jobId, List.of()).forEach(e -> lines.add(show(e)));
        rejectionsByJob.getOrDefault(jobId, List.of()).forEach(r -> lines.add(show(r)));
        TreeMap<Long, Takeover> scheduler = families.getOrDefault(SCHEDULER, new TreeMap<>());
        Set<Long> tokens = new TreeSet<>();
        if (j != null && j.completedByToken() != null) {
            tokens.add(j.completedByToken());
            tokens.add(j.completedByToken() + 1);
        }
        outboxByJob.getOrDefault(jobId, List.of()).forEach(r -> {
            tokens.add(r.fencingToken());
            tokens.add(r.fencingToken() + 1);
        });
        for (long t : tokens) {
            Takeover takeover = scheduler.get(t);
            if (takeover != null) {
                lines.add(show(takeover));
            }
        }
        return lines;
    }

    private static String show(Object row) {
        return row.toString();
    }
}
