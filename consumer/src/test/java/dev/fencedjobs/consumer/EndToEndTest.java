package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.MigratedDatabase;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.dispatcher.Dispatcher;
import dev.fencedjobs.dispatcher.DispatcherConfig;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.relay.Relay;
import dev.fencedjobs.relay.RelayConfig;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import dev.fencedjobs.testing.TestKafka;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.jooq.DSLContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Dispatcher, relay and consumer together: jobs inserted with SQL become exactly one effect each. */
class EndToEndTest {

    @RegisterExtension
    final PostgresExtension jobsDatabase = new PostgresExtension();

    /**
     * The services': they fail fast with half a second. The test's own pools (its producer's inserts, its
     * reads of the outcome) have MigratedDatabase's 30 s, as RelayFixture and DispatcherFixture do: its
     * insert of 1,000 jobs took 27 to 58 ms through Testcontainers on an idle 2-core machine, 188 ms with
     * one benchmark beside, and timed out at half a second in CI's Testcontainers step, which runs beside
     * the published commands' benchmarks. No fault of the services under test.
     */
    private static DatabaseConfig database(TestDatabase db) {
        return DatabaseConfig.of(db.url(), db.user(), db.password())
                .withConnectTimeout(Duration.ofSeconds(1))
                .withServerTimeouts(Duration.ofMillis(500), Duration.ofMillis(500), Duration.ofSeconds(1));
    }

    @Test
    void jobsInsertedWithSqlProduceExactlyOneEffectEachStampedWithTheTokenThatCompletedThem() throws Exception {
        // The consumer keeps its tables in a database of its own, the other documented setup.
        try (TestDatabase consumerDb =
                dev.fencedjobs.testing.TestPostgres.shared().createDatabase("e2e_consumer")) {
            DatabaseConfig jobsDb = database(jobsDatabase.database());
            String topic = "e2e-" + UUID.randomUUID();
            String bootstrap = TestKafka.shared().bootstrapServers();
            LeaseConfig lease = new LeaseConfig(Duration.ofSeconds(2), Duration.ofMillis(500));
            List<AutoCloseable> services = new ArrayList<>();
            KafkaSettings kafka =
                    new KafkaSettings(bootstrap, topic).withTrust(dev.fencedjobs.runtime.RecordTrust.generate());
            try (HikariDataSource jobsPool =
                            Database.pool(MigratedDatabase.config(jobsDatabase.database()), "e2e-producer");
                    HikariDataSource consumerPool = Database.pool(MigratedDatabase.config(consumerDb), "e2e-check")) {
                Database.migrate(jobsPool);
                DSLContext jobs = Database.dsl(jobsPool);
                DispatcherConfig dispatcherConfig =
                        new DispatcherConfig(new ServiceConfig(jobsDb, 0, Duration.ofSeconds(10), false), lease, 200);
                Dispatcher d1 = Dispatcher.builder(dispatcherConfig).start();
                Dispatcher d2 = Dispatcher.builder(dispatcherConfig).start();
                services.add(d1);
                services.add(d2);
                services.add(Relay.builder(new RelayConfig(
                                new ServiceConfig(jobsDb, 0, Duration.ofSeconds(10), false),
                                lease,
                                kafka,
                                3,
                                (short) 1,
                                500,
                                Duration.ofSeconds(1),
                                100_000,
                                Duration.ofHours(1)))
                        .start());
                services.add(FencedConsumer.builder(
                                new ConsumerConfig(
                                        new ServiceConfig(database(consumerDb), 0, Duration.ofSeconds(10), true),
                                        kafka,
                                        "e2e",
                                        500,
                                        3,
                                        Duration.ofMillis(10),
                                        Duration.ofDays(7)),
                                new LedgerEffect())
                        .start());

                jobs.execute("INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || (g % 20), "
                        + "jsonb_build_object('n', g), clock_timestamp() FROM generate_series(1, 1000) g");
                jobs.execute(
                        "INSERT INTO jobs (resource, payload, due_at) SELECT 'account-' || (g % 20), "
                                + "jsonb_build_object('n', g), clock_timestamp() + interval '2 seconds' FROM generate_series(1001, 2000) g");
                jobs.execute("INSERT INTO jobs (due_at) VALUES (clock_timestamp())");
                // A graceful handoff of the dispatcher in the middle: later jobs carry a larger token.
                await().atMost(Duration.ofSeconds(30))
                        .until(() -> jobs.fetchCount(JOBS, JOBS.STATE.eq("completed")) >= 1001);
                Dispatcher leader = d1.state() == RunningService.State.LEADING ? d1 : d2;
                leader.close();

                DSLContext consumerSide = Database.dsl(consumerPool);
                await().atMost(Duration.ofSeconds(60)).until(() -> consumerSide.fetchCount(LEDGER) >= 2001);
                // Every job completed and published, and every record committed by the consumer's
                // group: nothing more can reach it, so the counts below are final.
                await().atMost(Duration.ofSeconds(30))
                        .until(() -> jobs.fetchCount(JOBS, JOBS.STATE.eq("completed")) == 2001
                                && jobs.fetchCount(jobs.selectFrom("outbox_unpublished")) == 0
                                && TestKafka.groupLag(bootstrap, "e2e", topic) == 0);

                Map<Long, Long> completedBy = jobs.select(JOBS.ID, JOBS.COMPLETED_BY_TOKEN)
                        .from(JOBS)
                        .fetchMap(JOBS.ID, JOBS.COMPLETED_BY_TOKEN);
                Map<Long, Long> appliedWith = consumerSide
                        .select(LEDGER.JOB_ID, LEDGER.FENCING_TOKEN)
                        .from(LEDGER)
                        .fetchMap(LEDGER.JOB_ID, LEDGER.FENCING_TOKEN);
                assertThat(consumerSide.fetchCount(LEDGER))
                        .as("one effect row per job")
                        .isEqualTo(2001);
                assertThat(appliedWith)
                        .as("each effect stamped with the token that completed its job")
                        .isEqualTo(completedBy);
                assertThat(completedBy.values().stream().distinct().count())
                        .as("tokens that completed jobs")
                        .isGreaterThanOrEqualTo(2);
            } finally {
                for (AutoCloseable s : services) {
                    s.close();
                }
            }
        }
    }
}
