package dev.fencedjobs.dispatcher;

import dev.fencedjobs.runtime.internal.Occurrences;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * What one pass decides for one schedule: which occurrences become jobs, which are skipped and
 * why, and the first occurrence left undecided. Pure: the database time comes in as {@code now}.
 *
 * <p>Every occurrence from the schedule's {@code next_fire_at} up to {@code now} is decided once:
 *
 * <ul>
 *   <li>before the last resume of a paused schedule: skipped, reason {@code paused};
 *   <li>older than the misfire grace (missed while no dispatcher led): by the schedule's policy,
 *       {@code all} (each becomes a job), {@code latest} (only the newest missed one does, the
 *       others are skipped) or <i>skip</i> (none does), reason {@code misfire};
 *   <li>otherwise: a job, due at its fire time.
 * </ul>
 *
 * At most {@code limit} occurrences are decided in one pass; {@link #more} says another pass should
 * follow at once.
 */
record ScheduleDecision(List<Instant> jobs, List<Skip> skips, Instant nextFireAt, boolean more) {

    enum Misfire {
        ALL,
        LATEST,
        SKIP;

        static Misfire parse(String value) {
            return valueOf(value.toUpperCase(Locale.ROOT));
        }
    }

    /** A run of consecutive occurrences decided without a job. */
    record Skip(Instant first, Instant last, long occurrences, String reason) {}

    static ScheduleDecision decide(
            Occurrences rule,
            Instant nextFireAt,
            Instant now,
            Duration misfireGrace,
            Misfire policy,
            Instant resumedAt,
            int limit) {
        Instant occurrence = nextFireAt != null ? nextFireAt : rule.first();
        Instant missedBefore = now.minus(misfireGrace);
        List<Instant> jobs = new ArrayList<>();
        List<Skip> skips = new ArrayList<>();
        SkipRun run = new SkipRun(skips);
        Instant latestMissed = null;
        int decided = 0;
        while (occurrence != null && !occurrence.isAfter(now) && decided < limit) {
            if (resumedAt != null && occurrence.isBefore(resumedAt)) {
                run.add(occurrence, "paused");
            } else if (occurrence.isBefore(missedBefore)) {
                switch (policy) {
                    case ALL -> {
                        run.end();
                        jobs.add(occurrence);
                    }
                    case SKIP -> run.add(occurrence, "misfire");
                    case LATEST -> {
                        if (latestMissed != null) {
                            run.add(latestMissed, "misfire");
                        }
                        latestMissed = occurrence;
                    }
                }
            } else {
                if (latestMissed != null) {
                    run.end();
                    jobs.add(latestMissed);
                    latestMissed = null;
                }
                run.end();
                jobs.add(occurrence);
            }
            decided++;
            occurrence = rule.after(occurrence);
        }
        boolean more = occurrence != null && !occurrence.isAfter(now);
        if (latestMissed != null) {
            if (more && occurrence.isBefore(missedBefore)) {
                // A newer missed occurrence follows in the next pass: this one is not the latest.
                run.add(latestMissed, "misfire");
            } else {
                run.end();
                jobs.add(latestMissed);
            }
        }
        run.end();
        return new ScheduleDecision(List.copyOf(jobs), List.copyOf(skips), occurrence, more);
    }

    /** Consecutive skipped occurrences with the same reason, gathered into one {@link Skip}. */
    private static final class SkipRun {
        private final List<Skip> into;
        private Instant first;
        private Instant last;
        private long count;
        private String reason;

        SkipRun(List<Skip> into) {
            this.into = into;
        }

        void add(Instant occurrence, String why) {
            if (first != null && !why.equals(reason)) {
                end();
            }
            if (first == null) {
                first = occurrence;
                reason = why;
            }
            last = occurrence;
            count++;
        }

        void end() {
            if (first != null) {
                into.add(new Skip(first, last, count, reason));
                first = null;
                count = 0;
            }
        }
    }
}
