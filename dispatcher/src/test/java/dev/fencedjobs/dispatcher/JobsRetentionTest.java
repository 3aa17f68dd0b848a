package dev.fencedjobs.dispatcher;

import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.testing.PostgresExtension;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The leader deletes completed jobs past JOBS_RETENTION, in chunks, and nothing else, beside its batches and not in their way. */
class JobsRetentionTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    @Test
    void completedJobsPastTheirRetentionAreDeletedInChunksAndPendingOnesStay() throws Exception {
        var db = postgres.database();
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            // More than two chunks of expired completed jobs, and jobs due far ahead.
            fixture.dsl()
                    .execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, "
                            + (2 * DispatchLoop.PURGE_CHUNK + 500) + ")");
            fixture.dsl()
                    .execute(
                            "INSERT INTO jobs (due_at, unique_key) SELECT clock_timestamp() + interval '1 day', 'later-' || g"
                                    + " FROM generate_series(1, 100) g");
            DispatcherConfig config = new DispatcherConfig(
                    new ServiceConfig(
                            fixture.config(new LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW), 500)
                                    .service()
                                    .database(),
                            0,
                            Duration.ofSeconds(10),
                            false),
                    new LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW),
                    500,
                    Duration.ofSeconds(2));
            Dispatcher d = fixture.start(config, UnaryOperator.identity(), UnaryOperator.identity());
            await().atMost(Duration.ofSeconds(30))
                    .until(() -> fixture.completed() == 2 * DispatchLoop.PURGE_CHUNK + 500);

            // The idle leader wakes to purge every half retention; two full chunks and the rest.
            await().atMost(Duration.ofSeconds(30))
                    .until(() -> (long) d.status().get("jobsPurged") == 2 * DispatchLoop.PURGE_CHUNK + 500);
            assertThat(fixture.dsl().fetchCount(JOBS, JOBS.STATE.eq("pending")))
                    .as("jobs due later stay")
                    .isEqualTo(100);
            assertThat(fixture.dsl().fetchCount(JOBS, JOBS.STATE.eq("completed")))
                    .isZero();
        }
    }

    @Test
    void cancelledJobsArePurgedByTheTimeTheyWereCancelled() throws Exception {
        var db = postgres.database();
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            fixture.dsl()
                    .execute(
                            "INSERT INTO jobs (due_at, unique_key) SELECT clock_timestamp() + interval '1 day', 'cancel-' || g"
                                    + " FROM generate_series(1, 300) g");
            fixture.dsl().execute("SELECT count(cancel_job_by_key('cancel-' || g)) FROM generate_series(1, 200) g");
            DispatcherConfig config = new DispatcherConfig(
                    fixture.config(new LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW), 500)
                            .service(),
                    new LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW),
                    500,
                    Duration.ofSeconds(2));
            Dispatcher d = fixture.start(config, UnaryOperator.identity(), UnaryOperator.identity());
            await().atMost(Duration.ofSeconds(30)).until(() -> (long) d.status().get("jobsPurged") == 200);
            assertThat(fixture.dsl().fetchCount(JOBS, JOBS.STATE.eq("cancelled")))
                    .isZero();
            assertThat(fixture.pending()).as("the pending ones stay").isEqualTo(100);
        }
    }

    @Test
    void aPurgeThatHangsHoldsUpNoBatch() throws Exception {
        var db = postgres.database();
        CountDownLatch purging = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        try (DispatcherFixture fixture = new DispatcherFixture(db.url(), db.user(), db.password())) {
            try {
                fixture.start(
                        fixture.config(new LeaseConfig(DispatcherFixture.LEASE, DispatcherFixture.RENEW), 500),
                        UnaryOperator.identity(),
                        delegate -> new ForwardingBatches(delegate) {
                            @Override
                            public int purgeCompleted(Duration retention, int limit) {
                                // The first purge is due as soon as the replica leads: it hangs until the test ends.
                                purging.countDown();
                                try {
                                    release.await();
                                } catch (InterruptedException e) {
                                    Thread.currentThread().interrupt();
                                }
                                return super.purgeCompleted(retention, limit);
                            }
                        });
                assertThat(purging.await(30, TimeUnit.SECONDS))
                        .as("the leader's first purge started")
                        .isTrue();

                fixture.dsl()
                        .execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, 1200)");
                await().atMost(Duration.ofSeconds(30)).until(() -> fixture.completed() == 1200);
                assertThat(release.getCount())
                        .as("all completed while the purge was still in its delete")
                        .isEqualTo(1);
            } finally {
                release.countDown();
            }
        }
    }
}
