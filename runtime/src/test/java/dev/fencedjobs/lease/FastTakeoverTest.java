package dev.fencedjobs.lease;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.internal.Database;
import dev.fencedjobs.db.internal.Ticker;
import dev.fencedjobs.testing.Gate;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.RestartablePostgres;
import dev.fencedjobs.testing.TcpProxy;
import dev.fencedjobs.testing.TestDatabase;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.net.URI;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import org.jooq.DSLContext;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The fast path on a real PostgreSQL: a follower takes over at once when the holder's lease
 * session ends, and only then. Each case that must go fast runs with a lease of a minute, so a
 * takeover before the holder's expiry (compared in database time) can only be the fast path; each
 * case that must not, with a short lease, and the takeover comes no earlier than the expiry.
 */
class FastTakeoverTest {

    @RegisterExtension
    static final PostgresExtension postgres = new PostgresExtension();

    private static final LeaseConfig MINUTE = new LeaseConfig(Duration.ofMinutes(1), Duration.ofMillis(500));
    private static final LeaseConfig SHORT = new LeaseConfig(Duration.ofSeconds(2), Duration.ofMillis(300));

    private static HikariDataSource sharedPool;
    private static Server shared;
    /** The server the test at hand runs on: the shared one, or a restartable one of its own. */
    private Server server;

    private DSLContext dsl;
    private final List<Replica> replicas = new ArrayList<>();
    private final String role = "role-" + UUID.randomUUID();

    /** Where replicas connect, and a pool of the test's own on it. */
    private record Server(String url, String user, String password, DSLContext dsl) {}

    @BeforeAll
    static void migrate() {
        TestDatabase db = postgres.database();
        sharedPool = Database.pool(config(db.url(), db.user(), db.password()), "fast-takeover-test");
        Database.migrate(sharedPool);
        shared = new Server(db.url(), db.user(), db.password(), Database.dsl(sharedPool));
    }

    @org.junit.jupiter.api.BeforeEach
    void onTheSharedServer() {
        on(shared);
    }

    private void on(Server s) {
        server = s;
        dsl = s.dsl();
    }

    @AfterAll
    static void closePool() {
        sharedPool.close();
    }

    @AfterEach
    void stopReplicas() {
        replicas.forEach(Replica::close);
    }

    private static DatabaseConfig config(String url, String user, String password) {
        return DatabaseConfig.of(url, user, password)
                .withPoolSize(8)
                .withServerTimeouts(Duration.ofSeconds(30), Duration.ofSeconds(30), Duration.ofSeconds(30));
    }

    /** One replica: its lease over its own session (through {@code proxy} when given), its watch, its leadership. */
    private final class Replica implements AutoCloseable {
        final Lease lease;
        final LeaseSession session;
        final Leadership leadership;
        final Gate gate = new Gate();

        Replica(String name, LeaseConfig config, TcpProxy proxy) {
            this.lease = new Lease(dsl, role, name, config.duration(), Ticker.system());
            String url = proxy == null ? server.url() : viaProxy(server.url(), proxy);
            this.session = new LeaseSession(lease, () -> connect(url, name + "-lease"));
            HolderWatch watch = new HolderWatch(role, () -> connect(server.url(), name + "-watch"));
            LeaseOps ops = GatedLease.gated(gate, config.fastTakeover() ? session : lease);
            this.leadership = new Leadership(
                    role,
                    name,
                    ops,
                    config.fastTakeover() ? watch : null,
                    config,
                    Duration.ZERO,
                    Ticker.system(),
                    new SimpleMeterRegistry());
            replicas.add(this);
            leadership.start();
        }

        /** Stops renewing, as a paused process does: its sessions stay. */
        void pause() {
            gate.close();
        }

        FencingToken token() {
            return leadership.lastGrant().orElseThrow().token();
        }

        /** Whether a guarded write under {@code token} would commit now. */
        boolean canWrite(FencingToken token) {
            return lease.inGuardedTransaction(token, tx -> true).isPresent();
        }

        @Override
        public void close() {
            gate.open();
            leadership.close();
            session.close();
        }
    }

    private Connection connect(String url, String applicationName) throws SQLException {
        Properties props = new Properties();
        props.setProperty("user", server.user());
        props.setProperty("password", server.password());
        props.setProperty("ApplicationName", applicationName);
        return DriverManager.getConnection(url, props);
    }

