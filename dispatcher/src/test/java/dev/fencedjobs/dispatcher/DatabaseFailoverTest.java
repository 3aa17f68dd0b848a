package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.testing.StreamingPostgres;
import java.time.Duration;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/**
 * The primary is SIGKILLed and its synchronous standby promoted under two replicas on a
 * multi-host URL: they find the new primary themselves, the next token is the first of the new
 * epoch, and the LISTEN connection follows (an idle leader wakes for nothing else).
 */
class DatabaseFailoverTest {

    private static final long EPOCH_2 = (1L << 32) + 1;

    @Test
    void replicasFollowThePromotedStandbyWithATokenOfTheNewEpochAndItsNotifications() throws Exception {
        try (StreamingPostgres pg = new StreamingPostgres(StreamingPostgres.Replication.SYNCHRONOUS)) {
            pg.executeOnPrimary("postgres", "CREATE DATABASE fj");
            try (DispatcherFixture fixture = new DispatcherFixture(pg.url("fj"), pg.user(), pg.password())) {
                fixture.start();
                fixture.start();
                fixture.dsl()
                        .execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, 500)");
                await().atMost(Duration.ofSeconds(30)).until(() -> fixture.pending() == 0);
                assertThat(fixture.currentToken()).isLessThan(EPOCH_2);

                pg.failover();

                // The fixture's own pool reconnects too: statements may fail until it has.
                await().atMost(Duration.ofSeconds(30))
                        .ignoreExceptions()
                        .until(() -> idleLeader(fixture).isPresent() && fixture.pending() == 0);
                assertThat(fixture.currentToken())
                        .as("the first token after the promotion")
                        .isEqualTo(EPOCH_2);
                // The leader is idle and waits for a notification only; these jobs wake it through the new primary.
                fixture.dsl()
                        .execute("INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, 300)");
                await().atMost(Duration.ofSeconds(30)).ignoreExceptions().until(() -> fixture.pending() == 0);
                fixture.assertExactlyOnceWithOutbox(800);
                assertThat(fixture.dsl()
                                .fetchCount(fixture.dsl().selectFrom("outbox").where("fencing_token = " + EPOCH_2)))
                        .isEqualTo(300);
            }
        }
    }

    /** A leader holding a token of the new epoch whose LISTEN connection is up again. */
    private static Optional<Dispatcher> idleLeader(DispatcherFixture fixture) {
        return fixture.leader()
                .filter(d -> Boolean.TRUE.equals(d.status().get("listening"))
                        && d.status().get("token") instanceof Long t
                        && t >= EPOCH_2);
    }
}
