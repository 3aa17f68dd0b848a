package dev.fencedjobs.dispatcher;

import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.Grant;
import dev.fencedjobs.lease.Grants;
import dev.fencedjobs.lease.Lease;
import dev.fencedjobs.runtime.internal.Backoff;
import dev.fencedjobs.runtime.internal.Faults;
import dev.fencedjobs.runtime.internal.Occurrences;
import dev.fencedjobs.runtime.internal.TraceContext;
import dev.fencedjobs.runtime.internal.Wakeup;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.jooq.DSLContext;
import org.jooq.Record;
import org.jooq.Result;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Turns the occurrences of recurring schedules into jobs, on a thread beside the dispatch loop,
 * while this replica leads.
 *
 * <p>Each pass that has something to decide is one transaction that first passes the lease guard
 * (so a former leader decides nothing) and locks the schedules it decides ({@code FOR UPDATE SKIP
 * LOCKED}: a schedule someone is editing is decided in the next pass, and the guard's lock is never
 * held while waiting for a person). In it, for each schedule, {@link ScheduleDecision} decides the
 * occurrences from {@code next_fire_at} up to the database's now: each becomes a job with the
 * unique key {@code schedule:<name>@<fire time, UTC>}, due at its fire time, or a row in {@code
 * schedule_skips}; and {@code next_fire_at} moves past them. A job and the position that says it
 * exists commit together, so no takeover, restart or pause can fire an occurrence twice or lose one.
 *
 * <p>Between passes it sleeps until the earliest {@code next_fire_at}, a {@code schedules_changed}
 * notification, a leadership change, or {@link #POLL} (a notification lost while the LISTEN
 * connection was away). While there is nothing to decide it reads one row a minute and writes
 * nothing.
 */
final class ScheduleFirer implements Schedules, AutoCloseable {

    static final String SCHEDULES_CHANGED = "schedules_changed";
    static final String KEY_PREFIX = "schedule:";
    /** Occurrences decided per schedule in one pass; a schedule with more goes again at once. */
    static final int LIMIT = 10_000;

    static final Duration POLL = Duration.ofMinutes(1);

    private static final Logger log = LoggerFactory.getLogger(ScheduleFirer.class);

    private final Grants leadership;
    private final Lease lease;
    private final DSLContext dsl;
    private final Duration misfireGrace;
    private final Ticker ticker;
    private final Wakeup wakeup = new Wakeup();
    private final Backoff backoff = new Backoff(Duration.ofMillis(100), Duration.ofSeconds(5));
    private final Thread thread;
    private final Counter fired;
    private final Counter skipped;
    private final Counter failures;
    private volatile boolean running = true;
    private volatile Instant lastPassAt;

    ScheduleFirer(
            Grants leadership,
            Lease lease,
            DSLContext dsl,
            Duration misfireGrace,
            Ticker ticker,
            MeterRegistry registry) {
        this.leadership = leadership;
        this.lease = lease;
        this.dsl = dsl;
        this.misfireGrace = misfireGrace;
        this.ticker = ticker;
        this.thread = new Thread(this::run, "dispatcher-schedules");
        thread.setDaemon(true);
        fired = Counter.builder("fencedjobs_schedule_occurrences")
                .tag("outcome", "job")
                .description("schedule occurrences decided by this replica, by outcome")
                .register(registry);
        skipped = Counter.builder("fencedjobs_schedule_occurrences")
                .tag("outcome", "skipped")
                .description("schedule occurrences decided by this replica, by outcome")
                .register(registry);
        failures = Counter.builder("fencedjobs_schedule_pass_failures")
                .description("schedule passes that failed with a database error: rolled back")
                .register(registry);
        leadership.onChange(wakeup::signal);
    }

    @Override
    public void start() {
        thread.start();
    }

    /** A schedule changed, or notifications may have been missed: look now. */
    @Override
    public void wake() {
        wakeup.signal();
    }