    private static String viaProxy(String url, TcpProxy proxy) {
        URI uri = URI.create(url.substring("jdbc:".length()));
        return "jdbc:postgresql://127.0.0.1:" + proxy.port(0) + uri.getRawPath()
                + (uri.getRawQuery() == null ? "" : "?" + uri.getRawQuery());
    }

    private static int port(String url) {
        return URI.create(url.substring("jdbc:".length())).getPort();
    }

    private Replica leader(LeaseConfig config, TcpProxy proxy) {
        Replica a = new Replica("a", config, proxy);
        await().until(() -> a.leadership.state() == Leadership.State.LEADER);
        return a;
    }

    /** Starts a follower and waits until it waits for the holder's session (its lock request queued). */
    private Replica watchingFollower(String name, LeaseConfig config) {
        Replica b = new Replica(name, config, null);
        await().until(() -> dsl.fetchExists(dsl.selectFrom("pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid")
                .where("l.locktype = 'advisory' AND NOT l.granted AND a.application_name = ?", name + "-watch")));
        return b;
    }

    private OffsetDateTime expiresAt() {
        return Lease.read(dsl, role).orElseThrow().expiresAt();
    }

    private OffsetDateTime acquiredAt(FencingToken token) {
        return dsl.fetchOne(
                        "SELECT acquired_at FROM lease_takeover WHERE role = ? AND fencing_token = ?",
                        role,
                        token.value())
                .get(0, OffsetDateTime.class);
    }

    private void terminate(String applicationName) {
        assertThat(dsl.fetchOne(
                                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = ?",
                                applicationName)
                        .get(0, Long.class))
                .as("sessions named %s terminated", applicationName)
                .isEqualTo(1L);
    }

    /**
     * Ends the session of {@code a-lease}, the holder of {@code token}, and checks that {@code
     * follower} takes over with the next token, by the fast path, before {@code expiry}.
     */
    private void takesOverBeforeExpiryOnceTheHolderSessionEnds(
            Replica follower, FencingToken token, OffsetDateTime expiry) {
        terminate("a-lease");
        await().until(() -> follower.leadership.state() == Leadership.State.LEADER);
        assertThat(follower.token()).as("token + 1").isEqualTo(token.next());
        assertThat(acquiredAt(token.next()))
                .as("taken over before the holder's lease expired (database time)")
                .isBefore(expiry);
        assertThat(follower.leadership.fastTakeoverCount()).isEqualTo(1);
    }

    /** When each wait of the session {@code applicationName} for a holder's sign of life (an advisory lock not yet granted) began. */
    private List<OffsetDateTime> watchWaitsStartedAt(String applicationName) {
        return dsl.fetch(
                        "SELECT s.query_start FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid "
                                + "WHERE l.locktype = 'advisory' AND NOT l.granted AND s.application_name = ?",
                        applicationName)
                .map(r -> r.get(0, OffsetDateTime.class));
    }

    @Test
    void holderSessionTerminated_followerTakesOverBeforeExpiry_formerHolderWritesNothingAndStepsDown() {
        Replica a = leader(MINUTE, null);
        FencingToken token = a.token();
        Replica b = watchingFollower("b", MINUTE);
        OffsetDateTime expiry = expiresAt();

        takesOverBeforeExpiryOnceTheHolderSessionEnds(b, token, expiry);
        assertThat(a.canWrite(token)).as("the former holder's guard").isFalse();
        await().until(() -> a.leadership.state() == Leadership.State.FOLLOWER);
        assertThat(a.session.signOfLife())
                .as("the former holder holds no sign of life")
                .isEmpty();
        assertThat(b.session.signOfLife()).hasValue(token.next());

        // And back: the former holder now waits for the new holder's session.
        await().until(() -> !watchWaitsStartedAt("a-watch").isEmpty());
        OffsetDateTime secondExpiry = expiresAt();
        terminate("b-lease");
        await().until(() -> a.leadership.state() == Leadership.State.LEADER);
        assertThat(a.token()).isEqualTo(token.next().next());
        assertThat(acquiredAt(token.next().next())).isBefore(secondExpiry);
        assertThat(b.canWrite(token.next())).isFalse();
    }

