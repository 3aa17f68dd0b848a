package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_DEAD_LETTER;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_LATE;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_PROCESSED_REISSUED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REUSED;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;

import java.time.OffsetDateTime;
import org.jooq.DSLContext;
import org.jooq.Field;
import org.jooq.impl.DSL;
import org.jooq.types.DayToSecond;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Retention, on the {@link Purger}'s thread beside the loop's, busy or idle: a chunk of
 * processed job ids past {@code PROCESSED_RETENTION}, again soon while chunks come back full (so
 * it keeps up under any load), and the records of what happened past {@code
 * RECORDS_RETENTION}, on a {@link PurgeSchedule} for the shorter of the two retentions.
 */
final class ConsumerRetention {

    private static final Logger log = LoggerFactory.getLogger(FencedConsumer.class);

    private final DSLContext dsl;
    private final ConsumerConfig config;
    private final int chunk;

    ConsumerRetention(DSLContext dsl, ConsumerConfig config, int chunk) {
        this.dsl = dsl;
        this.config = config;
        this.chunk = chunk;
    }

    /** One chunk of processed ids and all records past their retentions; returns the processed ids deleted (what paces the schedule). */
    int purgeOnce() {
        Field<OffsetDateTime> processedCutoff =
                CLOCK_TIMESTAMP.minus(DSL.val(DayToSecond.valueOf(config.processedRetention())));
        int processed = dsl.deleteFrom(CONSUMER_PROCESSED)
                .where(CONSUMER_PROCESSED.JOB_ID.in(dsl.select(CONSUMER_PROCESSED.JOB_ID)
                        .from(CONSUMER_PROCESSED)
                        .where(CONSUMER_PROCESSED.PROCESSED_AT.lt(processedCutoff))
                        .limit(chunk)))
                .execute();
        int records = dsl.deleteFrom(CONSUMER_PROCESSED_REISSUED)
                .where(CONSUMER_PROCESSED_REISSUED.PROCESSED_AT.lt(processedCutoff))
                .execute();
        Field<OffsetDateTime> recordsCutoff =
                CLOCK_TIMESTAMP.minus(DSL.val(DayToSecond.valueOf(config.recordsRetention())));
        records += dsl.deleteFrom(CONSUMER_REJECTED)
                .where(CONSUMER_REJECTED.REJECTED_AT.lt(recordsCutoff))
                .execute();
        // A dead letter nobody acted on stays until somebody does.
        records += dsl.deleteFrom(CONSUMER_DEAD_LETTER)
                .where(CONSUMER_DEAD_LETTER.STATUS.in("replayed", "discarded"))
                .and(CONSUMER_DEAD_LETTER.STATUS_AT.lt(recordsCutoff))
                .execute();
        records += dsl.deleteFrom(CONSUMER_LATE)
                .where(CONSUMER_LATE.SEEN_AT.lt(recordsCutoff))
                .execute();
        records += dsl.deleteFrom(CONSUMER_REUSED)
                .where(CONSUMER_REUSED.SEEN_AT.lt(recordsCutoff))
                .execute();
        if (processed + records > 0) {
            log.debug(
                    "Purged {} processed job ids older than {} and {} records older than {}",
                    processed,
                    config.processedRetention(),
                    records,
                    config.recordsRetention());
        }
        return processed;
    }
}
