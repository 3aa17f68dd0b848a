package dev.fencedjobs.db.internal;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Map;

/**
 * The database roles each component connects as, with only the grants it needs. Run as the
 * schema owner after the migrations ({@code fenced-jobs migrate --roles} does both).
 *
 * <ul>
 *   <li>{@code fj_dispatcher}: reads and completes jobs, inserts outbox rows, holds its lease;
 *   <li>{@code fj_relay}: reads, marks and purges outbox rows, holds its lease;
 *   <li>{@code fj_consumer}: its own tables only;
 *   <li>{@code fj_dispatcher}: also turns schedules' occurrences into jobs;
 *   <li>{@code fj_producer}: inserts jobs, learns their ids, and reads, cancels and reschedules
 *       its own (those its login submitted), nothing else.
 * </ul>
 */
public final class Roles {

    public static final String DISPATCHER = "fj_dispatcher";
    public static final String RELAY = "fj_relay";
    public static final String CONSUMER = "fj_consumer";
    public static final String PRODUCER = "fj_producer";

    /**
     * Grants per role, column by column where a role writes only some columns; consumer grants apply
     * only where the consumer's tables exist. Each starts by revoking what the role had on its
     * tables, so that running it again on a database set up by an earlier version narrows the
     * grants instead of adding to them.
     */
    private static final Map<String, String> GRANTS = Map.of(
            DISPATCHER,
                    "REVOKE ALL ON jobs, outbox, leader_lease, dispatch_limits, shard_map FROM fj_dispatcher;"
                            + "GRANT SELECT ON jobs TO fj_dispatcher;"
                            + "GRANT UPDATE (state, completed_by_token, completed_at) ON jobs TO fj_dispatcher;"
                            // JOBS_RETENTION: completed jobs only (a trigger refuses the others).
                            + "GRANT DELETE ON jobs TO fj_dispatcher;"
                            // Schedules: each occurrence becomes a job (under the lease guard), and the schedule's
                            // position moves.
                            + "GRANT INSERT (due_at, resource, payload, unique_key, submitted_by, traceparent, tracestate) ON jobs TO fj_dispatcher;"
                            + "REVOKE ALL ON schedules, schedule_skips FROM fj_dispatcher;"
                            + "GRANT SELECT ON schedules TO fj_dispatcher;"
                            + "GRANT UPDATE (next_fire_at, fired, skipped, last_fired_at, resumed_at, error) ON schedules TO fj_dispatcher;"
                            + "GRANT INSERT ON schedule_skips TO fj_dispatcher;"
                            + "GRANT SELECT ON outbox TO fj_dispatcher;"
                            + "GRANT INSERT (job_id, shard, resource, fencing_token, payload, due_at, completed_at, job_created_at, traceparent, tracestate) "
                            + "ON outbox TO fj_dispatcher;"
                            // Shards: it reads the map, and the holder of shard 0 finishes a drain the operator began.
                            + "GRANT SELECT ON shard_map TO fj_dispatcher;"
                            + "GRANT EXECUTE ON FUNCTION shards_switch() TO fj_dispatcher;"
                            + "GRANT SELECT, INSERT, UPDATE ON leader_lease TO fj_dispatcher;"
                            // Rate limits: it reads the definitions and spends the tokens (under the lease guard).
                            + "GRANT SELECT, UPDATE (tokens, refilled_at, refilled_by_token) ON dispatch_limits TO fj_dispatcher;",
            RELAY,
                    "REVOKE ALL ON outbox, outbox_position, leader_lease, lease_takeover, shard_map FROM fj_relay;"
                            + "GRANT SELECT, DELETE ON outbox TO fj_relay;"
                            + "GRANT SELECT, UPDATE ON outbox_position TO fj_relay;"
                            + "GRANT SELECT ON shard_map TO fj_relay;"
                            // The tenure of each token it publishes (holder and time of acquisition) goes into the
                            // records.
                            + "GRANT SELECT ON lease_takeover TO fj_relay;"
                            + "GRANT UPDATE (publish_error) ON outbox TO fj_relay;"
                            + "GRANT SELECT, INSERT, UPDATE ON leader_lease TO fj_relay;",
            // A producer names only what a job is: when, for what, with what, under which key, in which
            // trace. The id, the state, the completing token and the times are the database's and the
            // dispatcher's.
            // SELECT on unique_key alone: INSERT ... ON CONFLICT (unique_key) DO NOTHING needs it to
            // find the conflicting row; the producer still cannot read any job.
            // SELECT on id: INSERT ... RETURNING id tells a producer the id of the job it submitted. The
            // state and contents of its own jobs (submitted_by = its login) it reads through my_jobs,
            // and it cancels or reschedules them through the functions, which refuse anyone else's.
            PRODUCER,
                    "REVOKE ALL ON jobs FROM fj_producer;"
                            + "GRANT INSERT (due_at, resource, payload, unique_key, priority, dispatch_key, traceparent, tracestate) ON jobs TO fj_producer;"
                            + "GRANT SELECT (id, unique_key) ON jobs TO fj_producer;"
                            + "REVOKE ALL ON my_jobs FROM fj_producer;"
                            + "GRANT SELECT ON my_jobs TO fj_producer;"
                            + "GRANT EXECUTE ON FUNCTION cancel_job(bigint), cancel_job_by_key(varchar), reschedule_job(bigint, timestamptz), "
                            + "reschedule_job_by_key(varchar, timestamptz), reschedule_job(bigint, timestamptz, integer), "
                            + "reschedule_job_by_key(varchar, timestamptz, integer) TO fj_producer;",
            // The consumer's own tables, each with what its work needs: the fence rows are never
            // deleted (a trigger refuses it too), decisions and records of what happened are
            // appended, and only the processed ids are purged.
            CONSUMER,
                    "DO $$ BEGIN IF to_regclass('consumer_processed') IS NOT NULL THEN "
                            + "REVOKE ALL ON consumer_resource_fence, consumer_processed, consumer_processed_reissued, consumer_rejected, "
                            + "consumer_dead_letter, consumer_late, consumer_reused, consumer_counters, consumer_waiting, consumer_fence_reset, ledger FROM fj_consumer; "
                            + "GRANT SELECT, INSERT, UPDATE ON consumer_resource_fence TO fj_consumer; "
                            + "GRANT SELECT, INSERT, DELETE ON consumer_processed, consumer_processed_reissued TO fj_consumer; "
                            + "GRANT UPDATE (outcome) ON consumer_processed TO fj_consumer; "
                            + "GRANT SELECT, INSERT, DELETE ON consumer_rejected, consumer_dead_letter, consumer_late, consumer_reused TO fj_consumer; "
                            // Replays an operator asked for: the outcome, on the letter.
                            + "GRANT UPDATE (status, status_at, replay_outcome) ON consumer_dead_letter TO fj_consumer; "
                            + "GRANT SELECT, UPDATE (value) ON consumer_counters TO fj_consumer; "
                            // Patient retries: records waiting behind a failing effect, taken out when done.
                            + "GRANT SELECT, INSERT, UPDATE, DELETE ON consumer_waiting TO fj_consumer; "
                            + "GRANT SELECT, INSERT ON ledger TO fj_consumer; "
                            // The resets of its fences, which only an operator makes: it reads them, never writes them.
                            + "GRANT SELECT ON consumer_fence_reset TO fj_consumer; "
                            + "END IF; END $$;");

