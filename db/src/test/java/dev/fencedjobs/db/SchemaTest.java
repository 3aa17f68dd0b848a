package dev.fencedjobs.db;

import static dev.fencedjobs.db.jooq.Tables.JOBS;
import static org.assertj.core.api.Assertions.assertThat;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import org.jooq.Record;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** The SQL interface producers use, exactly as the README shows it. */
class SchemaTest {

    @RegisterExtension
    static final MigratedDatabase db = new MigratedDatabase();

    @Test
    void theArticlesInsertWorksAndFillsTheDefaults() {
        db.dsl().execute("INSERT INTO jobs (due_at) VALUES (clock_timestamp())");
        Record job = db.dsl().selectFrom(JOBS).orderBy(JOBS.ID.desc()).limit(1).fetchSingle();
        assertThat(job.get(JOBS.STATE)).isEqualTo("pending");
        assertThat(job.get(JOBS.RESOURCE)).isEqualTo("default");
        assertThat(job.get(JOBS.PAYLOAD).data()).isEqualTo("{}");
        assertThat(job.get(JOBS.CREATED_AT)).isNotNull();
        assertThat(job.get(JOBS.COMPLETED_BY_TOKEN)).isNull();
        assertThat(job.get(JOBS.COMPLETED_AT)).isNull();
    }

    @Test
    void theSameScheduledExecutionSubmittedTwiceIsOneJob() {
        String insert = "INSERT INTO jobs (resource, payload, due_at, unique_key) "
                + "VALUES ('invoice-42', '{\"amount\": 10}', clock_timestamp() + interval '30 seconds', 'invoice-42/2026-11-30') "
                + "ON CONFLICT (unique_key) DO NOTHING";
        assertThat(db.dsl().execute(insert)).isEqualTo(1);
        assertThat(db.dsl().execute(insert)).isZero();
        assertThat(db.dsl().fetchCount(JOBS, JOBS.UNIQUE_KEY.eq("invoice-42/2026-11-30")))
                .isEqualTo(1);
        // Jobs without a key never collide.
        db.dsl().execute("INSERT INTO jobs (due_at) VALUES (clock_timestamp())");
        db.dsl().execute("INSERT INTO jobs (due_at) VALUES (clock_timestamp())");
    }

    @Test
    void aCompletedJobMustCarryItsTokenAndTime() {
        db.dsl().execute("INSERT INTO jobs (due_at, resource) VALUES (clock_timestamp(), 'check')");
        org.assertj.core.api.Assertions.assertThatThrownBy(
                        () -> db.dsl().execute("UPDATE jobs SET state = 'completed' WHERE resource = 'check'"))
                .hasMessageContaining("jobs_completion");
        org.assertj.core.api.Assertions.assertThatThrownBy(
                        () -> db.dsl()
                                .execute(
                                        "UPDATE jobs SET state = 'done', completed_by_token = 1, completed_at = clock_timestamp() WHERE resource = 'check'"))
                .hasMessageContaining("violates check constraint");
    }

    @Test
    void duePendingJobsAreReadFromThePartialIndexAtScale() throws Exception {
        // 200,000 completed jobs and 2,000 pending ones: the due query must not scan the table.
        db.dsl()
                .execute(
                        "INSERT INTO jobs (due_at, state, completed_by_token, completed_at) "
                                + "SELECT clock_timestamp() - interval '1 day', 'completed', 1, clock_timestamp() FROM generate_series(1, 200000)");
        db.dsl()
                .execute(
                        "INSERT INTO jobs (due_at) SELECT clock_timestamp() + (g || ' seconds')::interval FROM generate_series(1, 2000) g");
        db.dsl().execute("ANALYZE jobs");
        try (Connection c = db.pool().getConnection();
                Statement s = c.createStatement();
                ResultSet plan = s.executeQuery("EXPLAIN SELECT id FROM jobs WHERE state = 'pending' "
                        + "AND due_at <= clock_timestamp() ORDER BY due_at, id LIMIT 500")) {
            StringBuilder text = new StringBuilder();
            while (plan.next()) {
                text.append(plan.getString(1)).append('\n');
            }
            assertThat(text.toString()).contains("jobs_pending_due").doesNotContain("Seq Scan");
        }
    }
}
