package dev.fencedjobs.lease;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.DatabaseConfig;
import dev.fencedjobs.db.Settings;
import java.time.Duration;

/**
 * Lease timing for one role.
 *
 * @param duration how long an acquisition or renewal holds the role ({@code LEASE_DURATION}); a
 *     killed leader is replaced after at most this long
 * @param renewInterval how often the holder renews and a follower tries to acquire
 *     ({@code RENEW_INTERVAL}); must be shorter than the duration
 * @param fastTakeover the fast path ({@code LEASE_FAST_TAKEOVER}, on by default): the holder keeps a
 *     sign of life on a session of its own, and a follower takes over at once when that session
 *     ends instead of at expiry; off, a replica shows no sign of life and waits for none
 */
public record LeaseConfig(Duration duration, Duration renewInterval, boolean fastTakeover) {

    public static final String DURATION = "LEASE_DURATION";
    public static final String RENEW_INTERVAL = "RENEW_INTERVAL";
    public static final String FAST_TAKEOVER = "LEASE_FAST_TAKEOVER";

    public static final Duration DEFAULT_DURATION = Duration.ofSeconds(10);
    public static final Duration DEFAULT_RENEW_INTERVAL = Duration.ofSeconds(3);

    public LeaseConfig {
        Settings.requirePositive(DURATION, duration);
        Settings.requirePositive(RENEW_INTERVAL, renewInterval);
        if (renewInterval.compareTo(duration) >= 0) {
            throw new ConfigException(
                    RENEW_INTERVAL,
                    "must be shorter than " + DURATION + " (" + renewInterval + " is not shorter than " + duration
                            + ")");
        }
        if (duration.toMillis() < 100) {
            throw new ConfigException(DURATION, "must be at least 100ms, got " + duration);
        }
    }

    /** With the fast path on. */
    public LeaseConfig(Duration duration, Duration renewInterval) {
        this(duration, renewInterval, true);
    }

    public static LeaseConfig from(Settings settings) {
        return new LeaseConfig(
                settings.duration(DURATION, DEFAULT_DURATION),
                settings.duration(RENEW_INTERVAL, DEFAULT_RENEW_INTERVAL),
                settings.bool(FAST_TAKEOVER, true));
    }

    /** The same timing with the fast path on or off. */
    public LeaseConfig withFastTakeover(boolean on) {
        return new LeaseConfig(duration, renewInterval, on);
    }

    /**
     * The database timeouts must end a stuck statement or transaction well before the lease would
     * expire, or a blocked leader could hold the lease row lock past its own lease.
     */
    public void requireTimeoutsWithin(DatabaseConfig database) {
        requireShorter(DatabaseConfig.STATEMENT_TIMEOUT, database.statementTimeout());
        requireShorter(DatabaseConfig.LOCK_TIMEOUT, database.lockTimeout());
        requireShorter(DatabaseConfig.IDLE_IN_TRANSACTION_TIMEOUT, database.idleInTransactionTimeout());
    }

    /**
     * A leader stops starting work one statement timeout before its local deadline; after a renewal
     * it must still have time to work before the next one. The dispatcher and the relay both check it.
     */
    public void requireWorkBetweenRenewals(DatabaseConfig database) {
        if (renewInterval.plus(database.statementTimeout()).compareTo(duration) >= 0) {
            throw new ConfigException(
                    RENEW_INTERVAL,
                    "plus " + DatabaseConfig.STATEMENT_TIMEOUT + " (" + renewInterval + " + "
                            + database.statementTimeout() + ") must be shorter than " + DURATION + " (" + duration
                            + "), or the leader would idle between renewals");
        }
    }

    private void requireShorter(String setting, Duration timeout) {
        if (timeout.compareTo(duration) >= 0) {
            throw new ConfigException(
                    setting,
                    "must be shorter than " + DURATION + " (" + timeout + " is not shorter than " + duration + ")");
        }
    }
}
