package dev.fencedjobs.dispatcher;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.lease.FencingToken;
import dev.fencedjobs.runtime.RunningService;
import dev.fencedjobs.testing.PostgresExtension;
import dev.fencedjobs.testing.TestDatabase;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** A dispatcher built into an application: on the application's pool and registry, with no ops endpoint. */
class EmbeddedDispatcherTest {

    @RegisterExtension
    final PostgresExtension postgres = new PostgresExtension();

    private HikariDataSource applicationPool(String initSql) {
        TestDatabase db = postgres.database();
        HikariConfig hikari = new HikariConfig();
        hikari.setJdbcUrl(db.url());
        hikari.setUsername(db.user());
        hikari.setPassword(db.password());
        hikari.setMaximumPoolSize(4);
        if (initSql != null) {
            hikari.setConnectionInitSql(initSql);
        }
        return new HikariDataSource(hikari);
    }

    @Test
    void onTheApplicationsPoolAndRegistryItCompletesJobsAndLeavesBothAsItFoundThem() throws Exception {
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        try (HikariDataSource pool = applicationPool("SET statement_timeout = 2000; SET lock_timeout = 1000; "
                + "SET idle_in_transaction_session_timeout = 2000")) {
            Dispatcher dispatcher = Dispatcher.builder()
                    .dataSource(pool)
                    .meterRegistry(registry)
                    .start();
            try {
                assertThat(dispatcher.httpPort()).isEqualTo(-1);
                await().atMost(Duration.ofSeconds(30)).until(() -> dispatcher.state() == RunningService.State.LEADING);
                try (Connection c = pool.getConnection();
                        Statement s = c.createStatement()) {
                    s.execute(
                            "INSERT INTO jobs (resource, due_at) SELECT 'r', clock_timestamp() FROM generate_series(1, 20)");
                }
                await().atMost(Duration.ofSeconds(30)).until(() -> completed(pool) == 20);
                // The counter moves once the batch's transaction has returned, just after its rows show as completed.
                await().atMost(Duration.ofSeconds(30))
                        .untilAsserted(() -> assertThat(registry.get("fencedjobs_jobs_completed")
                                        .tag("service", "dispatcher")
                                        .counter()
                                        .count())
                                .isEqualTo(20));
                assertThat(dispatcher.token()).hasValue(FencingToken.of(1));
            } finally {
                dispatcher.close();
            }
            assertThat(dispatcher.state()).isEqualTo(RunningService.State.STOPPED);
            assertThat(pool.isClosed()).isFalse();
            assertThat(completed(pool))
                    .as("the application's pool still serves it")
                    .isEqualTo(20);
            assertThat(registry.getMeters())
                    .as("a stopped dispatcher's meters are gone from the application's registry")
                    .isEmpty();
            // Every connection of the pool (4), the one the dispatcher listened on among them: none listens any more.
            java.util.List<Connection> all = new java.util.ArrayList<>();
            try {
                for (int i = 0; i < 4; i++) {
                    all.add(pool.getConnection());
                }
                for (Connection c : all) {
                    try (Statement s = c.createStatement();
                            ResultSet rs = s.executeQuery("SELECT count(*) FROM pg_listening_channels()")) {
                        rs.next();
                        assertThat(rs.getLong(1))
                                .as("channels still listened on by a connection given back to the application")
                                .isZero();
                    }
                }
            } finally {
                for (Connection c : all) {
                    c.close();
                }
            }
        }
    }

    @Test
    void aPoolWhoseSessionsHaveNoStatementTimeoutIsRefusedNamingTheSettingAndHowToSetIt() {
        try (HikariDataSource pool = applicationPool(null)) {
            assertThatThrownBy(() -> Dispatcher.builder().dataSource(pool).start())
                    .isInstanceOf(ConfigException.class)
                    .hasMessageContaining(DatabaseConfig.STATEMENT_TIMEOUT)
                    .hasMessageContaining("statement_timeout = 0 (none)")
                    .hasMessageContaining("connectionInitSql");
            assertThat(pool.isClosed()).isFalse();
        }
    }

    @Test
    void aBuilderWithNoDatabaseSaysWhatToGiveIt() {
        assertThatThrownBy(() -> Dispatcher.builder().start())
                .isInstanceOf(ConfigException.class)
                .hasMessageContaining("database(DatabaseConfig.of(url, user, password))");
    }

    private static long completed(HikariDataSource pool) throws Exception {
        try (Connection c = pool.getConnection();
                Statement s = c.createStatement();
                ResultSet rs = s.executeQuery("SELECT count(*) FROM jobs WHERE state = 'completed'")) {
            rs.next();
            return rs.getLong(1);
        }
    }
}