    @Override
    public Map<String, Object> status() {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("occurrencesFired", (long) fired.count());
        s.put("occurrencesSkipped", (long) skipped.count());
        Instant last = lastPassAt;
        s.put("lastPassAt", last == null ? null : last.toString());
        return s;
    }

    private void run() {
        try {
            while (running) {
                Optional<Grant> grant = leadership.current();
                if (grant.isEmpty()) {
                    wakeup.await(Long.MAX_VALUE);
                    continue;
                }
                long wait;
                try {
                    wait = step(grant.get());
                    backoff.reset();
                } catch (RuntimeException e) {
                    if (!running) {
                        break;
                    }
                    failures.increment();
                    wait = backoff.nextNanos();
                    log.warn(
                            "Deciding schedule occurrences under token {} failed, rolled back; next try in {} ms: {}",
                            grant.get().token(),
                            TimeUnit.NANOSECONDS.toMillis(wait),
                            Faults.describe(e));
                }
                if (wait > 0) {
                    wakeup.await(wait);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** One look: decide what is due (guarded), or say how long to sleep. Returns nanoseconds to wait. */
    long step(Grant grant) {
        Record peek = dsl.fetchOne("SELECT clock_timestamp() AS now, min(next_fire_at) AS next, "
                + "coalesce(bool_or(next_fire_at IS NULL OR resumed_at IS NOT NULL), false) AS fresh "
                + "FROM schedules WHERE NOT paused AND error IS NULL");
        Instant now = peek.get("now", OffsetDateTime.class).toInstant();
        OffsetDateTime next = peek.get("next", OffsetDateTime.class);
        boolean fresh = peek.get("fresh", Boolean.class);
        if (!fresh && (next == null || next.toInstant().isAfter(now))) {
            long untilNext = next == null
                    ? Long.MAX_VALUE
                    : Duration.between(now, next.toInstant()).toNanos() + TimeUnit.MILLISECONDS.toNanos(1);
            return Math.min(untilNext, POLL.toNanos());
        }
        long started = ticker.nanoTime();
        Optional<Pass> pass = lease.inGuardedTransaction(grant.token(), this::decide);
        if (pass.isEmpty()) {
            leadership.stepDown(
                    grant,
                    "lease guard rejected token " + grant.token()
                            + " while deciding schedule occurrences; nothing was written");
            return 0;
        }
        lastPassAt = Instant.now();
        Pass p = pass.get();
        fired.increment((double) p.jobs());
        skipped.increment((double) p.skipped());
        if (p.jobs() > 0 || p.skipped() > 0) {
            log.debug(
                    "Decided schedule occurrences under token {} in {} ms: {} jobs, {} skipped",
                    grant.token(),
                    TimeUnit.NANOSECONDS.toMillis(ticker.nanoTime() - started),
                    p.jobs(),
                    p.skipped());
        }
        // Again at once: the next look reads the new next_fire_at, or finds more to decide.
        return 0;
    }

    record Pass(long jobs, long skipped) {}

    /** One pass: every schedule that is due (or was resumed) decided, its jobs inserted, in the caller's transaction. */
    private Pass decide(DSLContext tx) {
        Result<Record> rows = tx.fetch(
                "SELECT clock_timestamp() AS now, name, cron, (extract(epoch FROM every) * 1000000)::bigint AS every_us, "
                        + "time_zone, resource, payload::text AS payload, misfire, starts_at, next_fire_at, resumed_at FROM schedules "
                        + "WHERE NOT paused AND error IS NULL AND (next_fire_at IS NULL OR next_fire_at <= clock_timestamp() OR resumed_at IS NOT NULL) "
                        + "ORDER BY name FOR UPDATE SKIP LOCKED");
        NewJobs jobs = new NewJobs();
        long skipped = 0;
        for (Record row : rows) {
            skipped += decideOne(tx, row, jobs);
        }
        jobs.insert(tx);
        return new Pass(jobs.count(), skipped);
    }

    /** One schedule's occurrences up to now: its jobs added to {@code jobs}, its skips recorded; returns the occurrences skipped. */
    private long decideOne(DSLContext tx, Record row, NewJobs jobs) {
        String name = row.get("name", String.class);
        Instant now = row.get("now", OffsetDateTime.class).toInstant();
        Instant startsAt = row.get("starts_at", OffsetDateTime.class).toInstant();
        Occurrences rule;
        ScheduleDecision.Misfire policy;
        try {
            String cron = row.get("cron", String.class);
            rule = cron != null
                    ? Occurrences.cron(cron, row.get("time_zone", String.class), startsAt)
                    : Occurrences.every(Duration.ofNanos(row.get("every_us", Long.class) * 1000), startsAt);
            policy = ScheduleDecision.Misfire.parse(row.get("misfire", String.class));
        } catch (IllegalArgumentException e) {
            fail(tx, name, e.getMessage());
            return 0;
        }
        Instant nextFireAt = instant(row.get("next_fire_at", OffsetDateTime.class));
        Instant resumedAt = instant(row.get("resumed_at", OffsetDateTime.class));
        if (nextFireAt == null && rule.first() == null) {
            fail(tx, name, "the rule never fires (no occurrence at or after " + startsAt + ")");
            return 0;
        }
        ScheduleDecision d = ScheduleDecision.decide(rule, nextFireAt, now, misfireGrace, policy, resumedAt, LIMIT);
        logLate(name, d, now, policy);
        for (Instant at : d.jobs()) {
            jobs.add(name, at, row.get("resource", String.class), row.get("payload", String.class));
        }
        long skipped = recordSkips(tx, name, d, policy);
        if (d.nextFireAt() == null) {
            fail(
                    tx,
                    name,
                    "the rule fires no more after "
                            + (d.jobs().isEmpty()
                                    ? startsAt
                                    : d.jobs().get(d.jobs().size() - 1)));
        }
        boolean stillResuming =
                resumedAt != null && d.nextFireAt() != null && d.nextFireAt().isBefore(resumedAt);
        tx.execute(
                "UPDATE schedules SET next_fire_at = coalesce(?::timestamptz, next_fire_at), fired = fired + ?, skipped = skipped + ?, "
                        + "last_fired_at = coalesce(?::timestamptz, last_fired_at), resumed_at = CASE WHEN ?::boolean THEN resumed_at END WHERE name = ?",
                d.nextFireAt() == null ? null : OffsetDateTime.ofInstant(d.nextFireAt(), ZoneOffset.UTC),
                (long) d.jobs().size(),
                skipped,
                d.jobs().isEmpty()
                        ? null
                        : OffsetDateTime.ofInstant(d.jobs().get(d.jobs().size() - 1), ZoneOffset.UTC),
                stillResuming,
                name);
        return skipped;
    }

    /** The occurrences missed while no dispatcher led that become jobs now, said once. */
    private void logLate(String name, ScheduleDecision d, Instant now, ScheduleDecision.Misfire policy) {
        List<Instant> late = d.jobs().stream()
                .filter(t -> t.isBefore(now.minus(misfireGrace)))
                .toList();
        if (!late.isEmpty()) {
            log.info(
                    "Schedule {}: {} occurrence(s) from {} to {} were missed while no dispatcher led and become jobs now (policy {})",
                    name,
                    late.size(),
                    late.get(0),
                    late.get(late.size() - 1),
                    policy.name().toLowerCase(Locale.ROOT));
        }
    }

    /** Records each run of skipped occurrences with the scheduler's token; returns how many were skipped. */
    private static long recordSkips(DSLContext tx, String name, ScheduleDecision d, ScheduleDecision.Misfire policy) {
        long skipped = 0;
        for (ScheduleDecision.Skip s : d.skips()) {
            tx.execute(
                    "INSERT INTO schedule_skips (schedule_name, first_fire_at, last_fire_at, occurrences, reason, fencing_token) "
                            + "VALUES (?, ?::timestamptz, ?::timestamptz, ?, ?, (SELECT fencing_token FROM leader_lease WHERE role = ?))",
                    name,
                    OffsetDateTime.ofInstant(s.first(), ZoneOffset.UTC),
                    OffsetDateTime.ofInstant(s.last(), ZoneOffset.UTC),
                    s.occurrences(),
                    s.reason(),
                    DispatcherConfig.ROLE);
            skipped += s.occurrences();
            log.info(
                    "Schedule {}: skipped {} occurrence(s) from {} to {} ({}, policy {})",
                    name,
                    s.occurrences(),
                    s.first(),
                    s.last(),
                    s.reason().equals("paused")
                            ? "not decided before the schedule was resumed"
                            : "missed while no dispatcher led",
                    policy.name().toLowerCase(Locale.ROOT));
        }
        return skipped;
    }

    /** The jobs of one pass's occurrences, inserted together. */
    private static final class NewJobs {
        private final List<OffsetDateTime> dues = new ArrayList<>();
        private final List<String> resources = new ArrayList<>();
        private final List<String> payloads = new ArrayList<>();
        private final List<String> keys = new ArrayList<>();
        private final List<String> submitters = new ArrayList<>();
        private final List<String> traceparents = new ArrayList<>();

        void add(String schedule, Instant at, String resource, String payload) {
            dues.add(OffsetDateTime.ofInstant(at, ZoneOffset.UTC));
            resources.add(resource);
            payloads.add(payload);
            keys.add(key(schedule, at));
            submitters.add(KEY_PREFIX + schedule);
            // Each occurrence is a trace of its own: no producer's transaction is behind it.
            traceparents.add(TraceContext.newTraceparent());
        }

        long count() {
            return keys.size();
        }

        /** One statement for all; a key that a job inserted by hand holds already is not inserted again. */
        void insert(DSLContext tx) {
            if (keys.isEmpty()) {
                return;
            }
            List<String> inserted = tx.fetch(
                            "INSERT INTO jobs (due_at, resource, payload, unique_key, submitted_by, traceparent) "
                                    + "SELECT * FROM unnest(?::timestamptz[], ?::varchar[], ?::jsonb[], ?::varchar[], ?::varchar[], ?::varchar[]) "
                                    + "ON CONFLICT (unique_key) DO NOTHING RETURNING unique_key",
                            dues.toArray(new OffsetDateTime[0]),
                            resources.toArray(new String[0]),
                            payloads.toArray(new String[0]),
                            keys.toArray(new String[0]),
                            submitters.toArray(new String[0]),
                            traceparents.toArray(new String[0]))
                    .getValues(0, String.class);
            if (inserted.size() < keys.size()) {
                List<String> taken = new ArrayList<>(keys);
                taken.removeAll(inserted);
                // Only a job inserted by hand can hold such a key: the occurrence is that job, and fires once.
                log.warn(
                        "{} schedule occurrence(s) already had a job with their key, inserted by someone else; not inserted again: {}",
                        taken.size(),
                        taken.size() > 5 ? taken.subList(0, 5) + " …" : taken);
            }
        }
    }

    private static void fail(DSLContext tx, String name, String error) {
        log.error("Schedule {} does not fire until it is corrected: {}", name, error);
        tx.execute("UPDATE schedules SET error = ? WHERE name = ?", error, name);
    }

    static String key(String schedule, Instant fireAt) {
        return KEY_PREFIX + schedule + "@" + fireAt;
    }

    private static Instant instant(OffsetDateTime t) {
        return t == null ? null : t.toInstant();
    }

    @Override
    public void close() {
        running = false;
        wakeup.signal();
        try {
            thread.join(5_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
