package dev.fencedjobs.relay;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.RecordTrust;
import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** What the relay refuses at start-up, each naming its setting. */
class RelayConfigTest {

    private static Map<String, String> withKey(String... pairs) {
        Map<String, String> env =
                new HashMap<>(Map.of(RecordTrust.SIGNING_KEY, RecordTrust.privatePem(RecordTrust.generateKeys())));
        for (int i = 0; i < pairs.length; i += 2) {
            env.put(pairs[i], pairs[i + 1]);
        }
        return env;
    }

    @Test
    void aRenewalIntervalThatLeavesNoTimeToWorkIsRefusedAsForTheDispatcher() {
        // 3 s + 2 s is not shorter than 5 s: after a renewal the leader would stop before its next batch.
        assertThatThrownBy(() -> RelayConfig.from(Settings.of(
                        withKey("LEASE_DURATION", "5s", "RENEW_INTERVAL", "3s", "DATABASE_STATEMENT_TIMEOUT", "2s"))))
                .isInstanceOf(ConfigException.class)
                .hasMessage(
                        "RENEW_INTERVAL: plus DATABASE_STATEMENT_TIMEOUT (PT3S + PT2S) must be shorter than LEASE_DURATION (PT5S), "
                                + "or the leader would idle between renewals");
        assertThat(RelayConfig.from(Settings.of(withKey(
                                "LEASE_DURATION", "6s", "RENEW_INTERVAL", "3s", "DATABASE_STATEMENT_TIMEOUT", "2s")))
                        .lease()
                        .duration())
                .hasSeconds(6);
    }

    @Test
    void withoutASigningKeyItRefusesToStartUnlessARolloutAcceptsUnsignedRecords() {
        assertThatThrownBy(() -> RelayConfig.from(Settings.of(Map.of())))
                .isInstanceOf(ConfigException.class)
                .hasMessageStartingWith("RECORD_SIGNING_KEY: is not set (nor RECORD_SIGNING_KEY_FILE)")
                .hasMessageContaining("fenced-jobs keygen");
        assertThat(RelayConfig.from(Settings.of(Map.of(RecordTrust.SIGNATURES, "accept-unsigned")))
                        .kafka()
                        .trust()
                        .signing())
                .isNull();
        assertThat(RelayConfig.from(Settings.of(withKey())).kafka().trust().signingKeyId())
                .isPresent();
    }
}
