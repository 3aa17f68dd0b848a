package dev.fencedjobs.testing;

import java.sql.Connection;
import java.sql.SQLException;
import java.sql.Statement;

/**
 * Completed jobs with their outbox rows, for tests and benchmarks of what comes after the
 * dispatcher: written the way the dispatcher writes them, since the schema's triggers accept
 * nothing else (an outbox row only for a job of its shard completed with the shard's scheduler
 * lease's current token). Where a shard has no scheduler lease, an expired one is created, held by
 * {@value #HOLDER}, so a dispatcher started later takes over with the next token. Run as the
 * schema owner: no service role may insert completed jobs.
 */
public final class CompletedJobs {

    public static final String HOLDER = "test-fixture";

    private CompletedJobs() {}

    /**
     * Inserts {@code rows} jobs completed with the lease's token, and their outbox rows in job id
     * order. {@code resource} and {@code payload} are SQL expressions over the row number {@code g}
     * (1 to {@code rows}), such as {@code 'r-' || (g % 10)} and {@code jsonb_build_object('n', g)}.
     */
    public static void insert(Connection c, int rows, String resource, String payload) throws SQLException {
        try (Statement s = c.createStatement()) {
            s.execute(LEASE);
            s.execute(statement(rows, resource, payload));
        }
    }

    /**
     * An outbox as a relay and its retention leave it after a while, for tests of how its readers
     * plan: 20,000 rows written and published, the first 10,000 of them purged and their space
     * reused by 10,000 newer ones, so that the table's order is no longer id order, and then
     * {@code unpublished} rows after the relay's position; statistics fresh. On such a table the
     * planner reads the whole outbox for a range of ids it cannot see at plan time (its estimate is a
     * third of the table).
     */
    public static void agedOutbox(Connection c, int unpublished) throws SQLException {
        insert(c, 10_000, "'r-' || (g % 10)", "jsonb_build_object('n', g)");
        insert(c, 10_000, "'r-' || (g % 10)", "jsonb_build_object('n', g)");
        try (Statement s = c.createStatement()) {
            s.execute(
                    "UPDATE outbox_position SET published_through = (SELECT max(id) FROM outbox) WHERE role = 'relay'");
            s.execute("DELETE FROM outbox WHERE id < (SELECT min(id) + 10000 FROM outbox)");
            s.execute("VACUUM outbox");
            s.execute(statement(10_000 + unpublished, "'r-' || (g % 10)", "jsonb_build_object('n', g)"));
            s.execute("UPDATE outbox_position SET published_through = (SELECT max(id) - " + unpublished
                    + " FROM outbox) WHERE role = 'relay'");
            // As autovacuum leaves a running system: the positions' table analyzed too (two rows), which made
            // the view outbox_unpublished read the whole outbox before V14.
            s.execute("ANALYZE outbox, outbox_position");
        }
    }

    /**
     * Creates the expired scheduler lease of each shard of the map in force where there is none:
     * token 1 for shard 0 on a new database, the next of the role's family for the others.
     */
    public static final String LEASE = "INSERT INTO leader_lease (role, holder_id, fencing_token, expires_at)"
            + " SELECT shard_role('scheduler', s), '" + HOLDER + "', 1, clock_timestamp() FROM unnest(shard_list()) s"
            + " ORDER BY s ON CONFLICT (role) DO NOTHING";

    /**
     * The one statement that writes the jobs and their outbox rows, once {@link #LEASE} has run; its
     * count is the rows. The jobs take the trace context of the transaction's settings, if any
     * ({@code fenced_jobs.traceparent}), and their outbox rows carry it, as the dispatcher's do.
     */
    public static String statement(int rows, String resource, String payload) {
        // Each job with the token of its shard's lease (docs/shards.md); one shard: the scheduler lease's.
        return "WITH done AS (INSERT INTO jobs (resource, payload, due_at, state, completed_by_token, completed_at)"
                + " SELECT x.r, CAST(x.p AS jsonb), clock_timestamp(), 'completed', l.fencing_token, clock_timestamp()"
                + " FROM (SELECT " + resource + " AS r, " + payload + " AS p, g FROM generate_series(1, " + rows
                + ") g) x"
                + " LEFT JOIN leader_lease l ON l.role = shard_role('scheduler', shard_of(x.r, (SELECT shard_count FROM shard_map)))"
                + " ORDER BY x.g"
                + " RETURNING id, shard, resource, completed_by_token, payload, due_at, completed_at, created_at, traceparent, tracestate)"
                + " INSERT INTO outbox (job_id, shard, resource, fencing_token, payload, due_at, completed_at, job_created_at, traceparent, tracestate)"
                + " SELECT id, shard, resource, completed_by_token, payload, due_at, completed_at, created_at, traceparent, tracestate FROM done ORDER BY id";
    }
}
