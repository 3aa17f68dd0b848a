package dev.fencedjobs.consumer;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;

class GroupMembershipTest {

    @Test
    void theClassicProtocolTakesTheSessionTimeoutAndHeartbeatFromTheSettings() {
        GroupMembership m = GroupMembership.from(
                Settings.of(Map.of("CONSUMER_SESSION_TIMEOUT", "6s", "CONSUMER_HEARTBEAT_INTERVAL", "2s")));
        assertThat(m).isEqualTo(new GroupMembership("classic", Duration.ofSeconds(6), Duration.ofSeconds(2)));
        Properties p = new Properties();
        m.applyTo(p);
        assertThat(p)
                .containsEntry("group.protocol", "classic")
                .containsEntry("session.timeout.ms", 6000)
                .containsEntry("heartbeat.interval.ms", 2000);
        assertThat(GroupMembership.from(Settings.of(Map.of()))).isEqualTo(GroupMembership.DEFAULT);
    }

    @Test
    void theConsumerProtocolLeavesTheTimingsToTheBrokerAndRefusesThem() {
        Properties p = new Properties();
        GroupMembership.from(Settings.of(Map.of("CONSUMER_GROUP_PROTOCOL", "consumer")))
                .applyTo(p);
        assertThat(p).containsOnlyKeys("group.protocol").containsEntry("group.protocol", "consumer");
        assertThatThrownBy(() -> GroupMembership.from(
                        Settings.of(Map.of("CONSUMER_GROUP_PROTOCOL", "consumer", "CONSUMER_SESSION_TIMEOUT", "10s"))))
                .isInstanceOf(ConfigException.class)
                .hasMessageStartingWith(
                        "CONSUMER_SESSION_TIMEOUT: does not apply with CONSUMER_GROUP_PROTOCOL=consumer");
    }

    @Test
    void invalidTimingsAreRefusedWithTheirNames() {
        assertThatThrownBy(() -> GroupMembership.from(Settings.of(Map.of("CONSUMER_HEARTBEAT_INTERVAL", "10s"))))
                .hasMessage(
                        "CONSUMER_HEARTBEAT_INTERVAL: must be shorter than CONSUMER_SESSION_TIMEOUT (PT10S is not shorter than PT10S)");
        assertThatThrownBy(() -> GroupMembership.from(Settings.of(Map.of("CONSUMER_GROUP_PROTOCOL", "eager"))))
                .hasMessage("CONSUMER_GROUP_PROTOCOL: must be classic or consumer, got 'eager'");
    }
}
