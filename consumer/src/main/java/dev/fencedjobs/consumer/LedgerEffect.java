package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static dev.fencedjobs.db.DbTime.CLOCK_TIMESTAMP;

import java.util.List;
import org.jooq.DSLContext;
import org.jooq.InsertValuesStep6;
import org.jooq.JSONB;
import dev.fencedjobs.consumer.jooq.tables.records.LedgerRecord;

/**
 * The built-in example effect: appends one row per applied job to {@code ledger}, which has no
 * unique constraint on job_id, so a deduplication bug would show as a second row.
 */
public final class LedgerEffect implements Effect {

    @Override
    public void apply(DSLContext tx, Job job) {
        applyAll(tx, List.of(job));
    }

    @Override
    public void applyAll(DSLContext tx, List<Job> jobs) {
        if (jobs.isEmpty()) {
            return;
        }
        InsertValuesStep6<LedgerRecord, Long, java.time.OffsetDateTime, String, Long, JSONB, java.time.OffsetDateTime> insert = tx
                .insertInto(LEDGER, LEDGER.JOB_ID, LEDGER.JOB_CREATED_AT, LEDGER.RESOURCE, LEDGER.FENCING_TOKEN, LEDGER.PAYLOAD, LEDGER.APPLIED_AT);
        for (Job job : jobs) {
            insert = insert.values(org.jooq.impl.DSL.val(job.jobId()), org.jooq.impl.DSL.val(job.createdAt()), org.jooq.impl.DSL.val(job.resource()),
                    org.jooq.impl.DSL.val(job.fencingToken()), org.jooq.impl.DSL.val(JSONB.valueOf(job.payloadJson())), CLOCK_TIMESTAMP);
        }
        insert.execute();
    }
}
