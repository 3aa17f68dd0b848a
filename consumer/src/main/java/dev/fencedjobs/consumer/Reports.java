package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_LATE;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REJECTED;
import static dev.fencedjobs.consumer.jooq.Tables.CONSUMER_REUSED;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;

import dev.fencedjobs.consumer.Decision.Reuse;
import dev.fencedjobs.consumer.FenceDecisions.Tenure;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.jooq.DSLContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What a batch reports besides its effects, each in a table of its own with the record's topic,
 * partition and offset: records rejected by the fence ({@code consumer_rejected}), late records
 * ({@code consumer_late}, a WARN each) and reuses of a job id or a token ({@code consumer_reused},
 * an ERROR each).
 */
final class Reports {

    /** The batch's logger, as before these reports had a class of their own: alerts and log filters name it. */
    private static final Logger log = LoggerFactory.getLogger(BatchProcessor.class);

    /** Stale records: not applied, each recorded with the highest token it was below. */
    static void rejected(DSLContext tx, List<Decision> rejected) {
        for (Decision d : rejected) {
            ConsumerRecord<String, byte[]> r = d.record();
            Job job = d.job();
            tx.insertInto(CONSUMER_REJECTED)
                    .set(CONSUMER_REJECTED.JOB_ID, job.jobId())
                    .set(CONSUMER_REJECTED.RESOURCE, job.resource())
                    .set(CONSUMER_REJECTED.FENCING_TOKEN, job.fencingToken().value())
                    .set(
                            CONSUMER_REJECTED.HIGHEST_TOKEN,
                            d.before().highestToken().value())
                    .set(CONSUMER_REJECTED.TOPIC, r.topic())
                    .set(CONSUMER_REJECTED.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_REJECTED.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_REJECTED.REJECTED_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    /**
     * Late records: applied, and each one recorded with what had been applied before it. They are
     * not expected (the relay keeps commit order per resource), so each is a WARN.
     */
    static void late(DSLContext tx, List<Decision> late) {
        for (Decision d : late) {
            ConsumerRecord<String, byte[]> r = d.record();
            Job job = d.job();
            log.warn(
                    "Late record applied: job {} of resource {} (outbox id {}, token {}) arrived after outbox id {} (highest token {}), "
                            + "against commit order; {}-{}@{}",
                    job.jobId(),
                    job.resource(),
                    job.outboxId(),
                    job.fencingToken(),
                    d.before().highestOutboxId(),
                    d.before().highestToken(),
                    r.topic(),
                    r.partition(),
                    r.offset());
            tx.insertInto(CONSUMER_LATE)
                    .set(CONSUMER_LATE.JOB_ID, job.jobId())
                    .set(CONSUMER_LATE.RESOURCE, job.resource())
                    .set(CONSUMER_LATE.OUTBOX_ID, job.outboxId())
                    .set(CONSUMER_LATE.FENCING_TOKEN, job.fencingToken().value())
                    .set(CONSUMER_LATE.HIGHEST_OUTBOX_ID, d.before().highestOutboxId())
                    .set(CONSUMER_LATE.HIGHEST_TOKEN, d.before().highestToken().value())
                    .set(CONSUMER_LATE.TOPIC, r.topic())
                    .set(CONSUMER_LATE.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_LATE.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_LATE.SEEN_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    /**
     * Reuses: each one logged at ERROR and recorded. They are what a database rolled back by a
     * failover leaves visible; the record itself is applied.
     */
    static void reused(DSLContext tx, List<Reuse> reused) {
        for (Reuse u : reused) {
            ConsumerRecord<String, byte[]> r = u.decision().record();
            Job job = u.decision().job();
            Tenure tenure = u.decision().candidate().tenure();
            if (u.kind().equals("job_id")) {
                log.error(
                        "Job id {} reused: job created at {} (resource {}, token {}) arrived after {} had been processed. The database "
                                + "that completed it handed the id out again, as a standby promoted after missing commits does; applied as a "
                                + "new job; {}-{}@{}",
                        job.jobId(),
                        job.createdAt(),
                        job.resource(),
                        job.fencingToken(),
                        u.previous(),
                        r.topic(),
                        r.partition(),
                        r.offset());
            } else {
                log.error(
                        "Fencing token {} reused on resource {}: job {} comes from {}, but the token had been accepted from {}. The lease "
                                + "was issued twice, as on a database rolled back by a failover; applied; {}-{}@{}",
                        job.fencingToken(),
                        job.resource(),
                        job.jobId(),
                        tenure,
                        u.previous(),
                        r.topic(),
                        r.partition(),
                        r.offset());
            }
            tx.insertInto(CONSUMER_REUSED)
                    .set(CONSUMER_REUSED.KIND, u.kind())
                    .set(CONSUMER_REUSED.JOB_ID, job.jobId())
                    .set(CONSUMER_REUSED.RESOURCE, job.resource())
                    .set(CONSUMER_REUSED.FENCING_TOKEN, job.fencingToken().value())
                    .set(CONSUMER_REUSED.JOB_CREATED_AT, job.createdAt())
                    .set(CONSUMER_REUSED.TOKEN_HOLDER, tenure.holder())
                    .set(CONSUMER_REUSED.TOKEN_ACQUIRED_AT, tenure.acquiredAt())
                    .set(CONSUMER_REUSED.PREVIOUS, Records.truncate(u.previous(), 1000))
                    .set(CONSUMER_REUSED.TOPIC, r.topic())
                    .set(CONSUMER_REUSED.KAFKA_PARTITION, r.partition())
                    .set(CONSUMER_REUSED.KAFKA_OFFSET, r.offset())
                    .set(CONSUMER_REUSED.SEEN_AT, CLOCK_TIMESTAMP)
                    .execute();
        }
    }

    private Reports() {}
}
