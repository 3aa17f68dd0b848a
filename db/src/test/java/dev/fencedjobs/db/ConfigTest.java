package dev.fencedjobs.db;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
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
        assertThat(db.url()).isEqualTo(DatabaseConfig.DEFAULT_URL);
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
    void nonPositiveDurationsAreRefused() {
        assertThatThrownBy(() -> DatabaseConfig.from(settings("DATABASE_STATEMENT_TIMEOUT", "0ms")))
                .isInstanceOf(ConfigException.class)
                .hasMessage("DATABASE_STATEMENT_TIMEOUT: must be positive, got PT0S");
    }

    @Test
    void unparseableValuesNameTheSetting() {
        assertThatThrownBy(() -> Settings.parseDuration("LEASE_DURATION", "ten seconds"))
                .hasMessage("LEASE_DURATION: must be a duration such as 500ms, 10s, 5m or PT10S, got 'ten seconds'");
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
        assertThatThrownBy(() -> DatabaseConfig.from(
                        settings("DATABASE_URL", "jdbc:postgresql://db:notaport/x?password=hunter2")))
                .hasMessageStartingWith("DATABASE_URL: is not a JDBC URL the PostgreSQL driver can parse")
                .hasMessageNotContaining("hunter2");
    }

    @Test
    void credentialsInTheUrlAreRefusedBecauseTheyWouldOverrideTheSettings() {
        assertThatThrownBy(() ->
                        DatabaseConfig.from(settings("DATABASE_URL", "jdbc:postgresql://db:5432/jobs?user=admin")))
                .hasMessage(
                        "DATABASE_URL: must not carry user or password parameters; set DATABASE_USER and DATABASE_PASSWORD instead "
                                + "(got 'jdbc:postgresql://db:5432/jobs?…')");
        assertThatThrownBy(() -> DatabaseConfig.from(
                        settings("DATABASE_URL", "jdbc:postgresql://db/jobs?ssl=true&password=hunter2")))
                .hasMessageStartingWith("DATABASE_URL: must not carry user or password")
                .hasMessageNotContaining("hunter2");
        assertThat(DatabaseConfig.from(settings("DATABASE_URL", "jdbc:postgresql://db:5432/jobs?ssl=true"))
                        .url())
                .isEqualTo("jdbc:postgresql://db:5432/jobs?ssl=true");
    }

    @Test
    void passwordsStayOutOfLogs() {
        DatabaseConfig db = DatabaseConfig.from(settings(
                "DATABASE_URL", "jdbc:postgresql://db:5432/jobs?sslpassword=hunter2", "DATABASE_PASSWORD", "s3cret"));
        assertThat(db.toString())
                .doesNotContain("hunter2")
                .doesNotContain("s3cret")
                .contains("jdbc:postgresql://db:5432/jobs");
        assertThat(db.safeUrl()).isEqualTo("jdbc:postgresql://db:5432/jobs?…");
    }
}
