package dev.fencedjobs.consumer;

import java.time.OffsetDateTime;
import java.util.List;
import org.jooq.Field;
import org.jooq.Table;
import org.jooq.impl.DSL;

/**
 * Jobs as a table {@code u (job_id, job_created_at, resource, fencing_token, text)} from one array
 * per column: a handful of bind values however large the batch (rendering and binding a multi-row
 * VALUES list was most of the consumer's own CPU).
 */
final class Unnested {

    static final Field<Long> ID = DSL.field(DSL.name("u", "job_id"), Long.class);
    static final Field<OffsetDateTime> CREATED_AT = DSL.field(DSL.name("u", "job_created_at"), OffsetDateTime.class);
    static final Field<String> RESOURCE = DSL.field(DSL.name("u", "resource"), String.class);
    static final Field<Long> TOKEN = DSL.field(DSL.name("u", "fencing_token"), Long.class);
    static final Field<String> TEXT = DSL.field(DSL.name("u", "text"), String.class);

    /** The jobs, with {@code text} one more value per job (an outcome, a payload). */
    static Table<?> jobs(List<Job> jobs, List<String> text) {
        Long[] ids = new Long[jobs.size()];
        String[] created = new String[jobs.size()];
        String[] resources = new String[jobs.size()];
        Long[] tokens = new Long[jobs.size()];
        for (int i = 0; i < ids.length; i++) {
            Job job = jobs.get(i);
            ids[i] = job.jobId();
            created[i] =
                    job.createdAt() == null ? null : job.createdAt().toInstant().toString();
            resources[i] = job.resource();
            tokens[i] = job.fencingToken().value();
        }
        return DSL.table(
                "unnest({0}::bigint[], {1}::timestamptz[], {2}::varchar[], {3}::bigint[], {4}::text[]) "
                        + "AS u (job_id, job_created_at, resource, fencing_token, text)",
                DSL.val(ids),
                DSL.val(created),
                DSL.val(resources),
                DSL.val(tokens),
                DSL.val(text.toArray(String[]::new)));
    }

    private Unnested() {}
}
