package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.PostgresExtension;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.jooq.Record;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A job's trace context against a real PostgreSQL: the outbox row the leader writes when it
 * completes the job carries the context the producer gave it, on the plain path and on the policy
 * path, and each of a schedule's occurrences is a trace of its own.
 */
class TraceContextTest {

    private static final String PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    private static final String OTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void theOutboxRowCarriesTheContextItsJobWasSubmittedIn() throws Exception {
        var db = postgres.database();
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            fixture.dsl()
                    .execute(
                            "INSERT INTO jobs (due_at, unique_key, traceparent, tracestate) VALUES (clock_timestamp(), 'plain-column', ?, 'congo=t61rcWkgMzE')",
                            PARENT);
            fixture.dsl().transaction(tx -> {
                tx.dsl().execute("SET LOCAL fenced_jobs.traceparent = '" + OTHER + "'");
                tx.dsl().execute("SET LOCAL fenced_jobs.tracestate = 'rojo=00f067aa0ba902b7'");
                tx.dsl().execute("INSERT INTO jobs (due_at, unique_key) VALUES (clock_timestamp(), 'plain-setting')");
            });
            fixture.dsl().execute("INSERT INTO jobs (due_at, unique_key) VALUES (clock_timestamp(), 'plain-none')");
            fixture.start();
            await().atMost(Duration.ofSeconds(30)).until(() -> outboxed(fixture, "plain-%") == 3);
            // A job with a priority sends the batch down the policy path (dispatch_batch, R__jobs.sql).
            fixture.dsl()
                    .execute(
                            "INSERT INTO jobs (due_at, unique_key, priority, traceparent) VALUES (clock_timestamp(), 'policy-column', 60, ?)",
                            PARENT);
            await().atMost(Duration.ofSeconds(30)).until(() -> outboxed(fixture, "policy-%") == 1);

            assertThat(contexts(fixture))
                    .containsExactly(
                            Map.entry("plain-column", PARENT + " congo=t61rcWkgMzE"),
                            Map.entry("plain-none", "- -"),
                            Map.entry("plain-setting", OTHER + " rojo=00f067aa0ba902b7"),
                            Map.entry("policy-column", PARENT + " -"));
        }
    }

    @Test
    void eachOccurrenceOfAScheduleIsATraceOfItsOwn() throws Exception {
        var db = postgres.database();
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            fixture.start();
            fixture.dsl()
                    .execute(
                            "INSERT INTO schedules (name, every, resource) VALUES ('tick', interval '100 milliseconds', 'r-1')");
            await().atMost(Duration.ofSeconds(30)).until(() -> outboxed(fixture, "schedule:tick@%") >= 5);
            List<String> parents = fixture.dsl()
                    .fetch(
                            "SELECT o.traceparent FROM outbox o JOIN jobs j ON j.id = o.job_id "
                                    + "WHERE j.unique_key LIKE 'schedule:tick@%' AND o.traceparent IS NOT DISTINCT FROM j.traceparent")
                    .getValues(0, String.class);
            assertThat(parents)
                    .as("every occurrence's outbox row carries its job's context")
                    .hasSizeGreaterThanOrEqualTo(5)
                    .allMatch(p -> p.matches("00-[0-9a-f]{32}-[0-9a-f]{16}-01"));
            assertThat(parents.stream().map(p -> p.substring(3, 35)).distinct().count())
                    .as("a trace id each")
                    .isEqualTo(parents.size());
        }
    }

    private static long outboxed(DispatcherFixture fixture, String keys) {
        return fixture.dsl()
                .fetchOne(
                        "SELECT count(*) FROM outbox o JOIN jobs j ON j.id = o.job_id WHERE j.unique_key LIKE ?", keys)
                .get(0, Long.class);
    }

    private static Map<String, String> contexts(DispatcherFixture fixture) {
        Map<String, String> seen = new TreeMap<>();
        for (Record r : fixture.dsl()
                .fetch("SELECT j.unique_key, coalesce(o.traceparent, '-') || ' ' || coalesce(o.tracestate, '-') "
                        + "FROM outbox o JOIN jobs j ON j.id = o.job_id WHERE j.unique_key NOT LIKE 'schedule:%'")) {
            seen.put(r.get(0, String.class), r.get(1, String.class));
        }
        return seen;
    }
}
