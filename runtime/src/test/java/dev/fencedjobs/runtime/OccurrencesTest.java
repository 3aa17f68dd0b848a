package dev.fencedjobs.runtime;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.runtime.internal.Occurrences;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The occurrence arithmetic, on instants given by the test: no clock, no database. */
class OccurrencesTest {

    private static final Instant LONG_AGO = Instant.parse("2020-01-01T00:00:00Z");

    @Test
    void cronInUtcFiresOnTheMinutesItNames() {
        Occurrences every15 = Occurrences.cron("*/15 * * * *", "UTC", LONG_AGO);
        assertThat(between(every15, "2026-12-01T09:00:00Z", "2026-12-01T10:00:00Z"))
                .containsExactly(
                        "2026-12-01T09:15:00Z", "2026-12-01T09:30:00Z", "2026-12-01T09:45:00Z", "2026-12-01T10:00:00Z");
    }

    @Test
    void theFirstOccurrenceIsAtOrAfterTheStart() {
        assertThat(Occurrences.cron("0 * * * *", "UTC", Instant.parse("2026-12-01T09:00:00Z"))
                        .first())
                .isEqualTo("2026-12-01T09:00:00Z");
        assertThat(Occurrences.cron("0 * * * *", "UTC", Instant.parse("2026-12-01T09:00:00.000001Z"))
                        .first())
                .isEqualTo("2026-12-01T10:00:00Z");
        Occurrences every = Occurrences.every(Duration.ofMinutes(10), Instant.parse("2026-12-01T09:03:00Z"));
        assertThat(every.first()).isEqualTo("2026-12-01T09:03:00Z");
        assertThat(every.after(Instant.parse("2020-01-01T00:00:00Z")))
                .as("before the start: the start")
                .isEqualTo("2026-12-01T09:03:00Z");
        assertThat(every.after(Instant.parse("2026-12-01T09:03:00Z"))).isEqualTo("2026-12-01T09:13:00Z");
        assertThat(every.after(Instant.parse("2026-12-01T09:12:59.999999Z"))).isEqualTo("2026-12-01T09:13:00Z");
    }

    @Test
    void aDailyTimeInTheSpringGapFiresAtTheInstantItWouldHaveHadAndOnlyOnce() {
        // Europe/Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not happen that day.
        Occurrences daily = Occurrences.cron("30 2 * * *", "Europe/Berlin", LONG_AGO);
        assertThat(between(daily, "2026-03-27T12:00:00Z", "2026-03-31T12:00:00Z"))
                .containsExactly(
                        "2026-03-28T01:30:00Z", // 02:30 CET
                        "2026-03-29T01:30:00Z", // 03:30 CEST: 02:30 shifted by the gap
                        "2026-03-30T00:30:00Z", // 02:30 CEST
                        "2026-03-31T00:30:00Z");
    }

    @Test
    void aDailyTimeInTheAutumnOverlapFiresOnceAtItsFirstInstant() {
        // Europe/Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        Occurrences daily = Occurrences.cron("30 2 * * *", "Europe/Berlin", LONG_AGO);
        assertThat(between(daily, "2026-10-23T12:00:00Z", "2026-10-26T12:00:00Z"))
                .containsExactly(
                        "2026-10-24T00:30:00Z", // 02:30 CEST
                        "2026-10-25T00:30:00Z", // the first 02:30, CEST; not again at 01:30Z (02:30 CET)
                        "2026-10-26T01:30:00Z"); // 02:30 CET
    }

    @Test
    void anHourlyScheduleFollowsTheWallClockThroughBothChanges() {
        Occurrences hourly = Occurrences.cron("0 * * * *", "Europe/Berlin", LONG_AGO);
        // The local days: 23 hours in spring, 25 in autumn, and an occurrence at each hour there is.
        List<String> spring = between(hourly, "2026-03-28T22:59:00Z", "2026-03-29T21:59:00Z");
        assertThat(spring).hasSize(23).doesNotHaveDuplicates().contains("2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z");
        List<String> autumn = between(hourly, "2026-10-24T21:59:00Z", "2026-10-25T22:59:00Z");
        assertThat(autumn).hasSize(25).doesNotHaveDuplicates().contains("2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z");
    }

    @Test
    void anotherZoneAndAnotherRule() {
        // America/New_York, 2026-03-08: 02:00 EST becomes 03:00 EDT. Weekdays at 02:15: Monday the 9th is after the
        // change.
        Occurrences weekdays = Occurrences.cron("15 2 * * 1-5", "America/New_York", LONG_AGO);
        assertThat(between(weekdays, "2026-03-05T00:00:00Z", "2026-03-10T12:00:00Z"))
                .containsExactly(
                        "2026-03-05T07:15:00Z", "2026-03-06T07:15:00Z", "2026-03-09T06:15:00Z", "2026-03-10T06:15:00Z");
        // Every day at 02:15 also fires on the Sunday of the change, at 03:15 EDT.
        assertThat(between(
                        Occurrences.cron("15 2 * * *", "America/New_York", LONG_AGO),
                        "2026-03-08T00:00:00Z",
                        "2026-03-08T12:00:00Z"))
                .containsExactly("2026-03-08T07:15:00Z");
    }

    @Test
    void anIntervalRunsOnAbsoluteTimeAcrossDst() {
        Occurrences daily = Occurrences.every(Duration.ofDays(1), Instant.parse("2026-03-28T01:30:00Z"));
        assertThat(between(daily, "2026-03-28T00:00:00Z", "2026-03-30T12:00:00Z"))
                .containsExactly("2026-03-28T01:30:00Z", "2026-03-29T01:30:00Z", "2026-03-30T01:30:00Z");
    }

    @Test
    void badRulesSayWhatIsWrong() {
        assertThatThrownBy(() -> Occurrences.cron("61 * * * *", "UTC", LONG_AGO))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("cron '61 * * * *' is not a five-field Unix cron expression");
        assertThatThrownBy(() -> Occurrences.cron("0 * * *", "UTC", LONG_AGO))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("five-field");
        assertThatThrownBy(() -> Occurrences.cron("0 * * * *", "Mars/Olympus", LONG_AGO))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("time zone 'Mars/Olympus'");
        assertThatThrownBy(() -> Occurrences.every(Duration.ZERO, LONG_AGO))
                .isInstanceOf(IllegalArgumentException.class);
    }

    /** The occurrences in (from, to]. */
    static List<String> between(Occurrences rule, String from, String to) {
        List<String> out = new ArrayList<>();
        Instant end = Instant.parse(to);
        for (Instant t = rule.after(Instant.parse(from)); t != null && !t.isAfter(end); t = rule.after(t)) {
            out.add(t.toString());
        }
        return out;
    }
}
