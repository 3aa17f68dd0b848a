package dev.fencedjobs.consumer;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.time.Duration;
import java.util.Locale;
import java.util.Properties;

/**
 * How a consumer takes part in its group, which decides how fast a dead member's partitions move.
 *
 * <p>With the {@code classic} protocol (the default) a member that stops heart-beating (SIGKILL, a
 * partition) keeps its partitions until {@code sessionTimeout} has passed; a member that stops
 * gracefully leaves at once. With {@code consumer} (KIP-848, brokers 4.0 and later) the broker
 * decides both timings ({@code group.consumer.session.timeout.ms}, 45 s and at least 45 s by
 * default), so the two durations here do not apply and may not be set.
 *
 * @param protocol {@code CONSUMER_GROUP_PROTOCOL}: {@code classic} or {@code consumer}
 * @param sessionTimeout {@code CONSUMER_SESSION_TIMEOUT}, classic only; the broker must allow it
 *     ({@code group.min.session.timeout.ms}, 6 s by default)
 * @param heartbeatInterval {@code CONSUMER_HEARTBEAT_INTERVAL}, classic only; shorter than the
 *     session timeout (a third of it or less is Kafka's advice)
 */
public record GroupMembership(String protocol, Duration sessionTimeout, Duration heartbeatInterval) {

    public static final String PROTOCOL = "CONSUMER_GROUP_PROTOCOL";
    public static final String SESSION_TIMEOUT = "CONSUMER_SESSION_TIMEOUT";
    public static final String HEARTBEAT_INTERVAL = "CONSUMER_HEARTBEAT_INTERVAL";
    public static final String CLASSIC = "classic";
    public static final String CONSUMER = "consumer";
    /** As long as the dispatcher's default lease: a killed consumer is replaced about as fast as a killed leader. */
    public static final Duration DEFAULT_SESSION_TIMEOUT = Duration.ofSeconds(10);
    /**
     * A member learns of a rebalance (another left or died) at its next heartbeat, so this bounds
     * how long a graceful stop keeps partitions idle; Kafka's default of 3 s measured 2.8 to 3.0 s.
     */
    public static final Duration DEFAULT_HEARTBEAT_INTERVAL = Duration.ofSeconds(1);

    public static final GroupMembership DEFAULT =
            new GroupMembership(CLASSIC, DEFAULT_SESSION_TIMEOUT, DEFAULT_HEARTBEAT_INTERVAL);

    public GroupMembership {
        if (!CLASSIC.equals(protocol) && !CONSUMER.equals(protocol)) {
            throw new ConfigException(PROTOCOL, "must be classic or consumer, got '" + protocol + "'");
        }
        Settings.requirePositive(SESSION_TIMEOUT, sessionTimeout);
        Settings.requirePositive(HEARTBEAT_INTERVAL, heartbeatInterval);
        if (heartbeatInterval.compareTo(sessionTimeout) >= 0) {
            throw new ConfigException(
                    HEARTBEAT_INTERVAL,
                    "must be shorter than " + SESSION_TIMEOUT + " (" + heartbeatInterval + " is not shorter than "
                            + sessionTimeout + ")");
        }
    }

    public static GroupMembership from(Settings settings) {
        String protocol = settings.string(PROTOCOL, CLASSIC).toLowerCase(Locale.ROOT);
        if (CONSUMER.equals(protocol)) {
            for (String name : new String[] {SESSION_TIMEOUT, HEARTBEAT_INTERVAL}) {
                if (settings.get(name).isPresent()) {
                    throw new ConfigException(
                            name,
                            "does not apply with " + PROTOCOL + "=consumer: the broker sets it "
                                    + "(group.consumer.session.timeout.ms, group.consumer.heartbeat.interval.ms)");
                }
            }
        }
        return new GroupMembership(
                protocol,
                settings.duration(SESSION_TIMEOUT, DEFAULT_SESSION_TIMEOUT),
                settings.duration(HEARTBEAT_INTERVAL, DEFAULT_HEARTBEAT_INTERVAL));
    }

    /** The consumer properties this stands for. */
    void applyTo(Properties p) {
        p.put("group.protocol", protocol);
        if (CLASSIC.equals(protocol)) {
            p.put("session.timeout.ms", (int) sessionTimeout.toMillis());
            p.put("heartbeat.interval.ms", (int) heartbeatInterval.toMillis());
        }
    }
}
