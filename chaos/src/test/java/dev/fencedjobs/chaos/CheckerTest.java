package dev.fencedjobs.chaos;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.chaos.History.Effect;
import dev.fencedjobs.chaos.History.Job;
import dev.fencedjobs.chaos.History.OutboxRow;
import dev.fencedjobs.chaos.History.Takeover;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The checker is only worth its PASS if it can FAIL. These tests load a history recorded from a
 * real chaos run (chaos/src/test/resources/recorded-history.json.gz, made with
 * {@code --record}), check that it passes as recorded, then plant one violation at a time and
 * check that the checker flags it, naming the invariant and showing the rows.
 */
class CheckerTest {

    private History history;

    @BeforeEach
    void loadRecordedHistory() throws IOException {
        try (InputStream in = getClass().getResourceAsStream("/recorded-history.json.gz")) {
            assertThat(in).as("recorded history on the test classpath").isNotNull();
            history = History.load(in);
        }
    }

    @Test
    void theRecordedRunPasses() {
        Checker.Result result = Checker.check(history);

        assertThat(result.violations()).isEmpty();
        assertThat(result.jobs()).isGreaterThan(1000);
        assertThat(result.effects()).isGreaterThan(result.jobs() - 1);
        assertThat(result.faults().keySet())
                .containsAll(List.of(ChaosRun.Kind.values()).stream()
                        .map(k -> k.label)
                        .toList());
        assertThat(result.takeovers().get(Checker.SCHEDULER)).isGreaterThan(1);
        assertThat(result.staleRejected()).isPositive();
        assertThat(result.deadLetters()).isPositive();
        assertThat(result.summary()).startsWith("chaos PASS").endsWith("violations=0");
    }

    @Test
    void aJobCompletedTwiceIsFlagged() {
        Job job = completedJobOfAnEarlierToken();
        long laterToken = job.completedByToken() + 1;
        long nextId = history.outbox.stream().mapToLong(OutboxRow::id).max().orElseThrow() + 1;
        history.outbox.add(new OutboxRow(nextId, job.id(), job.resource(), laterToken, null, null));

        assertFlagged("3 completed once", "job " + job.id() + " was completed 2 times");
    }

    @Test
    void aLostJobIsFlagged() {
        Job job = history.jobs.get(history.jobs.size() / 2);
        history.effects.removeIf(e -> e.jobId() == job.id());

        assertFlagged("6 exactly once", "completed job " + job.id() + " has no effect");
    }

    @Test
    void anAcknowledgedInsertThatVanishedIsFlagged() {
        Job job = history.jobs.remove(history.jobs.size() / 3);

        assertFlagged(
                "nothing lost", "the insert of job " + job.uniqueKey() + " was acknowledged but no such job exists");
    }

    @Test
    void aJobLeftPendingIsFlagged() {
        int i = history.jobs.size() / 4;
        Job job = history.jobs.get(i);
        history.jobs.set(
                i,
                new Job(
                        job.id(),
                        job.uniqueKey(),
                        job.resource(),
                        "pending",
                        null,
                        null,
                        job.dispatchKey(),
                        job.dueAt(),
                        job.priority()));

        assertFlagged("nothing lost", "job " + job.id() + " is still pending after the drain");
    }

    @Test
    void aStaleEffectIsFlagged() {
        // The last effect on a resource that has seen two tokens, applied again under the lower one,
        // as if the consumer had let an old leader's message through after a newer one.
        Map<String, List<Effect>> byResource =
                history.effects.stream().collect(Collectors.groupingBy(Effect::resource));
        Effect newest = null;
        long lower = 0;
        for (List<Effect> effects : byResource.values()) {
            long min = effects.stream().mapToLong(Effect::fencingToken).min().orElseThrow();
            Effect last =
                    effects.stream().max(Comparator.comparingLong(Effect::id)).orElseThrow();
            if (last.fencingToken() > min) {
                newest = last;
                lower = min;
                break;
            }
        }
        assertThat(newest).as("a resource with effects under two tokens").isNotNull();
        long nextId = history.effects.stream().mapToLong(Effect::id).max().orElseThrow() + 1;
        history.effects.add(new Effect(nextId, -1, newest.resource(), lower, newest.appliedAt() + 1));

        assertFlagged("7 fence", "was applied with token " + lower + " after token " + newest.fencingToken());
    }