    @Test
    void aFollowersWaitStartsAgainEverySecond_soItHoldsBackVacuumForNoLonger_andStillSeesTheSessionEnd() {
        Replica a = leader(MINUTE, null);
        FencingToken token = a.token();
        Replica b = watchingFollower("b", MINUTE);
        OffsetDateTime expiry = expiresAt();

        // A wait of the whole lease (a minute here) would be one statement, and its snapshot, for a minute.
        java.util.Set<OffsetDateTime> waits = new java.util.HashSet<>();
        await().until(() -> {
            waits.addAll(watchWaitsStartedAt("b-watch"));
            return waits.size() >= 3;
        });
        assertThat(Leadership.watchWait(MINUTE.duration())).isEqualTo(Leadership.WATCH_WAIT);
        assertThat(Leadership.watchWait(Duration.ofMillis(400))).isEqualTo(Duration.ofMillis(400));

        takesOverBeforeExpiryOnceTheHolderSessionEnds(b, token, expiry);
    }

    @Test
    void aTokenBeyond32Bits_theGrantsLockIsTheOneTheFollowerReadsAndWaitsFor() {
        // Low 32 bits 0x80000005: negative as Java's (int), so every encoding of the lock's second key must agree.
        FencingToken old = FencingToken.of((1L << 32) + (1L << 31) + 5);
        dsl.execute(
                "INSERT INTO leader_lease (role, holder_id, fencing_token, expires_at) VALUES (?, 'gone', ?, clock_timestamp() - interval '1 second')",
                role,
                old.value());
        Replica a = leader(MINUTE, null);
        assertThat(a.token()).isEqualTo(old.next());
        assertThat(a.session.signOfLife()).hasValue(old.next());
        assertThat(dsl.fetchOne("SELECT l.objid::bigint FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid"
                                + " WHERE l.locktype = 'advisory' AND l.granted AND s.application_name = 'a-lease'")
                        .get(0, Long.class))
                .as("the lock's second key, the token's low 32 bits")
                .isEqualTo(old.next().value() & 0xFFFF_FFFFL);
        Replica b = watchingFollower("b", MINUTE); // only after reading a sign of life
        OffsetDateTime expiry = expiresAt();

        terminate("a-lease");

        await().until(() -> b.leadership.state() == Leadership.State.LEADER);
        assertThat(b.token()).isEqualTo(old.next().next());
        assertThat(acquiredAt(old.next().next())).isBefore(expiry);
        assertThat(b.session.signOfLife()).hasValue(old.next().next());
    }

