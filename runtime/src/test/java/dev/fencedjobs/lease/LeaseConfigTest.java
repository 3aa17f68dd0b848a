package dev.fencedjobs.lease;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Settings;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;

/** The lease's settings and holder ids. */
class LeaseConfigTest {

    @Test
    void defaultsAreValid() {
        LeaseConfig lease = LeaseConfig.from(Settings.of(Map.of()));
        assertThat(lease.duration()).isEqualTo(Duration.ofSeconds(10));
        assertThat(lease.renewInterval()).isEqualTo(Duration.ofSeconds(3));
        lease.requireTimeoutsWithin(DatabaseConfig.from(Settings.of(Map.of())));
    }

    @Test
    void nonPositiveOrUnparseableDurationsAreRefused() {
        assertThatThrownBy(() -> LeaseConfig.from(Settings.of(Map.of("LEASE_DURATION", "0s"))))
                .isInstanceOf(ConfigException.class)
                .hasMessage("LEASE_DURATION: must be positive, got PT0S");
        assertThatThrownBy(() -> LeaseConfig.from(Settings.of(Map.of("RENEW_INTERVAL", "PT-2S"))))
                .hasMessage("RENEW_INTERVAL: must be positive, got PT-2S");
        assertThatThrownBy(() -> LeaseConfig.from(Settings.of(Map.of("LEASE_DURATION", "ten seconds"))))
                .hasMessage("LEASE_DURATION: must be a duration such as 500ms, 10s, 5m or PT10S, got 'ten seconds'");
        assertThatThrownBy(() -> LeaseConfig.from(Settings.of(Map.of("LEASE_DURATION", "-1s"))))
                .hasMessageStartingWith("LEASE_DURATION: must be a duration");
    }

    @Test
    void systemPropertyOverridesEnvironment() {
        Properties props = new Properties();
        props.setProperty("lease.duration", "20s");
        Settings s = new Settings(Map.of("LEASE_DURATION", "12s", "RENEW_INTERVAL", "4s"), props);
        assertThat(LeaseConfig.from(s)).isEqualTo(new LeaseConfig(Duration.ofSeconds(20), Duration.ofSeconds(4)));
    }

    @Test
    void renewIntervalNotShorterThanTheLeaseIsRefused() {
        assertThatThrownBy(() -> LeaseConfig.from(Settings.of(Map.of("LEASE_DURATION", "5s", "RENEW_INTERVAL", "5s"))))
                .isInstanceOf(ConfigException.class)
                .hasMessage("RENEW_INTERVAL: must be shorter than LEASE_DURATION (PT5S is not shorter than PT5S)");
        assertThatThrownBy(() -> LeaseConfig.from(Settings.of(Map.of("LEASE_DURATION", "5s", "RENEW_INTERVAL", "1m"))))
                .hasMessageStartingWith("RENEW_INTERVAL: must be shorter than LEASE_DURATION");
    }

    @Test
    void databaseTimeoutsMustSitInsideTheLease() {
        LeaseConfig lease = LeaseConfig.from(Settings.of(Map.of("LEASE_DURATION", "2s", "RENEW_INTERVAL", "500ms")));
        assertThatThrownBy(() -> lease.requireTimeoutsWithin(
                        DatabaseConfig.from(Settings.of(Map.of("DATABASE_STATEMENT_TIMEOUT", "2s")))))
                .hasMessage(
                        "DATABASE_STATEMENT_TIMEOUT: must be shorter than LEASE_DURATION (PT2S is not shorter than PT2S)");
        assertThatThrownBy(() -> lease.requireTimeoutsWithin(DatabaseConfig.from(
                        Settings.of(Map.of("DATABASE_STATEMENT_TIMEOUT", "1s", "DATABASE_LOCK_TIMEOUT", "3s")))))
                .hasMessageStartingWith("DATABASE_LOCK_TIMEOUT: must be shorter than LEASE_DURATION");
        assertThatThrownBy(() -> lease.requireTimeoutsWithin(DatabaseConfig.from(Settings.of(
                        Map.of("DATABASE_STATEMENT_TIMEOUT", "1s", "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT", "1m")))))
                .hasMessageStartingWith("DATABASE_IDLE_IN_TRANSACTION_TIMEOUT: must be shorter than LEASE_DURATION");
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
