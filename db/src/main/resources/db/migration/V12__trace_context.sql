-- Trace context kept with each job (W3C Trace Context, https://www.w3.org/TR/trace-context/), so a
-- trace can go from the producer's transaction to the consumer's effect (docs/tracing.md).
--
-- 1. A producer names the context in the INSERT (columns traceparent and tracestate), or, when its
--    framework writes the SQL, in a setting of its transaction that the columns' defaults read:
--      SET LOCAL fenced_jobs.traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
--    Jobs without one keep NULL, as every job made before this migration does. Both columns are
--    added without a default first (nothing rewritten) and get theirs below.
-- 2. The outbox row carries its job's context, written by the same statement that completes the
--    job, and the relay sends it as the Kafka headers traceparent and tracestate.
--    The columns are varchar without a length, bounded by the checks below instead: PostgreSQL takes
--    a declared length as the column's width when it plans for a table it has no statistics of yet
--    (a new database with a backlog), and 567 bytes more a row would move those plans.
ALTER TABLE jobs ADD COLUMN traceparent varchar;
ALTER TABLE jobs ADD COLUMN tracestate varchar;
ALTER TABLE outbox ADD COLUMN traceparent varchar;
ALTER TABLE outbox ADD COLUMN tracestate varchar;

/* [jooq ignore start] */

-- A setting that was never set reads as NULL (current_setting's missing_ok); one set in an earlier
-- transaction of the session reads as '' afterwards: both mean no context.
ALTER TABLE jobs ALTER COLUMN traceparent SET DEFAULT nullif(current_setting('fenced_jobs.traceparent', true), '');
ALTER TABLE jobs ALTER COLUMN tracestate SET DEFAULT nullif(current_setting('fenced_jobs.tracestate', true), '');

-- The context goes into Kafka headers and to every consumer's tracing: the database refuses one that
-- is not what the W3C format says (version 00: version, trace id, parent id, flags, in lowercase
-- hex; neither id all zeros), and a tracestate of anything but printable ASCII, or longer than 512
-- characters (what W3C asks a vendor to pass on at least). NOT VALID, then
-- validated, as in V9 and V11: every existing row is NULL, and the check reads the table under a lock
-- that lets producers and the dispatcher go on writing.
ALTER TABLE jobs ADD CONSTRAINT jobs_traceparent CHECK (
    traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
    AND substr(traceparent, 4, 32) <> repeat('0', 32) AND substr(traceparent, 37, 16) <> repeat('0', 16)) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_traceparent;
ALTER TABLE jobs ADD CONSTRAINT jobs_tracestate CHECK (length(tracestate) <= 512 AND tracestate ~ '^[ -~]*$') NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_tracestate;

-- A producer sees its jobs' context.
CREATE OR REPLACE VIEW my_jobs WITH (security_barrier) AS
    SELECT id, unique_key, state, resource, payload, due_at, created_at, completed_at, completed_by_token, cancelled_at, submitted_by,
           priority, dispatch_key, traceparent, tracestate
    FROM jobs
    WHERE submitted_by = session_user::text OR has_table_privilege(session_user, 'public.jobs', 'UPDATE');

-- Whoever could insert jobs or outbox rows before may name their context now, whatever its login
-- (fj_producer, fj_dispatcher, or an application's own login): without it, an upgraded database would
-- refuse the dispatcher's next batch until someone ran `fenced-jobs migrate --roles` again.
-- Read from the catalog, not information_schema, which shows only the grants of the roles the migrating
-- login is enabled as. A grant on the whole table covers the new columns already.
DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT c.relname, acl.grantee::regrole::text AS grantee
             FROM pg_class c
             JOIN pg_attribute att ON att.attrelid = c.oid
             CROSS JOIN LATERAL aclexplode(att.attacl) acl
             WHERE c.oid IN (to_regclass('jobs'), to_regclass('outbox'))
               AND att.attname IN ('due_at', 'job_id') AND acl.privilege_type = 'INSERT' AND acl.grantee <> 0
    LOOP
        EXECUTE format('GRANT INSERT (traceparent, tracestate) ON %I TO %s', g.relname, g.grantee);
    END LOOP;
END
$$;

/* [jooq ignore stop] */