    @Test
    void aDuplicateEffectIsFlagged() {
        Effect effect = history.effects.get(history.effects.size() / 2);
        long nextId = history.effects.stream().mapToLong(Effect::id).max().orElseThrow() + 1;
        history.effects.add(
                new Effect(nextId, effect.jobId(), effect.resource(), effect.fencingToken(), effect.appliedAt() + 1));

        assertFlagged("6 exactly once", "job " + effect.jobId() + " has 2 effects");
    }

    @Test
    void aWriteByASupersededLeaderIsFlagged() {
        // A job stamped with token N but completed after its shard's next token was granted: the fence failed.
        Job job = completedJobOfAnEarlierToken();
        String role = Checker.shardRole(Checker.SCHEDULER, job.shard());
        Takeover next = history.takeovers.stream()
                .filter(t -> t.role().equals(role) && t.fencingToken() > job.completedByToken())
                .min(java.util.Comparator.comparingLong(Takeover::fencingToken))
                .orElseThrow();
        int i = history.jobs.indexOf(job);
        history.jobs.set(
                i,
                new Job(
                        job.id(),
                        job.uniqueKey(),
                        job.resource(),
                        job.state(),
                        job.completedByToken(),
                        next.acquiredAt() + 5,
                        job.dispatchKey(),
                        job.dueAt(),
                        job.priority(),
                        job.shard()));

        assertFlagged("3/8 fenced writes", "job " + job.id() + " was completed with token " + job.completedByToken());
    }

    @Test
    void aMissingTakeoverRecordIsFlagged() {
        // A takeover between two others of its role family (a role and its shards draw from one counter) and epoch.
        Takeover middle = history.takeovers.stream()
                .filter(t -> takeover(t.role(), t.fencingToken() - 1) != null
                        && takeover(t.role(), t.fencingToken() + 1) != null)
                .findFirst()
                .orElseThrow();
        history.takeovers.remove(middle);

        assertFlagged(
                "2 tokens",
                "role " + takeover(middle.role(), middle.fencingToken() + 1).role() + ": token "
                        + (middle.fencingToken() + 1) + " follows " + (middle.fencingToken() - 1) + " where "
                        + middle.fencingToken() + " was due");
    }

    /** The takeover of {@code token} in the family of {@code role}; null when there is none. */
    private Takeover takeover(String role, long token) {
        return history.takeovers.stream()
                .filter(t -> Checker.family(t.role()).equals(Checker.family(role)) && t.fencingToken() == token)
                .findFirst()
                .orElse(null);
    }

    /**
     * The recorded run failed the database over once: a role family's tokens go 1, … (none in this
     * recording, whose failover came before the first takeover) then 2^32 + 1, 2^32 + 2 on.
     */
    @Test
    void aFailoverStartsAnEpochAndTheFirstTokenOfItMustBeThere() {
        long first = (1L << 32) + 1;
        assertThat(Checker.check(history).violations()).isEmpty();
        String role = history.takeovers.stream()
                .filter(t -> t.fencingToken() == first + 1)
                .map(Takeover::role)
                .findFirst()
                .orElseThrow();
        // The family's last token before the epoch; none when the failover came before the first takeover.
        java.util.OptionalLong lastBefore = history.takeovers.stream()
                .filter(t -> Checker.family(t.role()).equals(Checker.family(role)) && t.fencingToken() < first)
                .mapToLong(Takeover::fencingToken)
                .max();
        Takeover epochStart = takeover(role, first);
        history.takeovers.remove(epochStart);

        assertFlagged(
                "2 tokens",
                "role " + role + ": token " + (first + 1) + " follows "
                        + (lastBefore.isPresent() ? String.valueOf(lastBefore.getAsLong()) : "no token") + " where "
                        + first
                        + " was due");
    }

    @Test
    void aForgedStaleRecordThatWasAppliedIsFlagged() {
        History.Forged stale = history.forged.stream()
                .filter(f -> f.kind().equals("stale"))
                .findFirst()
                .orElseThrow();
        history.rejections.removeIf(r -> r.jobId() == stale.jobId());
        long nextId = history.effects.stream().mapToLong(Effect::id).max().orElseThrow() + 1;
        history.effects.add(new Effect(nextId, stale.jobId(), stale.resource(), stale.fencingToken(), 0));

        Checker.Result result = Checker.check(history);

        assertThat(result.violations())
                .extracting(Checker.Violation::message)
                .anySatisfy(m -> assertThat(m)
                        .contains("forged stale record for job " + stale.jobId())
                        .contains("was not rejected"))
                .anySatisfy(m -> assertThat(m).contains("an effect was applied for job " + stale.jobId()));
    }

