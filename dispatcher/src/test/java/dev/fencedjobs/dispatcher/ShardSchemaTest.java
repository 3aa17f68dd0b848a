package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.Statement;
import java.util.Arrays;
import java.util.List;
import org.jooq.DSLContext;
import org.jooq.Record;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/**
 * The shards in the database (V13, R__shards.sql, docs/shards.md), as the schema's owner and the
 * lease holders meet them: the database assigns each job's shard, each shard's lease issues tokens
 * no other shard has, a shard's holder completes only its own shard's jobs, and a change of the
 * count switches only once the old map's records are all published, with every token after above
 * every token before.
 */
class ShardSchemaTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private DispatcherFixture fixture;
    private DSLContext dsl;
    private TestDatabase db;

    @BeforeEach
    void database() {
        db = postgres.database();
        fixture = new DispatcherFixture(db.url(), db.user(), db.password());
        dsl = fixture.dsl();
    }

    @AfterEach
    void close() {
        fixture.close();
    }

    /** Takes shard {@code shard}'s scheduler lease for {@code holder} as an acquisition does, and returns its token. */
    private long acquire(int shard, String holder) {
        String role = shard == 0 ? "scheduler" : "scheduler/" + shard;
        return dsl.fetchSingle(
                        "INSERT INTO leader_lease (role, holder_id, fencing_token, expires_at) VALUES (?, ?, 1, clock_timestamp() + interval '1 hour')"
                                + " ON CONFLICT (role) DO UPDATE SET holder_id = excluded.holder_id, fencing_token = leader_lease.fencing_token + 1,"
                                + " expires_at = excluded.expires_at RETURNING fencing_token",
                        role,
                        holder)
                .get(0, Long.class);
    }

    private int count(String sql, Object... bindings) {
        return dsl.fetchSingle(sql, bindings).get(0, Integer.class);
    }

    private Record setCount(int n) {
        return dsl.fetchSingle("SELECT * FROM shards_set(?)", n);
    }

    private Record switchMap() {
        return dsl.fetchSingle("SELECT * FROM shards_switch()");
    }

    /** Completes up to 1,000 due jobs of {@code shard} under {@code token}, as the dispatcher's batch does. */
    private int complete(int shard, long token) {
        return dsl.transactionResult(
                c -> FencedJobBatches.batchStatement(c.dsl(), FencingToken.of(token), shard, 1000, null)
                        .fetch()
                        .size());
    }

    /** Two shards in force, and 100 jobs due now over 100 resources (both shards get some). */
    private void twoShardsWith100DueJobs() {
        setCount(2);
        switchMap();
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'r-' || g FROM generate_series(1, 100) g");
    }

    private void publishEverything() {
        dsl.execute("UPDATE outbox_position p SET published_through = (SELECT coalesce(max(id), 0) FROM outbox)");
    }

    @Test
    void theDatabaseAssignsEachJobItsShardFromItsResourceWhateverTheInsertSays() {
        setCount(4);
        assertThat(switchMap().get("switched", Boolean.class)).isTrue();
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'r-' || g FROM generate_series(1, 400) g");
        dsl.execute("INSERT INTO jobs (due_at, resource, shard) VALUES (clock_timestamp(), 'r-1', 3)");

        assertThat(count("SELECT count(*) FROM jobs WHERE shard <> shard_of(resource, 4)"))
                .isZero();
        assertThat(count("SELECT count(DISTINCT shard) FROM jobs"))
                .as("400 resources over 4 shards")
                .isEqualTo(4);
        assertThat(count("SELECT count(DISTINCT shard) FROM jobs WHERE resource = 'r-1'"))
                .isEqualTo(1);
        assertThat(count("SELECT min(count) FROM (SELECT count(*) FROM jobs GROUP BY shard) c"))
                .as("no shard gets less than half its share")
                .isGreaterThan(50);
    }

    /**
     * The trigger carries the count in its definition (R__jobs.sql), which the switch writes: through
     * every change of count, an insert and an update of the resource get the shard of the count in force,
     * whatever they name, and a job moved by the switch keeps the shard the switch gave it.
     */
    @Test
    void theShardTriggerFollowsEveryCountTheSwitchPutsInForce() {
        dsl.execute("INSERT INTO jobs (due_at, resource) SELECT clock_timestamp() + interval '1 day', 'r-' || g"
                + " FROM generate_series(1, 200) g");
        for (int n : new int[] {4, 2, 1, 3, 1}) {
            publishEverything();
            setCount(n);
            assertThat(switchMap().get("switched", Boolean.class)).isTrue();
            assertThat(count("SELECT count(*) FROM jobs WHERE shard <> shard_of(resource, ?)", n))
                    .as("the switch's move, to %d shards", n)
                    .isZero();
            dsl.execute(
                    "INSERT INTO jobs (due_at, resource, shard) SELECT clock_timestamp() + interval '1 day', 'n' || ? || '-' || g, g % 5"
                            + " FROM generate_series(1, 50) g",
                    n);
            dsl.execute("UPDATE jobs SET resource = resource || '+' WHERE resource LIKE 'r-1%'");
            dsl.execute("UPDATE jobs SET shard = 7 WHERE resource LIKE 'r-2%'");
            assertThat(count("SELECT count(*) FROM jobs WHERE shard <> shard_of(resource, ?)", n))
                    .as("inserts and updates with %d shards in force", n)
                    .isZero();
        }
        assertThat(count("SELECT count(DISTINCT shard) FROM jobs")).isEqualTo(1);
    }

    @Test
    void everyShardsTokenIsAboveEveryTokenItsFamilyIssuedBefore() {
        long first = acquire(0, "a");
        long second = acquire(1, "b");
        long third = acquire(2, "c");
        long again = acquire(0, "d");
        assertThat(List.of(first, second, third, again)).isSorted().doesNotHaveDuplicates();
        assertThat(again).isEqualTo(third + 1);
        // The relay's family counts on its own.
        long relay = dsl.fetchSingle(
                        "INSERT INTO leader_lease VALUES ('relay/1', 'r', 1, clock_timestamp() + interval '1 hour') RETURNING fencing_token")
                .get(0, Long.class);
        assertThat(relay).isEqualTo(1);
    }

    @Test
    void aShardsHolderCompletesOnlyItsOwnShardsJobs() {
        twoShardsWith100DueJobs();
        long zero = acquire(0, "a");
        long one = acquire(1, "b");

        // Shard 1's holder, with its own live token, running shard 0's batch.
        assertThatThrownBy(() -> complete(0, one))
                .hasMessageContaining("only the shard's lease holder completes its jobs");
        assertThatThrownBy(() -> dsl.execute(
                        "UPDATE jobs SET state = 'completed', completed_by_token = ?, completed_at = clock_timestamp() WHERE shard = 0",
                        one))
                .hasMessageContaining("only the shard's lease holder completes its jobs");
        // An outbox row in its own shard for a job of the other.
        assertThatThrownBy(() -> dsl.execute(
                        "WITH done AS (UPDATE jobs SET state = 'completed', completed_by_token = ?, completed_at = clock_timestamp()"
                                + " WHERE id = (SELECT min(id) FROM jobs WHERE shard = 0) RETURNING *)"
                                + " INSERT INTO outbox (job_id, shard, resource, fencing_token, payload, due_at, completed_at)"
                                + " SELECT id, 1, resource, ?, payload, due_at, completed_at FROM done",
                        zero,
                        one))
                .hasMessageContaining("outbox rows are written only");

        int inZero = complete(0, zero);
        int inOne = complete(1, one);
        assertThat(inZero + inOne).isEqualTo(100);
        assertThat(count(
                        "SELECT count(*) FROM outbox o JOIN jobs j ON j.id = o.job_id WHERE o.shard = j.shard AND o.fencing_token = ?"
                                + " AND j.shard = 0",
                        zero))
                .isEqualTo(inZero);
        // A former holder of shard 1 (its token taken over) completes nothing more.
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'r-' || g FROM generate_series(1, 100) g");
        acquire(1, "c");
        assertThatThrownBy(() -> complete(1, one))
                .hasMessageContaining("only the shard's lease holder completes its jobs");
    }

    @Test
    void aBatchsOutboxRowsWakeTheRelayOfTheirShardByName() throws Exception {
        twoShardsWith100DueJobs();
        long zero = acquire(0, "a");
        long one = acquire(1, "b");
        try (Connection listener = DriverManager.getConnection(db.url(), db.user(), db.password());
                Statement s = listener.createStatement()) {
            s.execute("LISTEN outbox_inserted");
            complete(1, one);
            complete(0, zero);
            s.execute("SELECT 1"); // the notifications come in with the next answer
            PGNotification[] notified = listener.unwrap(PGConnection.class).getNotifications();
            assertThat(Arrays.stream(notified).map(PGNotification::getParameter))
                    .as("one notification a batch, naming its shard (RelayLoop wakes only that shard's loop)")
                    .containsExactly("1", "0");
        }
    }

    @Test
    void aNewCountDrainsThenSwitchesOnlyOnceEveryRecordOfTheOldMapIsPublished() {
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'r-' || g FROM generate_series(1, 200) g");
        long before = acquire(0, "a");
        assertThat(complete(0, before)).isEqualTo(200);
        dsl.execute(
                "INSERT INTO jobs (due_at, resource) SELECT clock_timestamp(), 'r-' || g FROM generate_series(1, 200) g");

        Record asked = setCount(4);
        assertThat(asked.get("target_count", Integer.class)).isEqualTo(4);
        assertThat(complete(0, before))
                .as("nothing completes while the map drains")
                .isZero();

        Record refused = switchMap();
        assertThat(refused.get("switched", Boolean.class)).isFalse();
        assertThat(refused.get("waiting", Integer.class))
                .as("shard 0's 200 records unpublished")
                .isEqualTo(1);
        assertThat(count("SELECT shard_count FROM shard_map")).isEqualTo(1);

        publishEverything();
        Record switched = switchMap();
        assertThat(switched.get("switched", Boolean.class)).isTrue();
        assertThat(switched.get("shard_count", Integer.class)).isEqualTo(4);
        assertThat(switched.get("generation", Integer.class)).isEqualTo(2);
        assertThat(switched.get("moved", Long.class)).isPositive();
        assertThat(count("SELECT count(*) FROM jobs WHERE state = 'pending' AND shard <> shard_of(resource, 4)"))
                .isZero();
        assertThat(count("SELECT count(*) FROM leader_lease WHERE expires_at > clock_timestamp()"))
                .as("every scheduler lease ended")
                .isZero();
        assertThat(count("SELECT count(*) FROM outbox_position WHERE role IN ('relay', 'relay/1', 'relay/2', 'relay/3')"
                        + " AND published_through >= (SELECT max(id) FROM outbox)"))
                .isEqualTo(4);
        assertThatThrownBy(() -> complete(0, before))
                .as("the old map's holder, whose lease the switch ended")
                .hasMessageContaining("only the shard's lease holder completes its jobs");

        // Every shard's new holder has a token above every token of the old map, and completes its jobs.
        int completed = 0;
        for (int shard = 0; shard < 4; shard++) {
            long token = acquire(shard, "new-" + shard);
            assertThat(token).isGreaterThan(before);
            completed += complete(shard, token);
        }
        assertThat(completed).isEqualTo(200);
        assertThat(count("SELECT count(*) FROM outbox o JOIN jobs j ON j.id = o.job_id WHERE o.shard <> j.shard"))
                .isZero();
        // Per resource, the tokens on its records grow in outbox order.
        assertThat(count(
                        "SELECT count(*) FROM (SELECT fencing_token < lag(fencing_token) OVER (PARTITION BY resource ORDER BY id) AS back"
                                + " FROM outbox) o WHERE back"))
                .isZero();
        // Asking for the count in force cancels nothing and switches nothing.
        assertThat(setCount(4).get("target_count", Integer.class)).isNull();
        assertThat(switchMap().get("switched", Boolean.class)).isFalse();
    }

    @Test
    void onlyTheOwnerSetsTheCountAndACountIsBetweenOneAnd256() {
        assertThatThrownBy(() -> setCount(0)).hasMessageContaining("between 1 and 256");
        assertThatThrownBy(() -> setCount(257)).hasMessageContaining("between 1 and 256");
        assertThat(count("SELECT count(*) FROM information_schema.routine_privileges WHERE routine_name = 'shards_set'"
                        + " AND grantee = 'PUBLIC'"))
                .isZero();
    }
}
