package dev.fencedjobs.lease;

import static dev.fencedjobs.db.jooq.Tables.LEADER_LEASE;
import static dev.fencedjobs.db.jooq.Tables.LEASE_TAKEOVER;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.db.MigratedDatabase;
import dev.fencedjobs.db.internal.DbTime;
import dev.fencedjobs.db.internal.Ticker;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.List;
import java.util.Optional;
import java.util.UUID;
import org.jooq.Record3;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

class LeaseTest {

    @RegisterExtension
    static final MigratedDatabase db = new MigratedDatabase();

    private static final Duration LONG = Duration.ofMinutes(5);

    private static String newRole() {
        return "role-" + UUID.randomUUID();
    }

    private static Lease lease(String role, String holder, Duration duration) {
        return new Lease(db.dsl(), role, holder, duration, Ticker.system());
    }

    private static boolean guardPasses(Lease lease, FencingToken token) {
        Boolean passed = db.dsl().transactionResult(c -> lease.guard(c.dsl(), token));
        return passed;
    }

    @Test
    void
            articleCheck_oneOfTwoContendersWins_renewalKeepsToken_takeoverIncrements_staleWriterRejected_expiredSameHolderGetsNewToken() {
        String role = newRole();
        Lease a = lease(role, "holder-a", LONG);
        Lease b = lease(role, "holder-b", LONG);

        Optional<Grant> first = a.acquireOrRenew();
        assertThat(first).map(Grant::token).contains(FencingToken.of(1));
        assertThat(b.acquireOrRenew())
                .as("the other contender while A's lease is live")
                .isEmpty();

        Grant renewed = a.acquireOrRenew().orElseThrow();
        assertThat(renewed.token()).as("renewal retains token").isEqualTo(FencingToken.of(1));
        assertThat(renewed.expiresAt()).isAfterOrEqualTo(first.get().expiresAt());

        db.expire(role);
        Grant takeover = b.acquireOrRenew().orElseThrow();
        assertThat(takeover.token()).as("takeover increments").isEqualTo(FencingToken.of(2));

        assertThat(guardPasses(a, FencingToken.of(1)))
                .as("stale writer rejected")
                .isFalse();
        assertThat(a.acquireOrRenew())
                .as("former holder while B's lease is live")
                .isEmpty();

        db.expire(role);
        Grant sameHolderAgain = b.acquireOrRenew().orElseThrow();
        assertThat(sameHolderAgain.token())
                .as("expired same holder receives a new token")
                .isEqualTo(FencingToken.of(3));
    }

    @Test
    void leaseExpiresInDatabaseTime() {
        String role = newRole();
        Lease a = lease(role, "holder-a", Duration.ofMillis(300));
        Lease b = lease(role, "holder-b", Duration.ofMillis(300));
        assertThat(a.acquireOrRenew()).map(Grant::token).contains(FencingToken.of(1));
        assertThat(b.acquireOrRenew()).isEmpty();
        await().atMost(Duration.ofSeconds(5))
                .until(() -> !a.read().orElseThrow().live());
        assertThat(b.acquireOrRenew()).map(Grant::token).contains(FencingToken.of(2));
    }

    @Test
    void guardRejectsWrongHolderWrongTokenAndExpiredLease() {
        String role = newRole();
        Lease a = lease(role, "holder-a", LONG);
        Lease impostor = lease(role, "holder-x", LONG);
        FencingToken older = a.acquireOrRenew().orElseThrow().token();
        db.expire(role);
        FencingToken token = a.acquireOrRenew().orElseThrow().token();
        assertThat(token).as("the takeover after expiry").isGreaterThan(older);

        assertThat(guardPasses(a, token)).as("holder and token").isTrue();
        assertThat(guardPasses(impostor, token)).as("wrong holder").isFalse();
        assertThat(guardPasses(a, token.next())).as("wrong token").isFalse();
        assertThat(guardPasses(a, older)).as("older token").isFalse();

        db.expire(role);
        assertThat(guardPasses(a, token)).as("expired lease").isFalse();
    }

    @Test
    void remainingIsTheHoldersTimeLeftInDatabaseTimeAndNothingOnceReleased() {
        String role = newRole();
        Lease a = lease(role, "holder-a", Duration.ofSeconds(30));
        Lease b = lease(role, "holder-b", Duration.ofSeconds(30));
        assertThat(b.remaining()).as("never acquired").isEmpty();

        FencingToken token = a.acquireOrRenew().orElseThrow().token();

        assertThat(b.remaining())
                .hasValueSatisfying(left -> assertThat(left).isBetween(Duration.ofSeconds(25), Duration.ofSeconds(30)));
        assertThat(a.release(token)).isTrue();
        assertThat(b.remaining()).as("released").isEmpty();
    }

    @Test
    void releaseEndsOnlyTheCallersLiveLease() {
        String role = newRole();
        Lease a = lease(role, "holder-a", LONG);
        Lease b = lease(role, "holder-b", LONG);
        FencingToken tokenA = a.acquireOrRenew().orElseThrow().token();

        assertThat(b.release(tokenA)).as("release by another holder").isFalse();
        assertThat(a.release(tokenA.next())).as("release with a wrong token").isFalse();
        assertThat(a.read().orElseThrow().live()).isTrue();

        assertThat(a.release(tokenA)).isTrue();
        assertThat(a.read().orElseThrow().live()).isFalse();
        assertThat(a.read().orElseThrow().token()).as("release keeps the token").isEqualTo(tokenA);

        FencingToken tokenB = b.acquireOrRenew().orElseThrow().token();
        assertThat(tokenB).isEqualTo(tokenA.next());
        OffsetDateTime expiryB = b.read().orElseThrow().expiresAt();
        assertThat(a.release(tokenA))
                .as("release by the former holder with its old token")
                .isFalse();
        assertThat(Lease.release(db.dsl(), role, "holder-a", tokenB))
                .as("former holder with the new token")
                .isFalse();
        assertThat(b.read().orElseThrow()).satisfies(s -> {
            assertThat(s.holderId()).isEqualTo("holder-b");
            assertThat(s.token()).isEqualTo(tokenB);
            assertThat(s.expiresAt()).isEqualTo(expiryB);
            assertThat(s.live()).isTrue();
        });
    }