    /** A forged unsigned record as a run records it: on the topic, dead-lettered as unauthenticated, never decided. */
    private History.Forged plantUnsigned() {
        long jobId = ChaosRun.FORGED_JOB_BASE + 4_000_002L;
        History.Forged f = new History.Forged("unsigned", 0, 99_000_000L, jobId, "forged-x", 2_000_000L);
        history.forged.add(f);
        history.topic.add(new History.TopicRecord(0, 99_000_000L, "forged-x", jobId, jobId, "forged-x", 2_000_000L));
        history.deadLetters.add(new History.DeadLetter(
                99_000_000L, 0, 99_000_000L, null, "unauthenticated: unsigned record (RECORD_SIGNATURES=required)"));
        return f;
    }

    @Test
    void anUnauthenticatedRecordDeadLetteredAsSuchPasses() {
        int recorded = Checker.check(history).unauthenticated();
        plantUnsigned();
        Checker.Result result = Checker.check(history);
        assertThat(result.violations()).isEmpty();
        assertThat(result.summary()).contains(" unauthenticated=" + (recorded + 1) + " ");
    }

    @Test
    void anUnauthenticatedRecordThatWasAppliedIsFlagged() {
        History.Forged f = plantUnsigned();
        long nextId = history.effects.stream().mapToLong(Effect::id).max().orElseThrow() + 1;
        history.effects.add(new Effect(nextId, f.jobId(), f.resource(), f.fencingToken(), 0));
        history.processed.add(new History.Processed(f.jobId(), f.resource(), f.fencingToken(), "applied"));

        Checker.Result result = Checker.check(history);

        assertThat(result.violations())
                .extracting(Checker.Violation::message)
                .anySatisfy(m -> assertThat(m).contains("a forged unsigned record that no trusted key signed"))
                .anySatisfy(m -> assertThat(m).contains("claimed its job id as applied"));
        assertThat(result.violations()).extracting(Checker.Violation::invariant).contains("13 authenticated");
    }

    @Test
    void anUnauthenticatedRecordDeadLetteredForAnotherReasonIsFlagged() {
        History.Forged f = plantUnsigned();
        history.deadLetters.removeIf(d -> d.offset() == f.offset());
        history.deadLetters.add(new History.DeadLetter(99_000_001L, 0, f.offset(), null, "not JSON"));

        assertFlagged("13 authenticated", "was not dead-lettered as unauthenticated (not JSON)");
    }

    @Test
    void aMalformedRecordThatVanishedIsFlagged() {
        History.Forged malformed = history.forged.stream()
                .filter(f -> f.kind().equals("malformed"))
                .findFirst()
                .orElseThrow();
        history.deadLetters.removeIf(d -> d.partition() == malformed.partition() && d.offset() == malformed.offset());

        assertFlagged("9 bad input", "offset " + malformed.offset() + " was neither dead-lettered nor reported");
    }

    @Test
    void anOutboxRowThatNeverReachedTheTopicIsFlagged() {
        OutboxRow row = history.outbox.get(history.outbox.size() / 2);
        history.topic.removeIf(t -> row.jobId() == (t.jobId() == null ? -1 : t.jobId()));

        assertFlagged("5 published", "outbox row " + row.id() + " (job " + row.jobId() + ") never reached the topic");
    }

    @Test
    void aRecordTheConsumerAppliedLateIsFlagged() {
        OutboxRow row = history.outbox.get(history.outbox.size() / 2);
        history.late.add(new History.Late(row.jobId(), row.resource(), row.id(), row.id() + 7, 0, 0));

        assertFlagged(
                "5 order",
                "the consumer applied job " + row.jobId() + " (outbox " + row.id() + ") of resource " + row.resource()
                        + " late, after outbox row " + (row.id() + 7));
    }

    @Test
    void aServiceThatCrashedFailsTheRun() {
        history.crashes = new ArrayList<>(List.of("relay-2 exited by itself with code 1"));

        assertFlagged("services stay up", "relay-2 exited by itself with code 1");
    }

