package dev.fencedjobs.consumer;

import dev.fencedjobs.db.ConfigException;
import dev.fencedjobs.db.Settings;
import dev.fencedjobs.runtime.KafkaSettings;
import dev.fencedjobs.runtime.ServiceConfig;
import java.time.Duration;
import java.util.Objects;

/**
 * Everything the consumer reads at start-up.
 *
 * @param service its own database (which may be the dispatcher's; null when an application lends its
 *     {@code DataSource}), ops port, shutdown timeout, migrations
 * @param kafka bootstrap servers and topic
 * @param groupId consumer group ({@code CONSUMER_GROUP}); instances in one group share the partitions
 * @param batchSize records per poll and per database transaction ({@code BATCH_SIZE})
 * @param effectMaxAttempts tries of a failing effect before its record is dead-lettered ({@code EFFECT_MAX_ATTEMPTS})
 * @param effectRetryBackoff pause between those tries ({@code EFFECT_RETRY_BACKOFF})
 * @param processedRetention how long processed job ids are kept for deduplication
 *     ({@code PROCESSED_RETENTION}); keep it at least as long as the topic's retention
 * @param membership group protocol and the timings that decide how fast a dead member's
 *     partitions move to the others
 * @param recordsRetention how long the records of what happened are kept: rejections, dead
 *     letters, late records and reuses ({@code RECORDS_RETENTION})
 * @param retries patient retries after the quick ones ({@code EFFECT_RETRY_MAX_AGE}, {@code EFFECT_RETRY_MAX_BACKOFF})
 */
public record ConsumerConfig(
        ServiceConfig service,
        KafkaSettings kafka,
        String groupId,
        int batchSize,
        int effectMaxAttempts,
        Duration effectRetryBackoff,
        Duration processedRetention,
        GroupMembership membership,
        Duration recordsRetention,
        EffectRetries retries) {

    public static final String GROUP = "CONSUMER_GROUP";
    public static final String BATCH_SIZE = "BATCH_SIZE";
    public static final String EFFECT_MAX_ATTEMPTS = "EFFECT_MAX_ATTEMPTS";
    public static final String EFFECT_RETRY_BACKOFF = "EFFECT_RETRY_BACKOFF";
    public static final String PROCESSED_RETENTION = "PROCESSED_RETENTION";
    /** Per-transaction costs dominate below about a thousand records (see the benchmark). */
    public static final int DEFAULT_BATCH_SIZE = 2000;
    /** Kafka's default topic retention ({@code retention.ms}), seven days. */
    public static final Duration DEFAULT_PROCESSED_RETENTION = Duration.ofDays(7);

    public static final String RECORDS_RETENTION = "RECORDS_RETENTION";
    /** Long enough to look into what happened after a holiday. */
    public static final Duration DEFAULT_RECORDS_RETENTION = Duration.ofDays(30);

    public static final int DEFAULT_EFFECT_MAX_ATTEMPTS = 3;
    public static final Duration DEFAULT_EFFECT_RETRY_BACKOFF = Duration.ofMillis(200);

    public ConsumerConfig {
        if (groupId == null || groupId.isBlank()) {
            throw new ConfigException(GROUP, "must not be blank");
        }
        kafka.trust().requireVerifyKeys();
        ServiceConfig.requireBatchSize(BATCH_SIZE, batchSize);
        Settings.requirePositive(EFFECT_MAX_ATTEMPTS, effectMaxAttempts);
        if (effectRetryBackoff.isNegative()) {
            throw new ConfigException(EFFECT_RETRY_BACKOFF, "must not be negative, got " + effectRetryBackoff);
        }
        Settings.requirePositive(PROCESSED_RETENTION, processedRetention);
        Objects.requireNonNull(membership, "membership");
        Settings.requirePositive(RECORDS_RETENTION, recordsRetention);
        Objects.requireNonNull(retries, "retries");
    }

    /** With the default patient retries. */
    public ConsumerConfig(
            ServiceConfig service,
            KafkaSettings kafka,
            String groupId,
            int batchSize,
            int effectMaxAttempts,
            Duration effectRetryBackoff,
            Duration processedRetention,
            GroupMembership membership,
            Duration recordsRetention) {
        this(
                service,
                kafka,
                groupId,
                batchSize,
                effectMaxAttempts,
                effectRetryBackoff,
                processedRetention,
                membership,
                recordsRetention,
                EffectRetries.DEFAULT);
    }

    /** The same with other patient retries. */
    public ConsumerConfig withRetries(EffectRetries other) {
        return new ConsumerConfig(
                service,
                kafka,
                groupId,
                batchSize,
                effectMaxAttempts,
                effectRetryBackoff,
                processedRetention,
                membership,
                recordsRetention,
                other);
    }

    /** With the default retention of rejections, dead letters, late records and reuses. */
    public ConsumerConfig(
            ServiceConfig service,
            KafkaSettings kafka,
            String groupId,
            int batchSize,
            int effectMaxAttempts,
            Duration effectRetryBackoff,
            Duration processedRetention,
            GroupMembership membership) {
        this(
                service,
                kafka,
                groupId,
                batchSize,
                effectMaxAttempts,
                effectRetryBackoff,
                processedRetention,
                membership,
                DEFAULT_RECORDS_RETENTION);
    }

    /** With the default {@link GroupMembership}. */
    public ConsumerConfig(
            ServiceConfig service,
            KafkaSettings kafka,
            String groupId,
            int batchSize,
            int effectMaxAttempts,
            Duration effectRetryBackoff,
            Duration processedRetention) {
        this(
                service,
                kafka,
                groupId,
                batchSize,
                effectMaxAttempts,
                effectRetryBackoff,
                processedRetention,
                GroupMembership.DEFAULT);
    }

    public static ConsumerConfig from(Settings settings) {
        return new ConsumerConfig(
                ServiceConfig.from(settings),
                KafkaSettings.from(settings),
                settings.string(GROUP, "fenced-jobs-consumer"),
                settings.integer(BATCH_SIZE, DEFAULT_BATCH_SIZE),
                settings.integer(EFFECT_MAX_ATTEMPTS, DEFAULT_EFFECT_MAX_ATTEMPTS),
                settings.duration(EFFECT_RETRY_BACKOFF, DEFAULT_EFFECT_RETRY_BACKOFF),
                settings.duration(PROCESSED_RETENTION, DEFAULT_PROCESSED_RETENTION),
                GroupMembership.from(settings),
                settings.duration(RECORDS_RETENTION, DEFAULT_RECORDS_RETENTION),
                EffectRetries.from(settings));
    }
}