    private Roles() {}

    /**
     * Creates each role that is missing (login, with the given password) or sets its password,
     * and grants it its privileges. Roles without a password in {@code passwords} are skipped.
     */
    public static void apply(Connection owner, Map<String, String> passwords) throws SQLException {
        for (Map.Entry<String, String> grant : GRANTS.entrySet()) {
            String role = grant.getKey();
            String password = passwords.get(role);
            if (password == null || password.isEmpty()) {
                continue;
            }
            boolean exists;
            try (PreparedStatement ps = owner.prepareStatement("SELECT 1 FROM pg_roles WHERE rolname = ?")) {
                ps.setString(1, role);
                exists = ps.executeQuery().next();
            }
            try (Statement s = owner.createStatement()) {
                // Role names are the constants above; the password is quoted as a literal.
                s.execute((exists ? "ALTER ROLE " : "CREATE ROLE ") + role + " LOGIN PASSWORD " + literal(password));
                s.execute(grant.getValue());
            }
        }
    }

    /**
     * Gives {@code login}, an existing login of the application's own, the rights of a service's
     * {@code role} without making it a member: for a dispatcher, relay or consumer embedded under
     * the application's login. The triggers decide by rights, so such a login is refused exactly
     * what the role is refused.
     */
    public static void grantRightsOf(Connection owner, String role, String login) throws SQLException {
        String grants = GRANTS.get(role);
        if (grants == null) {
            throw new IllegalArgumentException("no role " + role + "; the roles are " + GRANTS.keySet());
        }
        if (!login.matches("[a-z_][a-z0-9_]{0,62}")) {
            throw new IllegalArgumentException("login '" + login + "' is not a plain lower-case SQL name");
        }
        try (Statement s = owner.createStatement()) {
            s.execute(grants.replaceAll("\\b" + role + "\\b", login));
        }
    }

    static String literal(String value) {
        return "'" + value.replace("'", "''") + "'";
    }
}