    @Test
    void releaseNotifiesFollowers() throws Exception {
        String role = newRole();
        Lease a = lease(role, "holder-a", LONG);
        FencingToken token = a.acquireOrRenew().orElseThrow().token();
        try (Connection listener = db.database().connect();
                Statement s = listener.createStatement()) {
            s.execute("LISTEN lease_released");
            assertThat(a.acquireOrRenew()).isPresent();
            assertThat(a.release(token)).isTrue();
            PGNotification[] received = listener.unwrap(PGConnection.class).getNotifications(5_000);
            assertThat(received).extracting(PGNotification::getParameter).containsExactly(role);
        }
    }

    @Test
    void everyTakeoverIsRecordedWithItsHolder() {
        String role = newRole();
        Lease a = lease(role, "holder-a", LONG);
        Lease b = lease(role, "holder-b", LONG);
        assertThat(a.acquireOrRenew()).isPresent();
        assertThat(a.acquireOrRenew()).isPresent();
        db.expire(role);
        assertThat(b.acquireOrRenew()).isPresent();
        assertThat(b.acquireOrRenew()).isPresent();
        db.expire(role);
        assertThat(b.acquireOrRenew()).isPresent();

        // The operator's query, from the README.
        List<Record3<Long, String, OffsetDateTime>> history = db.dsl()
                .select(LEASE_TAKEOVER.FENCING_TOKEN, LEASE_TAKEOVER.HOLDER_ID, LEASE_TAKEOVER.ACQUIRED_AT)
                .from(LEASE_TAKEOVER)
                .where(LEASE_TAKEOVER.ROLE.eq(role))
                .orderBy(LEASE_TAKEOVER.FENCING_TOKEN)
                .fetch();
        assertThat(history).extracting(Record3::value1).containsExactly(1L, 2L, 3L);
        assertThat(history).extracting(Record3::value2).containsExactly("holder-a", "holder-b", "holder-b");
        assertThat(history.get(0).value3()).isBefore(history.get(1).value3());
    }

    @Test
    void theLeaseRowCannotBeDeletedAndItsTokenCannotGoBack() {
        String role = newRole();
        assertThat(lease(role, "holder-a", LONG).acquireOrRenew()).isPresent();
        db.expire(role);
        assertThat(lease(role, "holder-b", LONG).acquireOrRenew()).isPresent();

        assertThatThrownBy(() -> db.dsl()
                        .deleteFrom(LEADER_LEASE)
                        .where(LEADER_LEASE.ROLE.eq(role))
                        .execute())
                .hasMessageContaining("never deleted");
        assertThatThrownBy(() -> db.dsl()
                        .update(LEADER_LEASE)
                        .set(LEADER_LEASE.FENCING_TOKEN, 1L)
                        .where(LEADER_LEASE.ROLE.eq(role))
                        .execute())
                .hasMessageContaining("may not decrease");
        assertThatThrownBy(() -> db.dsl()
                        .deleteFrom(LEASE_TAKEOVER)
                        .where(LEASE_TAKEOVER.ROLE.eq(role))
                        .execute())
                .hasMessageContaining("append-only");
        assertThat(Lease.read(db.dsl(), role).orElseThrow().token()).isEqualTo(FencingToken.of(2));
    }

    @Test
    void shiftingTheLocalClockByHoursChangesNoLeaseDecision() {
        long hours = Duration.ofHours(7).toNanos();
        for (long shift : new long[] {0, hours, -hours, Long.MAX_VALUE / 4}) {
            String role = newRole();
            Ticker shifted = () -> System.nanoTime() + shift;
            Lease a = new Lease(db.dsl(), role, "holder-a", LONG, shifted);
            Lease b = new Lease(db.dsl(), role, "holder-b", LONG, shifted);

            Grant first = a.acquireOrRenew().orElseThrow();
            assertThat(first.token()).isEqualTo(FencingToken.of(1));
            assertThat(b.acquireOrRenew()).isEmpty();
            assertThat(a.acquireOrRenew().orElseThrow().token()).isEqualTo(FencingToken.of(1));
            assertThat(guardPasses(a, FencingToken.of(1))).isTrue();
            db.expire(role);
            assertThat(guardPasses(a, FencingToken.of(1))).isFalse();
            assertThat(b.acquireOrRenew().orElseThrow().token()).isEqualTo(FencingToken.of(2));

            // Expiry is the database's clock plus the duration, whatever the local clock says.
            OffsetDateTime dbNow =
                    db.dsl().select(DbTime.CLOCK_TIMESTAMP).fetchSingle().value1();
            assertThat(Duration.between(dbNow, first.expiresAt()).abs()).isLessThan(LONG.plusSeconds(5));
            assertThat(Duration.between(dbNow, first.expiresAt())).isGreaterThan(LONG.minusSeconds(60));
        }
    }
}