    @Test
    void theRecordedRunHadSchedulesThroughItsFaults() {
        assertThat(history.schedules)
                .extracting(History.Schedule::name)
                .containsExactlyInAnyOrderElementsOf(ChaosRun.SCHEDULES);
        assertThat(history.schedules).allSatisfy(s -> assertThat(s.fired()).isPositive());
        assertThat(history.scheduleSkips)
                .extracting(History.ScheduleSkip::reason)
                .contains("paused");
        assertThat(history.schedulePauses)
                .anySatisfy(p -> assertThat(p.paused()).isFalse());
    }

    @Test
    void anOccurrenceFiredTwiceIsFlagged() {
        Job job = scheduleJob("chaos-fast");
        history.jobs.add(new Job(
                history.jobs.stream().mapToLong(Job::id).max().orElseThrow() + 1,
                job.uniqueKey(),
                job.resource(),
                job.state(),
                job.completedByToken(),
                job.completedAt()));

        assertFlagged("10 schedule occurrences", "schedule chaos-fast: two jobs for the occurrence at");
    }

    @Test
    void anOccurrenceThatBecameNothingIsFlagged() {
        Job job = scheduleJob("chaos-fast");
        history.jobs.remove(job);

        assertFlagged("10 schedule occurrences", "became 0 job(s) and lies in 0 skip(s)");
    }

    @Test
    void anOccurrenceBothFiredAndSkippedIsFlagged() {
        Job job = scheduleJob("chaos-toggled");
        long micros = micros(job.uniqueKey());
        history.scheduleSkips.add(new History.ScheduleSkip("chaos-toggled", micros, micros, 1, "paused"));

        assertFlagged("10 schedule occurrences", "became 1 job(s) and lies in 1 skip(s)");
    }

    @Test
    void aSkipAsMissedIsFlagged() {
        History.ScheduleSkip paused = history.scheduleSkips.stream()
                .filter(k -> k.reason().equals("paused"))
                .findFirst()
                .orElseThrow();
        history.scheduleSkips.remove(paused);
        history.scheduleSkips.add(new History.ScheduleSkip(
                paused.name(), paused.firstFireAt(), paused.lastFireAt(), paused.occurrences(), "misfire"));

        assertFlagged("10 schedule occurrences", "was skipped as missed");
    }

    @Test
    void aSkipAsPausedWithoutAResumeIsFlagged() {
        history.schedulePauses.removeIf(p -> !p.paused());

        assertFlagged("10 schedule occurrences", "was skipped as paused, but no resume came after it");
    }

    @Test
    void aScheduleLeftBehindWhenItWasPausedIsFlagged() {
        History.Schedule s = history.schedules.stream()
                .filter(x -> x.name().equals("chaos-fast"))
                .findFirst()
                .orElseThrow();
        history.schedules.remove(s);
        // Its jobs after the first ten are forgotten with the position: as if the leader had stopped deciding early.
        List<Job> mine = history.jobs.stream()
                .filter(j -> j.uniqueKey() != null && j.uniqueKey().startsWith("schedule:chaos-fast@"))
                .sorted(java.util.Comparator.comparing(Job::uniqueKey))
                .toList();
        long tenth = micros(mine.get(10).uniqueKey());
        history.jobs.removeAll(mine.subList(10, mine.size()));
        history.schedules.add(new History.Schedule(
                s.name(), s.cron(), s.everyMicros(), s.timeZone(), s.misfire(), s.startsAt(), tenth, 10, 0));

        assertFlagged("10 schedule occurrences", "was paused at");
    }

    private Job scheduleJob(String schedule) {
        List<Job> mine = history.jobs.stream()
                .filter(j -> j.uniqueKey() != null && j.uniqueKey().startsWith("schedule:" + schedule + "@"))
                .toList();
        assertThat(mine)
                .as("jobs of schedule %s in the recorded history", schedule)
                .isNotEmpty();
        return mine.get(mine.size() / 2);
    }

    private static long micros(String key) {
        return Checker.micros(Checker.fireTime(key));
    }

    /** A job completed with a token its shard's lease later moved on from. */
    private Job completedJobOfAnEarlierToken() {
        return history.jobs.stream()
                .filter(j -> j.completedByToken() != null
                        && history.takeovers.stream()
                                .anyMatch(t -> t.role().equals(Checker.shardRole(Checker.SCHEDULER, j.shard()))
                                        && t.fencingToken() > j.completedByToken()))
                .findFirst()
                .orElseThrow();
    }

