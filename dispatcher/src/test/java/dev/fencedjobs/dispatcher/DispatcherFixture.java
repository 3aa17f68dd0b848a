package dev.fencedjobs.dispatcher;

import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static dev.fencedjobs.db.jooq.Tables.LEADER_LEASE;
import static dev.fencedjobs.db.jooq.Tables.OUTBOX;
import static org.assertj.core.api.Assertions.assertThat;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.lease.LeaseConfig;
import dev.fencedjobs.lease.LeaseOps;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.runtime.ServiceConfig;
import dev.fencedjobs.runtime.internal.Embedding;
import io.micrometer.core.instrument.MeterRegistry;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.function.UnaryOperator;
import org.jooq.DSLContext;
import org.jooq.impl.DSL;

/** Replicas of the dispatcher over one test database, and the checks every test makes. */
final class DispatcherFixture implements AutoCloseable {

    static final Duration LEASE = Duration.ofSeconds(2);
    static final Duration RENEW = Duration.ofMillis(500);

    private final DatabaseConfig database;
    private final HikariDataSource pool;
    private final DSLContext dsl;
    private final List<Dispatcher> replicas = new ArrayList<>();
    private int started;

    DispatcherFixture(String url, String user, String password) {
        this.database = DatabaseConfig.of(url, user, password)
                .withConnectTimeout(Duration.ofSeconds(1))
                .withServerTimeouts(Duration.ofMillis(500), Duration.ofMillis(500), Duration.ofSeconds(1));
        // The fixture's own reads and writes with server timeouts of 30 s, as the db module's MigratedDatabase, not the
        // services' half second: those are what the dispatchers under test fail fast with, and a test's bulk insert
        // of 10,000 jobs on a loaded machine is no fault of theirs (DispatcherTest timed one out at half a second in a
        // clean-clone CI run; RelayFixture says why not 2 s either).
        this.pool = Database.pool(
                DatabaseConfig.of(url, user, password)
                        .withConnectTimeout(Duration.ofSeconds(1))
                        .withServerTimeouts(Duration.ofSeconds(30), Duration.ofSeconds(30), Duration.ofSeconds(30)),
                "test-fixture");
        Database.migrate(pool);
        this.dsl = Database.dsl(pool);
    }

    DispatcherConfig config(LeaseConfig lease, int batchSize) {
        return new DispatcherConfig(new ServiceConfig(database, 0, Duration.ofSeconds(10), false), lease, batchSize);
    }

    Dispatcher start() {
        return start(config(new LeaseConfig(LEASE, RENEW), 500), UnaryOperator.identity(), UnaryOperator.identity());
    }

    /** A replica whose meters go to {@code registry}. */
    Dispatcher start(MeterRegistry registry) {
        return start(
                config(new LeaseConfig(LEASE, RENEW), 500),
                new Embedding(null, registry, true, null),
                UnaryOperator.identity(),
                UnaryOperator.identity());
    }

    Dispatcher start(DispatcherConfig config, UnaryOperator<LeaseOps> leaseOps, UnaryOperator<JobBatches> batches) {
        return start(config, Embedding.STANDALONE, leaseOps, batches);
    }

    private Dispatcher start(
            DispatcherConfig config,
            Embedding embedding,
            UnaryOperator<LeaseOps> leaseOps,
            UnaryOperator<JobBatches> batches) {
        Dispatcher d =
                Dispatcher.start(config, embedding, "replica-" + (++started), Ticker.system(), leaseOps, batches);
        replicas.add(d);
        return d;
    }

    DSLContext dsl() {
        return dsl;
    }

    /** A scheduler lease (shard 0) of the test's own with {@code token}, as a takeover leaves it, for tests that call the batch's SQL as its holder. */
    void schedulerLease(long token) {
        dsl.execute(
                "INSERT INTO leader_lease (role, holder_id, fencing_token, expires_at) VALUES ('scheduler', ?, ?, clock_timestamp() + interval '1 hour')"
                        + " ON CONFLICT (role) DO UPDATE SET holder_id = excluded.holder_id, fencing_token = excluded.fencing_token, expires_at = excluded.expires_at",
                "holder-" + token,
                token);
    }

    /** The replica that is leader now, if any. */
    java.util.Optional<Dispatcher> leader() {
        return replicas.stream()
                .filter(d -> d.state() == RunningService.State.LEADING)
                .findFirst();
    }

    long currentToken() {
        return dsl.select(LEADER_LEASE.FENCING_TOKEN)
                .from(LEADER_LEASE)
                .where(LEADER_LEASE.ROLE.eq(DispatcherConfig.ROLE))
                .fetchOptional(r -> r.value1())
                .orElse(0L);
    }

    int pending() {
        return dsl.fetchCount(JOBS, JOBS.STATE.eq("pending"));
    }

    int completed() {
        return dsl.fetchCount(JOBS, JOBS.STATE.eq("completed"));
    }

    /**
     * Invariants 3 and 4: each completed job has exactly one outbox row carrying its token, and
     * no outbox row exists for a job that is not completed.
     */
    void assertExactlyOnceWithOutbox(int expectedCompleted) {
        assertThat(completed()).as("completed jobs").isEqualTo(expectedCompleted);
        assertThat(dsl.fetchCount(OUTBOX)).as("outbox rows").isEqualTo(expectedCompleted);
        assertThat(dsl.fetchCount(dsl.select(OUTBOX.JOB_ID)
                        .from(OUTBOX)
                        .groupBy(OUTBOX.JOB_ID)
                        .having(DSL.count().gt(1))))
                .as("jobs with more than one outbox row")
                .isZero();
        assertThat(dsl.fetchCount(dsl.select(OUTBOX.ID)
                        .from(OUTBOX)
                        .join(JOBS)
                        .on(JOBS.ID.eq(OUTBOX.JOB_ID))
                        .where(JOBS.STATE.ne("completed").or(JOBS.COMPLETED_BY_TOKEN.ne(OUTBOX.FENCING_TOKEN)))))
                .as("outbox rows for a pending job or with another token than the job's")
                .isZero();
        assertThat(dsl.fetchCount(dsl.select(JOBS.ID)
                        .from(JOBS)
                        .leftJoin(OUTBOX)
                        .on(OUTBOX.JOB_ID.eq(JOBS.ID))
                        .where(JOBS.STATE.eq("completed"))
                        .and(OUTBOX.ID.isNull())))
                .as("completed jobs without an outbox row")
                .isZero();
    }

    @Override
    public void close() {
        for (Dispatcher d : replicas) {
            d.close();
        }
        pool.close();
    }
}
