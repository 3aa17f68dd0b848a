package dev.fencedjobs.runtime.internal;

import com.cronutils.model.Cron;
import com.cronutils.model.CronType;
import com.cronutils.model.definition.CronDefinitionBuilder;
import com.cronutils.model.time.ExecutionTime;
import com.cronutils.parser.CronParser;
import java.time.DateTimeException;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZonedDateTime;
import java.time.zone.ZoneOffsetTransition;
import java.time.zone.ZoneRules;
import java.util.Optional;

/**
 * When a schedule fires: pure arithmetic on instants, with no clock of its own.
 *
 * <ul>
 *   <li><b>Cron</b>: a Unix cron expression (five fields: minute, hour, day of month, month, day of
 *       week), read on the wall clock of the schedule's time zone by cron-utils. Across a DST
 *       change: a wall-clock time that happens twice (autumn) fires once, at its first instant; a
 *       wall-clock time that does not happen (spring) fires at the instant it would have had
 *       without the change, which is the same instant as the wall-clock time shifted by the gap
 *       (02:30 in Europe/Berlin on the spring-forward day fires at 03:30 CEST). cron-utils alone
 *       would skip it; a daily 02:30 job would then silently not run that day. Fields that repeat
 *       through the hour (every 30 minutes, every hour) fire on each wall-clock time there is: an
 *       hourly schedule has 23 occurrences on the spring day and 25 on the autumn day.
 *   <li><b>Every</b>: a fixed interval on absolute time from the schedule's start, {@code starts_at +
 *       k * every}: "1 day" is every 24 hours, so its wall-clock time moves by an hour across DST.
 * </ul>
 */
public final class Occurrences {

    private static final CronParser UNIX = new CronParser(CronDefinitionBuilder.instanceDefinitionFor(CronType.UNIX));
    /** PostgreSQL keeps microseconds: "strictly after" steps back by one. */
    private static final Duration RESOLUTION = Duration.ofNanos(1000);

    private final ExecutionTime cron;
    private final ZoneId zone;
    private final Instant startsAt;
    private final long everyNanos;

    private Occurrences(ExecutionTime cron, ZoneId zone, Instant startsAt, long everyNanos) {
        this.cron = cron;
        this.zone = zone;
        this.startsAt = startsAt;
        this.everyNanos = everyNanos;
    }

    /**
     * The occurrences of a five-field cron expression in {@code zone}, from {@code startsAt} on.
     *
     * @throws IllegalArgumentException for an expression that is not a valid five-field cron, or
     *     a zone Java does not know, with a message that says which
     */
    public static Occurrences cron(String expression, String zone, Instant startsAt) {
        Cron parsed;
        try {
            parsed = UNIX.parse(expression.trim()).validate();
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(
                    "cron '" + expression + "' is not a five-field Unix cron expression: " + e.getMessage(), e);
        }
        return new Occurrences(ExecutionTime.forCron(parsed), zone(zone), startsAt, 0);
    }

    public static Occurrences every(Duration every, Instant startsAt) {
        if (every.isNegative() || every.isZero()) {
            throw new IllegalArgumentException("every must be a positive interval, not " + every);
        }
        return new Occurrences(null, ZoneId.of("UTC"), startsAt, every.toNanos());
    }

    static ZoneId zone(String zone) {
        try {
            return ZoneId.of(zone);
        } catch (DateTimeException e) {
            throw new IllegalArgumentException(
                    "time zone '" + zone + "' is not a zone id such as UTC or Europe/Berlin", e);
        }
    }

    /** The first occurrence at or after the schedule's start; {@code null} when there is none. */
    public Instant first() {
        return after(startsAt.minus(RESOLUTION));
    }

    /** The first occurrence strictly after {@code t} (and not before the start); {@code null} when there is none. */
    public Instant after(Instant t) {
        if (t.isBefore(startsAt)) {
            t = startsAt.minus(RESOLUTION);
        }
        return cron == null ? afterEvery(t) : afterCron(t);
    }

    private Instant afterEvery(Instant t) {
        long since = Duration.between(startsAt, t).toNanos();
        long k = since < 0 ? 0 : since / everyNanos + 1;
        return startsAt.plusNanos(Math.multiplyExact(k, everyNanos));
    }

    private Instant afterCron(Instant t) {
        Optional<ZonedDateTime> next = cron.nextExecution(t.atZone(zone));
        Instant candidate = next.map(ZonedDateTime::toInstant).orElse(null);
        // Wall-clock times that a spring-forward gap between t and the candidate skipped.
        ZoneRules rules = zone.getRules();
        Instant horizon = candidate != null ? candidate : t.plus(Duration.ofDays(366 * 5));
        for (ZoneOffsetTransition tr = rules.nextTransition(t.minus(Duration.ofDays(1)));
                tr != null && !tr.getInstant().isAfter(horizon);
                tr = rules.nextTransition(tr.getInstant())) {
            if (!tr.isGap()) {
                continue;
            }
            Instant gapStart = tr.getInstant();
            Instant gapEnd = gapStart.plus(tr.getDuration());
            if (!gapEnd.isAfter(t)) {
                continue;
            }
            // Read at the offset before the change, the skipped wall-clock times are real instants
            // in [gapStart, gapEnd): each is the instant its wall-clock time shifted by the gap names.
            Instant from = gapStart.minus(RESOLUTION).isAfter(t) ? gapStart.minus(RESOLUTION) : t;
            Optional<ZonedDateTime> inGap = cron.nextExecution(from.atZone(tr.getOffsetBefore()));
            if (inGap.isPresent()) {
                Instant skipped = inGap.get().toInstant();
                if (skipped.isBefore(gapEnd)
                        && skipped.isAfter(t)
                        && (candidate == null || skipped.isBefore(candidate))) {
                    return skipped;
                }
            }
        }
        return candidate;
    }
}