    @Test
    void theRecordedRunKeptItsRateLimits() {
        assertThat(history.limits)
                .extracting(History.Limit::dispatchKey)
                .contains(ChaosLimits.BACKLOG_KEY)
                .containsAll(ChaosLimits.TENANTS);
        Checker.Result result = Checker.check(history);

        assertThat(result.limitedKeys()).isEqualTo(history.limits.size());
        assertThat(result.limitedJobs()).isGreaterThan(1000);
        assertThat(result.summary())
                .contains(" limited-keys=" + history.limits.size() + " limited-jobs=" + result.limitedJobs() + " ");
    }

    @Test
    void moreCompletionsInOneSecondThanALimitAllowsAreFlagged() {
        Map<String, Long> perKey = history.jobs.stream()
                .filter(j -> "completed".equals(j.state()))
                .collect(Collectors.groupingBy(Job::key, Collectors.counting()));
        String busiest = perKey.entrySet().stream()
                .max(Map.Entry.comparingByValue())
                .orElseThrow()
                .getKey();
        history.limits.clear();
        history.limits.add(new History.Limit(busiest, 1, 1));

        assertFlagged("14 rate limits", "key " + busiest + " (1.0/s, burst 1.0): ");
    }

    /**
     * Rank order holds per shard under the map in force: a job that a change of the shard count moved
     * into a shard after the shard completed one ranked behind it is no inversion (seen in a
     * ChaosIT run: 2 -> 3 moved job 497 into shard 1, 17 s after shard 1 completed job 981); a
     * job that was in the shard all along is.
     */
    @Test
    void rankOrderIsPerShardUnderTheMapInForceAcrossAChangeOfTheShardCount() {
        String movedIn = resource(r -> Checker.shardOf(r, 3) == 1 && Checker.shardOf(r, 2) == 0);
        String stayed = resource(r -> Checker.shardOf(r, 3) == 1 && Checker.shardOf(r, 2) == 1);
        String behind = resource(r -> Checker.shardOf(r, 3) == 1 && Checker.shardOf(r, 2) == 1 && !r.equals(stayed));
        long askedAt = 1_800_000_000_000L; // ms
        long t = askedAt * 1000;
        for (String ahead : List.of(movedIn, stayed)) {
            History h = new History();
            h.rankOrderedKeys = List.of("k");
            h.startedAtMillis = askedAt - 50_000;
            h.faults.add(new History.Fault(50_000, "reshard", "shard map 2 -> 3", 1_000));
            // Ranks ahead (lower id, same due and priority), completed after the change; the other before it.
            h.jobs.add(new Job(1, null, ahead, "completed", 9L, t + 2_000_000, "k", t - 60_000_000, 0, 1));
            h.jobs.add(new Job(2, null, behind, "completed", 3L, t - 1_000_000, "k", t - 60_000_000, 0, 1));
            List<String> flagged = Checker.check(h).violations().stream()
                    .filter(v -> v.invariant().equals("15 rank order"))
                    .map(Checker.Violation::message)
                    .toList();
            if (ahead.equals(movedIn)) {
                assertThat(flagged).as("moved into shard 1 by the change").isEmpty();
            } else {
                assertThat(flagged)
                        .as("in shard 1 all along")
                        .singleElement()
                        .asString()
                        .contains("key k: 1 job(s)");
            }
        }
        assertThat(Checker.shardOf("account-1", 1)).isZero();
    }

    private static String resource(java.util.function.Predicate<String> shards) {
        for (int i = 0; ; i++) {
            if (shards.test("resource-" + i)) {
                return "resource-" + i;
            }
        }
    }

    @Test
    void aRateLimitWindowIsOneSecondWithBothEnds() {
        History h = new History();
        h.limits.add(new History.Limit("k", 1.5, 1));
        long t = 1_800_000_000_000_000L;
        h.jobs.add(new Job(1, null, "r", "completed", 1L, t, "k", t, 0));
        h.jobs.add(new Job(2, null, "r", "completed", 1L, t + 400_000, "k", t, 0));
        h.jobs.add(new Job(3, null, "r", "completed", 1L, t + 1_000_001, "k", t, 0));
        assertThat(Checker.check(h).violations()).noneMatch(v -> v.invariant().equals("14 rate limits"));

        h.jobs.add(new Job(4, null, "r", "completed", 1L, t + 1_000_000, "k", t, 0));
        assertThat(Checker.check(h).violations())
                .filteredOn(v -> v.invariant().equals("14 rate limits"))
                .singleElement()
                .satisfies(v -> assertThat(v.message())
                        .contains("3 jobs completed in the second from")
                        .contains("at most 2 may be"));
    }

