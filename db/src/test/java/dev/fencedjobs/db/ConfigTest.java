package dev.fencedjobs.db;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;

class ConfigTest {

    private static Settings settings(String... pairs) {
        Map<String, String> env = new HashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            env.put(pairs[i], pairs[i + 1]);
        }
        return Settings.of(env);
    }

    @Test
    void defaultsAreValid() {
        DatabaseConfig db = DatabaseConfig.from(settings());
        LeaseConfig lease = LeaseConfig.from(settings());
        assertThat(db.url()).isEqualTo(DatabaseConfig.DEFAULT_URL);
        assertThat(lease.duration()).isEqualTo(Duration.ofSeconds(10));
        assertThat(lease.renewInterval()).isEqualTo(Duration.ofSeconds(3));
        lease.requireTimeoutsWithin(db);
    }

    @Test
    void systemPropertyOverridesEnvironment() {
        Properties props = new Properties();
        props.setProperty("lease.duration", "20s");
        Settings s = new Settings(Map.of("LEASE_DURATION", "12s", "RENEW_INTERVAL", "4s"), props);
        assertThat(LeaseConfig.from(s)).isEqualTo(new LeaseConfig(Duration.ofSeconds(20), Duration.ofSeconds(4)));
    }

    @Test
    void durationsAcceptUnitsAndIso8601() {
        assertThat(Settings.parseDuration("X", "250ms")).isEqualTo(Duration.ofMillis(250));
        assertThat(Settings.parseDuration("X", "10s")).isEqualTo(Duration.ofSeconds(10));
        assertThat(Settings.parseDuration("X", "5m")).isEqualTo(Duration.ofMinutes(5));
        assertThat(Settings.parseDuration("X", "1h")).isEqualTo(Duration.ofHours(1));
        assertThat(Settings.parseDuration("X", "PT1.5S")).isEqualTo(Duration.ofMillis(1500));
    }

    @Test
    void renewIntervalNotShorterThanTheLeaseIsRefused() {
        assertThatThrownBy(() -> LeaseConfig.from(settings("LEASE_DURATION", "5s", "RENEW_INTERVAL", "5s")))
                .isInstanceOf(ConfigException.class)
                .hasMessage("RENEW_INTERVAL: must be shorter than LEASE_DURATION (PT5S is not shorter than PT5S)");
        assertThatThrownBy(() -> LeaseConfig.from(settings("LEASE_DURATION", "5s", "RENEW_INTERVAL", "1m")))
                .hasMessageStartingWith("RENEW_INTERVAL: must be shorter than LEASE_DURATION");
    }

    @Test
    void nonPositiveDurationsAreRefused() {
        assertThatThrownBy(() -> LeaseConfig.from(settings("LEASE_DURATION", "0s")))
                .isInstanceOf(ConfigException.class).hasMessage("LEASE_DURATION: must be positive, got PT0S");
        assertThatThrownBy(() -> LeaseConfig.from(settings("RENEW_INTERVAL", "PT-2S")))
                .hasMessage("RENEW_INTERVAL: must be positive, got PT-2S");
        assertThatThrownBy(() -> DatabaseConfig.from(settings("DATABASE_STATEMENT_TIMEOUT", "0ms")))
                .hasMessage("DATABASE_STATEMENT_TIMEOUT: must be positive, got PT0S");
    }

    @Test
    void unparseableValuesNameTheSetting() {
        assertThatThrownBy(() -> LeaseConfig.from(settings("LEASE_DURATION", "ten seconds")))
                .hasMessage("LEASE_DURATION: must be a duration such as 500ms, 10s, 5m or PT10S, got 'ten seconds'");
        assertThatThrownBy(() -> LeaseConfig.from(settings("LEASE_DURATION", "-1s")))
                .hasMessageStartingWith("LEASE_DURATION: must be a duration");
        assertThatThrownBy(() -> DatabaseConfig.from(settings("DATABASE_POOL_SIZE", "lots")))
                .hasMessage("DATABASE_POOL_SIZE: must be a whole number, got 'lots'");
        assertThatThrownBy(() -> DatabaseConfig.from(settings("DATABASE_POOL_SIZE", "0")))
                .hasMessage("DATABASE_POOL_SIZE: must be positive, got 0");
    }

    @Test
    void unparseableUrlIsRefusedWithoutEchoingSecrets() {
        assertThatThrownBy(() -> DatabaseConfig.from(settings("DATABASE_URL", "postgres://db:5432/x")))
                .isInstanceOf(ConfigException.class)
                .hasMessageStartingWith("DATABASE_URL: must be a PostgreSQL JDBC URL");
        assertThatThrownBy(() -> DatabaseConfig.from(settings("DATABASE_URL", "jdbc:postgresql://db:notaport/x?password=hunter2")))
                .hasMessageStartingWith("DATABASE_URL: is not a JDBC URL the PostgreSQL driver can parse")
                .hasMessageNotContaining("hunter2");
    }

    @Test
    void credentialsInTheUrlAreRefusedBecauseTheyWouldOverrideTheSettings() {
        assertThatThrownBy(() -> DatabaseConfig.from(settings("DATABASE_URL", "jdbc:postgresql://db:5432/jobs?user=admin")))
                .hasMessage("DATABASE_URL: must not carry user or password parameters; set DATABASE_USER and DATABASE_PASSWORD instead "
                        + "(got 'jdbc:postgresql://db:5432/jobs?…')");
        assertThatThrownBy(() -> DatabaseConfig.from(settings("DATABASE_URL", "jdbc:postgresql://db/jobs?ssl=true&password=hunter2")))
                .hasMessageStartingWith("DATABASE_URL: must not carry user or password").hasMessageNotContaining("hunter2");
        assertThat(DatabaseConfig.from(settings("DATABASE_URL", "jdbc:postgresql://db:5432/jobs?ssl=true")).url())
                .isEqualTo("jdbc:postgresql://db:5432/jobs?ssl=true");
    }

    @Test
    void databaseTimeoutsMustSitInsideTheLease() {
        LeaseConfig lease = LeaseConfig.from(settings("LEASE_DURATION", "2s", "RENEW_INTERVAL", "500ms"));
        assertThatThrownBy(() -> lease.requireTimeoutsWithin(DatabaseConfig.from(settings("DATABASE_STATEMENT_TIMEOUT", "2s"))))
                .hasMessage("DATABASE_STATEMENT_TIMEOUT: must be shorter than LEASE_DURATION (PT2S is not shorter than PT2S)");
        assertThatThrownBy(() -> lease.requireTimeoutsWithin(DatabaseConfig.from(settings(
                        "DATABASE_STATEMENT_TIMEOUT", "1s", "DATABASE_LOCK_TIMEOUT", "3s"))))
                .hasMessageStartingWith("DATABASE_LOCK_TIMEOUT: must be shorter than LEASE_DURATION");
        assertThatThrownBy(() -> lease.requireTimeoutsWithin(DatabaseConfig.from(settings(
                        "DATABASE_STATEMENT_TIMEOUT", "1s", "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT", "1m"))))
                .hasMessageStartingWith("DATABASE_IDLE_IN_TRANSACTION_TIMEOUT: must be shorter than LEASE_DURATION");
    }

    @Test
    void passwordsStayOutOfLogs() {
        DatabaseConfig db = DatabaseConfig.from(settings(
                "DATABASE_URL", "jdbc:postgresql://db:5432/jobs?sslpassword=hunter2", "DATABASE_PASSWORD", "s3cret"));
        assertThat(db.toString()).doesNotContain("hunter2").doesNotContain("s3cret").contains("jdbc:postgresql://db:5432/jobs");
        assertThat(db.safeUrl()).isEqualTo("jdbc:postgresql://db:5432/jobs?…");
    }

    @Test
    void holderIdsAreReadableAndUniquePerStart() {
        String a = HolderId.generate();
        String b = HolderId.generate();
        assertThat(a).matches("[a-z0-9.-]+-" + ProcessHandle.current().pid() + "-[a-z0-9]{6}");
        assertThat(a).isNotEqualTo(b);
        assertThat(HolderId.pid(a)).isEqualTo(ProcessHandle.current().pid());
        assertThat(HolderId.pid("worker-3-48113-k2v9q1")).isEqualTo(48113);
        assertThat(HolderId.pid("me")).isEqualTo(-1);
        assertThat(HolderId.pid("a-b-c")).isEqualTo(-1);
    }
}
