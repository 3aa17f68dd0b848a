package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;

import dev.fencedjobs.dispatcher.ScheduleDecision.Misfire;
import dev.fencedjobs.dispatcher.ScheduleDecision.Skip;
import dev.fencedjobs.runtime.internal.Occurrences;
import java.time.Duration;
import java.time.Instant;
import org.junit.jupiter.api.Test;

/** What a pass decides, with the database's "now" given by the test. */
class ScheduleDecisionTest {

    private static final Instant START = Instant.parse("2026-12-01T09:00:00Z");
    private static final Occurrences EVERY_MINUTE = Occurrences.every(Duration.ofMinutes(1), START);
    private static final Duration GRACE = Duration.ofMinutes(1);

    @Test
    void occurrencesWithinTheGraceBecomeJobsAndTheNextIsTheFirstInTheFuture() {
        ScheduleDecision d =
                ScheduleDecision.decide(EVERY_MINUTE, null, START.plusSeconds(30), GRACE, Misfire.LATEST, null, 100);
        assertThat(d.jobs()).containsExactly(START);
        assertThat(d.skips()).isEmpty();
        assertThat(d.nextFireAt()).isEqualTo(START.plusSeconds(60));
        assertThat(d.more()).isFalse();

        ScheduleDecision late =
                ScheduleDecision.decide(EVERY_MINUTE, START, START.plusSeconds(59), GRACE, Misfire.SKIP, null, 100);
        assertThat(late.jobs()).as("59 s late is within the grace").containsExactly(START);
        ScheduleDecision none = ScheduleDecision.decide(
                EVERY_MINUTE, START.plusSeconds(60), START.plusSeconds(59), GRACE, Misfire.SKIP, null, 100);
        assertThat(none.jobs()).isEmpty();
        assertThat(none.nextFireAt()).isEqualTo(START.plusSeconds(60));
    }

    @Test
    void missedOccurrencesFollowThePolicy() {
        // Ten minutes nobody led: 09:00 .. 09:10 are due, 09:00 .. 09:08 older than the grace.
        Instant now = START.plus(Duration.ofMinutes(10)).plusSeconds(5);
        ScheduleDecision all = ScheduleDecision.decide(EVERY_MINUTE, START, now, GRACE, Misfire.ALL, null, 100);
        assertThat(all.jobs()).hasSize(11).startsWith(START).endsWith(START.plus(Duration.ofMinutes(10)));
        assertThat(all.skips()).isEmpty();

        ScheduleDecision latest = ScheduleDecision.decide(EVERY_MINUTE, START, now, GRACE, Misfire.LATEST, null, 100);
        assertThat(latest.jobs()).containsExactly(min(9), min(10));
        assertThat(latest.skips()).containsExactly(new Skip(START, min(8), 9, "misfire"));

        ScheduleDecision skip = ScheduleDecision.decide(EVERY_MINUTE, START, now, GRACE, Misfire.SKIP, null, 100);
        assertThat(skip.jobs()).containsExactly(min(10));
        assertThat(skip.skips()).containsExactly(new Skip(START, min(9), 10, "misfire"));
        for (ScheduleDecision d : new ScheduleDecision[] {all, latest, skip}) {
            assertThat(d.nextFireAt()).isEqualTo(min(11));
        }
    }

    @Test
    void theLatestMissedOneIsFoundAcrossPassesThatHitTheLimit() {
        Instant now = START.plus(Duration.ofMinutes(10)).plusSeconds(5);
        ScheduleDecision first = ScheduleDecision.decide(EVERY_MINUTE, START, now, GRACE, Misfire.LATEST, null, 4);
        assertThat(first.jobs()).isEmpty();
        assertThat(first.skips()).containsExactly(new Skip(START, min(3), 4, "misfire"));
        assertThat(first.more()).isTrue();
        ScheduleDecision second =
                ScheduleDecision.decide(EVERY_MINUTE, first.nextFireAt(), now, GRACE, Misfire.LATEST, null, 4);
        assertThat(second.skips()).containsExactly(new Skip(min(4), min(7), 4, "misfire"));
        ScheduleDecision third =
                ScheduleDecision.decide(EVERY_MINUTE, second.nextFireAt(), now, GRACE, Misfire.LATEST, null, 4);
        assertThat(third.skips()).containsExactly(new Skip(min(8), min(8), 1, "misfire"));
        assertThat(third.jobs()).containsExactly(min(9), min(10));
        assertThat(third.more()).isFalse();
    }

    @Test
    void theLatestMissedOneAtTheLimitIsAJobWhenNothingMissedFollows() {
        // 09:00 .. 09:02 missed, 09:03 within the grace; the pass stops after three.
        Instant now = min(4);
        ScheduleDecision d = ScheduleDecision.decide(EVERY_MINUTE, START, now, GRACE, Misfire.LATEST, null, 3);
        assertThat(d.skips()).containsExactly(new Skip(START, min(1), 2, "misfire"));
        assertThat(d.jobs()).containsExactly(min(2));
        assertThat(d.more()).isTrue();
        ScheduleDecision next =
                ScheduleDecision.decide(EVERY_MINUTE, d.nextFireAt(), now, GRACE, Misfire.LATEST, null, 3);
        assertThat(next.jobs()).containsExactly(min(3), min(4));
    }

    @Test
    void occurrencesNotDecidedBeforeAResumeAreSkippedAsPaused() {
        // Paused from before 09:00; resumed at 09:05:30; the leader looks at 09:05:40.
        ScheduleDecision d = ScheduleDecision.decide(
                EVERY_MINUTE, START, min(5).plusSeconds(40), GRACE, Misfire.ALL, min(5).plusSeconds(30), 100);
        assertThat(d.skips()).containsExactly(new Skip(START, min(5), 6, "paused"));
        assertThat(d.jobs()).isEmpty();
        assertThat(d.nextFireAt()).isEqualTo(min(6));
    }

    @Test
    void noOccurrenceIsDecidedTwiceOrLeftOutOverManyPasses() {
        // A pass every 7 s over an hour, with a gap of 5 minutes without a leader, on a 20 s interval.
        Occurrences every20s = Occurrences.every(Duration.ofSeconds(20), START);
        Instant next = null;
        java.util.List<Instant> decided = new java.util.ArrayList<>();
        for (Instant now = START; now.isBefore(START.plus(Duration.ofHours(1))); now = now.plusSeconds(7)) {
            if (now.isAfter(min(20)) && now.isBefore(min(25))) {
                continue;
            }
            ScheduleDecision d = ScheduleDecision.decide(every20s, next, now, GRACE, Misfire.LATEST, null, 100);
            decided.addAll(d.jobs());
            for (Skip s : d.skips()) {
                for (Instant t = s.first(); !t.isAfter(s.last()); t = every20s.after(t)) {
                    decided.add(t);
                }
            }
            next = d.nextFireAt();
        }
        decided.sort(null);
        assertThat(decided).doesNotHaveDuplicates();
        for (int i = 0; i < decided.size(); i++) {
            assertThat(decided.get(i)).isEqualTo(START.plusSeconds(20L * i));
        }
        assertThat(decided.size()).isEqualTo(180);
    }

    private static Instant min(int minutes) {
        return START.plus(Duration.ofMinutes(minutes));
    }
}
