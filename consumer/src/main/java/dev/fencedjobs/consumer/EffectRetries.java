package dev.fencedjobs.consumer;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import java.time.Duration;

/**
 * Patient retries of an effect that keeps failing, after the quick ones ({@code EFFECT_MAX_ATTEMPTS},
 * {@code EFFECT_RETRY_BACKOFF} apart): the record waits in {@code consumer_waiting}, its resource's
 * later records behind it, and is tried again after {@code base * 2^n}, at most {@code maxBackoff},
 * each wait drawn at random between half of it and all of it (jitter, so that many waiting resources
 * do not retry in step), until it succeeds or it first failed longer than {@code maxAge} ago; then it
 * is dead-lettered and its resource moves on.
 *
 * @param maxAge {@code EFFECT_RETRY_MAX_AGE}; {@code 0} turns patient retries off (dead-letter after the quick tries)
 * @param maxBackoff {@code EFFECT_RETRY_MAX_BACKOFF}
 */
public record EffectRetries(Duration maxAge, Duration maxBackoff) {

    public static final String MAX_AGE = "EFFECT_RETRY_MAX_AGE";
    public static final String MAX_BACKOFF = "EFFECT_RETRY_MAX_BACKOFF";
    public static final EffectRetries DEFAULT = new EffectRetries(Duration.ofHours(24), Duration.ofMinutes(5));
    public static final EffectRetries OFF = new EffectRetries(Duration.ZERO, Duration.ofMinutes(5));
    /** The first patient wait when the quick tries' back-off is 0. */
    static final Duration MIN_BASE = Duration.ofMillis(100);

    public EffectRetries {
        if (maxAge.isNegative()) {
            throw new ConfigException(MAX_AGE, "must not be negative (0 turns patient retries off), got " + maxAge);
        }
        Settings.requirePositive(MAX_BACKOFF, maxBackoff);
    }

    public static EffectRetries from(Settings settings) {
        return new EffectRetries(
                settings.duration(MAX_AGE, DEFAULT.maxAge()), settings.duration(MAX_BACKOFF, DEFAULT.maxBackoff()));
    }

    public boolean enabled() {
        return !maxAge.isZero();
    }

    /** The wait before try {@code attempts + 1}, for a uniform {@code random} in [0, 1). */
    Duration backoff(Duration base, int attempts, double random) {
        long first = Math.max(base.toMillis(), MIN_BASE.toMillis());
        long exp = attempts >= 40 ? Long.MAX_VALUE : first << Math.min(attempts, 40);
        long capped = exp <= 0 || exp > maxBackoff.toMillis() ? maxBackoff.toMillis() : exp;
        return Duration.ofMillis((long) (capped * (0.5 + 0.5 * random)));
    }
}
