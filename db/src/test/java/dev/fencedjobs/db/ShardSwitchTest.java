package dev.fencedjobs.db;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.db.internal.Shards;
import dev.fencedjobs.testing.TestDatabase;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * A call of {@code shards_switch} through {@link Shards#trySwitch}: the dispatcher that holds shard
 * 0 and {@code fenced-jobs shards set} make it on connections whose socket timeout is their
 * statement timeout plus 5 s (Database.pool), below the 10 s the switch is given. Under load a
 * switch that waited for its locks lost its connection to a read timeout on every call, and the
 * drain never ended (benchmarks/shards-e2e.sh with the reshard phase, beside CI's other work).
 */
class ShardSwitchTest {

    @RegisterExtension
    static final MigratedDatabase database = new MigratedDatabase();

    /** The network timeout of the switching connection, as a pool would have it: far below the switch's wait. */
    private static final int NETWORK_TIMEOUT_MILLIS = 200;

    @Test
    void aSwitchThatWaitsForItsLocksLongerThanItsConnectionsNetworkTimeoutGetsThrough() throws Exception {
        TestDatabase db = database.database();
        // The map drains to 4 shards; a new database has nothing to publish, so the switch may go ahead.
        asOwner(db, "SELECT shards_set(4)");
        try (Connection producer = db.connect();
                Connection watcher = db.connect();
                Connection switching = db.connect()) {
            switching.setNetworkTimeout(Runnable::run, NETWORK_TIMEOUT_MILLIS);
            int backend = backendPid(switching);
            // A producer's insert in flight: the switch's lock on jobs waits for its commit.
            insertUncommitted(producer, "account-1");
            long started = System.nanoTime();
            CompletableFuture<Shards.Switch> call = switchAsync(switching);
            // Seen waiting for the lock, then kept waiting past its connection's network timeout (its read began
            // before the wait was seen), and well within the switch's own wait for a lock (2 s).
            awaitWaitingForALock(watcher, backend);
            Thread.sleep(NETWORK_TIMEOUT_MILLIS + 100L);
            producer.commit();

            Shards.Switch result = call.get();
            assertThat(Duration.ofNanos(System.nanoTime() - started))
                    .as("the switch waited longer than its connection's network timeout")
                    .isGreaterThan(Duration.ofMillis(NETWORK_TIMEOUT_MILLIS));
            assertThat(result.switched()).isTrue();
            assertThat(result.count()).isEqualTo(4);
            assertThat(result.target()).isNull();
            try (Connection c = db.connect()) {
                assertThat(Shards.read(c).count()).isEqualTo(4);
            }
            assertThat(switching.getNetworkTimeout())
                    .as("the connection's own network timeout, back")
                    .isEqualTo(NETWORK_TIMEOUT_MILLIS);
            assertThat(switching.getAutoCommit()).isTrue();
        }
    }

    /**
     * A switch that waits for the jobs table holds no scheduler lease row meanwhile: the holders'
     * renewals go through (they queued behind it, timed out, and under load the leases ran out, the
     * holder of shard 0 with them, and no switch came). And a batch that passed its lease guard
     * before the switch took the jobs table makes the switch fail at once (55P03), not a deadlock.
     */
    @Test
    void aSwitchWaitingForTheJobsTableLetsRenewalsThroughAndGivesWayToABatchPastItsGuard() throws Exception {
        TestDatabase db = database.database();
        asOwner(
                db,
                "SELECT shards_set(1)",
                "SELECT shards_switch()",
                "DELETE FROM leader_lease",
                "INSERT INTO leader_lease (role, holder_id, fencing_token, expires_at)"
                        + " VALUES ('scheduler', 'holder-a', 1, clock_timestamp() + interval '10 seconds')",
                "SELECT shards_set(2)");
        try (Connection producer = db.connect();
                Connection watcher = db.connect();
                Connection renewing = db.connect();
                Connection switching = db.connect()) {
            int backend = backendPid(switching);
            insertUncommitted(producer, "account-1");
            CompletableFuture<Shards.Switch> call = switchAsync(switching);
            awaitWaitingForALock(watcher, backend);
            // A renewal while the switch waits: it does not wait for the switch.
            try (Statement s = renewing.createStatement()) {
                s.execute("SET lock_timeout = '100ms'");
                assertThat(s.executeUpdate(
                                "UPDATE leader_lease SET expires_at = clock_timestamp() + interval '10 seconds'"
                                        + " WHERE role = 'scheduler'"))
                        .isEqualTo(1);
            }
            // A batch past its guard: it holds its lease row, and its statement will want the jobs table.
            renewing.setAutoCommit(false);
            try (Statement s = renewing.createStatement()) {
                s.execute("SELECT 1 FROM leader_lease WHERE role = 'scheduler' FOR UPDATE");
            }
            producer.commit();
            assertThatThrownBy(call::get)
                    .hasRootCauseInstanceOf(SQLException.class)
                    .rootCause()
                    .satisfies(e -> assertThat(((SQLException) e).getSQLState()).isEqualTo("55P03"))
                    .hasMessageContaining("leader_lease");
            // Its lock gone with its transaction: the batch's statement goes through, and the next call switches.
            try (Statement s = renewing.createStatement()) {
                s.execute("SET LOCAL lock_timeout = '1s'");
                s.execute("UPDATE jobs SET payload = payload WHERE false");
            }
            renewing.commit();
            Shards.Switch result = Shards.trySwitch(switching);
            assertThat(result.switched()).isTrue();
            assertThat(result.count()).isEqualTo(2);
            // The switch turned the shard trigger off for its own move only: an insert naming a shard is assigned its
            // own.
            try (Statement s = producer.createStatement();
                    ResultSet rs = s.executeQuery("INSERT INTO jobs (resource, due_at, shard)"
                            + " VALUES ('account-2', clock_timestamp() + interval '1 hour', 7)"
                            + " RETURNING shard = shard_of('account-2', 2)")) {
                rs.next();
                assertThat(rs.getBoolean(1)).isTrue();
            }
            producer.commit();
            try (Statement s = producer.createStatement();
                    ResultSet rs = s.executeQuery(
                            "SELECT count(*) FROM jobs WHERE state = 'pending' AND shard <> shard_of(resource, 2)")) {
                rs.next();
                assertThat(rs.getLong(1))
                        .as("every pending job in its shard of the new map")
                        .isZero();
            }
        }
    }

    /**
     * A call that runs out of its time says so (57014), and the next is given twice as long, up to a
     * minute: the jobs it moves grow while the map drains, so the same time again would not do.
     */
    @Test
    void aCallThatRunsOutOfItsTimeIsToldAndTheNextIsGivenTwiceAsLong() throws Exception {
        TestDatabase db = database.database();
        asOwner(db, "SELECT shards_set(3)");
        try (Connection producer = db.connect();
                Connection switching = db.connect()) {
            insertUncommitted(producer, "account-3");
            assertThatThrownBy(() -> Shards.trySwitch(switching, Duration.ofMillis(100)))
                    .isInstanceOf(SQLException.class)
                    .satisfies(e -> assertThat(((SQLException) e).getSQLState()).isEqualTo("57014"));
            producer.rollback();
            assertThat(switching.getAutoCommit()).isTrue();
            assertThat(Shards.trySwitch(switching).switched()).isTrue();
        }
        assertThat(Shards.longerSwitchTimeout(Shards.SWITCH_TIMEOUT)).isEqualTo(Duration.ofSeconds(20));
        assertThat(Shards.longerSwitchTimeout(Duration.ofSeconds(40))).isEqualTo(Shards.MAX_SWITCH_TIMEOUT);
    }

    private static void asOwner(TestDatabase db, String... statements) throws SQLException {
        try (Connection owner = db.connect();
                Statement s = owner.createStatement()) {
            for (String sql : statements) {
                s.execute(sql);
            }
        }
    }

    private static int backendPid(Connection c) throws SQLException {
        try (Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT pg_backend_pid()")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    /** A producer's insert of a job due in an hour, left in flight: a switch's lock on jobs waits for its end. */
    private static void insertUncommitted(Connection producer, String resource) throws SQLException {
        producer.setAutoCommit(false);
        try (PreparedStatement ps = producer.prepareStatement(
                "INSERT INTO jobs (resource, due_at) VALUES (?, clock_timestamp() + interval '1 hour')")) {
            ps.setString(1, resource);
            ps.execute();
        }
    }

    /** {@link Shards#trySwitch} on another thread. */
    private static CompletableFuture<Shards.Switch> switchAsync(Connection switching) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                return Shards.trySwitch(switching);
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        });
    }

    private static void awaitWaitingForALock(Connection watcher, int backend) throws Exception {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (System.nanoTime() < deadline) {
            try (Statement s = watcher.createStatement();
                    ResultSet rs = s.executeQuery(
                            "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = " + backend)) {
                if (rs.next() && rs.getBoolean(1)) {
                    return;
                }
            }
            Thread.sleep(10);
        }
        throw new AssertionError("the switch never waited for the producer's lock");
    }
}