    @Test
    void aGrantThatFailsAfterItsReturningTookTheLock_leavesNoSignOfLifeBehind() throws Exception {
        // An AFTER trigger fails the statement once its RETURNING list has run: the grant rolls back, a session-level
        // lock would not.
        String trigger = "fail_" + role.replace("-", "_");
        dsl.execute("CREATE FUNCTION " + trigger
                + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'fails after RETURNING'; END $$");
        dsl.execute(
                "CREATE TRIGGER " + trigger + " AFTER INSERT OR UPDATE ON leader_lease FOR EACH ROW WHEN (NEW.role = '"
                        + role + "' AND NEW.holder_id = 'doomed') EXECUTE FUNCTION " + trigger + "()");
        try (LeaseSession doomed = new LeaseSession(
                new Lease(dsl, role, "doomed", MINUTE.duration(), Ticker.system()),
                () -> connect(server.url(), "doomed-lease"))) {
            assertThatThrownBy(doomed::acquireOrRenew).hasMessageContaining("fails after RETURNING");
            assertThat(Lease.read(dsl, role)).as("the grant rolled back").isEmpty();
            assertThat(dsl.fetchCount(dsl.selectFrom("pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid")
                            .where("l.locktype = 'advisory' AND s.application_name = 'doomed-lease'")))
                    .as("locks left on the failed session")
                    .isZero();
            assertThat(doomed.signOfLife()).isEmpty();

            // The failed session still open: the replica granted that token takes its sign of life, and a follower
            // waits for it.
            Replica a = leader(MINUTE, null);
            assertThat(a.session.signOfLife()).hasValue(a.token());
            watchingFollower("b", MINUTE);
        } finally {
            dsl.execute("DROP TRIGGER " + trigger + " ON leader_lease");
            dsl.execute("DROP FUNCTION " + trigger + "()");
        }
    }

    @Test
    void leaseConnectionAloneCut_followerTakesOverBeforeExpiry_formerHolderWritesNothingAndStepsDown()
            throws Exception {
        try (TcpProxy proxy = new TcpProxy("a-lease", port(server.url()))) {
            Replica a = leader(MINUTE, proxy);
            FencingToken token = a.token();
            Replica b = watchingFollower("b", MINUTE);
            OffsetDateTime expiry = expiresAt();

            proxy.cut(); // the lease session alone: the pool's connections go direct and stay

            await().until(() -> b.leadership.state() == Leadership.State.LEADER);
            assertThat(b.token()).isEqualTo(token.next());
            assertThat(acquiredAt(token.next())).isBefore(expiry);
            assertThat(a.canWrite(token))
                    .as("the former holder's guard, over its pool")
                    .isFalse();
            await().until(() -> a.leadership.state() == Leadership.State.FOLLOWER);
        }
    }

    @Test
    void pausedHolderKeepsItsSession_followerWaitsForTheExpiry() {
        Replica a = leader(SHORT, null);
        FencingToken token = a.token();
        Replica b = watchingFollower("b", SHORT);

        a.pause(); // no more renewals; the session and its sign of life stay, as in SIGSTOP or a partition

        await().until(() -> b.leadership.state() == Leadership.State.LEADER);
        assertThat(b.token()).isEqualTo(token.next());
        assertThat(acquiredAt(token.next()))
                .as("taken over no earlier than the paused holder's last renewed expiry")
                .isAfterOrEqualTo(a.leadership.lastGrant().orElseThrow().expiresAt());
        assertThat(b.leadership.fastTakeoverCount()).isZero();
        assertThat(a.canWrite(token)).isFalse();
    }

    @Test
    void holderWithoutSignOfLife_isReplacedOnlyAtExpiry() {
        Replica a = leader(SHORT.withFastTakeover(false), null); // an older version, or the fast path turned off
        FencingToken token = a.token();
        Replica b = new Replica("b", SHORT, null);
        await().until(() -> b.lease.holder().map(h -> !h.signOfLife()).orElse(false));

        a.pause();

        await().until(() -> b.leadership.state() == Leadership.State.LEADER);
        assertThat(acquiredAt(token.next()))
                .isAfterOrEqualTo(a.leadership.lastGrant().orElseThrow().expiresAt());
        assertThat(b.leadership.fastTakeoverCount()).isZero();
    }

    @Test
    void databaseRestart_endsEverySession_theHolderTakesItsSignOfLifeAgain_andNoOneTakesOverEarly() {
        try (RestartablePostgres pg = new RestartablePostgres();
                HikariDataSource pool =
                        Database.pool(config(pg.url(), pg.user(), pg.password()), "fast-takeover-restart")) {
            Database.migrate(pool);
            on(new Server(pg.url(), pg.user(), pg.password(), Database.dsl(pool)));
            Replica a = leader(MINUTE, null);
            FencingToken token = a.token();
            Replica b = watchingFollower("b", MINUTE);

            pg.stop();
            pg.start();
            pool.getHikariPoolMXBean()
                    .softEvictConnections(); // the test's own reads: not over connections the restart ended

            // Every session ended, the holder's and the follower's wait alike: an ended wait proves nothing.
            await().until(() -> a.session.signOfLife().isPresent()
                    && a.leadership.state() == Leadership.State.LEADER
                    && dsl.fetchExists(dsl.selectFrom("pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid")
                            .where("l.locktype = 'advisory' AND NOT l.granted AND s.application_name = 'b-watch'")));
            assertThat(a.token())
                    .as("the holder renewed its live lease on a new session: no takeover")
                    .isEqualTo(token);
            assertThat(b.leadership.state()).isEqualTo(Leadership.State.FOLLOWER);
            assertThat(b.leadership.fastTakeoverCount()).isZero();

            // And the fast path works again on the new sessions.
            terminate("a-lease");
            await().until(() -> b.leadership.state() == Leadership.State.LEADER);
            assertThat(b.token()).isEqualTo(token.next());
            replicas.forEach(Replica::close);
            replicas.clear();
        }
    }
}
