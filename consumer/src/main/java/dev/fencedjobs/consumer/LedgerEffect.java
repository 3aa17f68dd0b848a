package dev.fencedjobs.consumer;

import static dev.fencedjobs.consumer.jooq.Tables.LEDGER;
import static dev.fencedjobs.db.internal.DbTime.CLOCK_TIMESTAMP;

import java.util.List;
import org.jooq.DSLContext;
import org.jooq.JSONB;
import org.jooq.impl.DSL;

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
        // One array per column (see Unnested): a handful of bind values per batch.
        tx.insertInto(
                        LEDGER,
                        LEDGER.JOB_ID,
                        LEDGER.JOB_CREATED_AT,
                        LEDGER.RESOURCE,
                        LEDGER.FENCING_TOKEN,
                        LEDGER.PAYLOAD,
                        LEDGER.APPLIED_AT)
                .select(DSL.select(
                                Unnested.ID,
                                Unnested.CREATED_AT,
                                Unnested.RESOURCE,
                                Unnested.TOKEN,
                                DSL.field("{0}::jsonb", JSONB.class, Unnested.TEXT),
                                CLOCK_TIMESTAMP)
                        .from(Unnested.jobs(
                                jobs, jobs.stream().map(Job::payloadJson).toList())))
                .execute();
    }
}
