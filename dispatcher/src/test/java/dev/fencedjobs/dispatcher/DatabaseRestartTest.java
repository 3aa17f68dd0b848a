package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.testing.RestartablePostgres;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** The database stops mid-run and starts again on the same data directory. */
class DatabaseRestartTest {

    @Test
    void replicasRecoverOnTheirOwnAndNoJobIsLostOrCompletedTwice() throws Exception {
        try (RestartablePostgres pg = new RestartablePostgres();
                DispatcherFixture fixture = new DispatcherFixture(pg.url(), pg.user(), pg.password())) {
            Dispatcher a = fixture.start();
            Dispatcher b = fixture.start();
            await().atMost(Duration.ofSeconds(10)).until(() -> fixture.leader().isPresent());

            // A producer inserts jobs the whole time; it counts only the inserts that committed.
            AtomicBoolean producing = new AtomicBoolean(true);
            AtomicInteger committed = new AtomicInteger();
            Thread producer = new Thread(
                    () -> {
                        while (producing.get()) {
                            try (Connection c = DriverManager.getConnection(pg.url(), pg.user(), pg.password());
                                    Statement s = c.createStatement()) {
                                while (producing.get()) {
                                    committed.addAndGet(
                                            s.executeUpdate(
                                                    "INSERT INTO jobs (due_at) SELECT clock_timestamp() FROM generate_series(1, 50)"));
                                    Thread.sleep(10);
                                }
                            } catch (SQLException e) {
                                DispatcherTest.sleep(100); // the database is down: try again
                            } catch (InterruptedException e) {
                                return;
                            }
                        }
                    },
                    "producer");
            producer.start();
            await().atMost(Duration.ofSeconds(10)).until(() -> committed.get() > 2000);

            pg.stop();
            await().atMost(Duration.ofSeconds(10)).until(() -> !a.ready() && !b.ready());
            assertThat(fixture.leader())
                    .as("no leader work while the database is away")
                    .isEmpty();
            DispatcherTest.sleep(1000);
            pg.start();

            await().atMost(Duration.ofSeconds(20))
                    .until(() -> a.ready() && b.ready() && fixture.leader().isPresent());
            int before = committed.get();
            await().atMost(Duration.ofSeconds(10)).until(() -> committed.get() > before + 2000);
            producing.set(false);
            producer.join();

            await().atMost(Duration.ofSeconds(30)).until(() -> fixture.pending() == 0);
            fixture.assertExactlyOnceWithOutbox(committed.get());
            assertThat(fixture.leader().orElseThrow().state()).isEqualTo(RunningService.State.LEADING);
            // Leader work resumed only through a new acquisition: follower to leader twice in all.
            // (The token stays the same if the holder renewed before its lease ran out.)
            assertThat(((Number) a.status().get("acquisitions")).longValue()
                            + ((Number) b.status().get("acquisitions")).longValue())
                    .isGreaterThanOrEqualTo(2);
        }
    }
}