    @Test
    void theRecordedBacklogWasCompletedInRankOrder() {
        assertThat(history.rankOrderedKeys).containsExactly(ChaosLimits.BACKLOG_KEY);
        List<Job> backlog = history.jobs.stream()
                .filter(j -> ChaosLimits.BACKLOG_KEY.equals(j.dispatchKey()))
                .toList();
        assertThat(backlog)
                .hasSizeGreaterThan(1000)
                .allSatisfy(j -> assertThat(j.priority()).isNotNull());
        assertThat(backlog)
                .extracting(Job::priority)
                .as("priorities, so rank order is not id order")
                .contains(-60, 0, 60);
        assertThat(Checker.check(history).violations())
                .noneMatch(v -> v.invariant().equals("15 rank order"));
    }

    @Test
    void aBacklogJobCompletedBeforeOneThatRanksAheadOfItIsFlagged() {
        List<Job> backlog = history.jobs.stream()
                .filter(j -> ChaosLimits.BACKLOG_KEY.equals(j.dispatchKey()))
                .sorted(Comparator.comparingLong(Job::rank).thenComparingLong(Job::id))
                .toList();
        Job ahead = backlog.get(0);
        Job behind = backlog.stream()
                .filter(j -> j.completedAt() > ahead.completedAt())
                .findFirst()
                .orElseThrow();
        // The two swap completion times: the one behind went first.
        history.jobs.set(
                history.jobs.indexOf(ahead),
                new Job(
                        ahead.id(),
                        ahead.uniqueKey(),
                        ahead.resource(),
                        ahead.state(),
                        ahead.completedByToken(),
                        behind.completedAt(),
                        ahead.dispatchKey(),
                        ahead.dueAt(),
                        ahead.priority()));
        history.jobs.set(
                history.jobs.indexOf(behind),
                new Job(
                        behind.id(),
                        behind.uniqueKey(),
                        behind.resource(),
                        behind.state(),
                        behind.completedByToken(),
                        ahead.completedAt(),
                        behind.dispatchKey(),
                        behind.dueAt(),
                        behind.priority()));

        assertFlagged("15 rank order", "key " + ChaosLimits.BACKLOG_KEY + ": ");
    }

    @Test
    void theRecordedRunPausedKeysAndCompletedNoneOfTheirJobsMeanwhile() {
        assertThat(history.keyPauses).isNotEmpty();
        History.KeyPause p = history.keyPauses.get(0);
        assertThat(history.jobs)
                .as("jobs of the paused key completed before and after its pause")
                .anyMatch(j -> p.key().equals(j.key()) && j.completedAt() != null && j.completedAt() < p.pausedAt())
                .anyMatch(j -> p.key().equals(j.key()) && j.completedAt() != null && j.completedAt() > p.checkedAt());
        assertThat(Checker.check(history).violations())
                .noneMatch(v -> v.invariant().equals("19 pauses"));
    }

    @Test
    void aJobOfAPausedKeyCompletedWhileThePauseStoodIsFlagged() {
        Job job = history.jobs.stream()
                .filter(j -> ChaosLimits.TENANTS.contains(j.key()) && j.completedAt() != null)
                .findFirst()
                .orElseThrow();
        history.keyPauses.add(new History.KeyPause(job.key(), job.completedAt() - 1_000_000, job.completedAt() + 1));

        assertFlagged("19 pauses", "key " + job.key() + ", paused from ");
    }

    private void assertFlagged(String invariant, String messagePart) {
        Checker.Result result = Checker.check(history);

        assertThat(result.ok()).isFalse();
        assertThat(result.summary()).startsWith("chaos FAIL");
        assertThat(result.violations())
                .as("violations: %s", result.violations())
                .anySatisfy(v -> {
                    assertThat(v.invariant()).isEqualTo(invariant);
                    assertThat(v.message()).contains(messagePart);
                });
    }
}
