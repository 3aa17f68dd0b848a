-- Dispatch policy (docs/dispatch.md): a job's priority and dispatch key, and rate limits per key.
--
-- 1. Two columns on jobs, both with a constant default, so adding them rewrites nothing and every
--    existing job keeps today's order. priority is in seconds: a job is ranked as if it were due
--    that much earlier (job_rank, R__jobs.sql). dispatch_key names the group that rate limits and
--    fairness count by; NULL means the job's resource.
ALTER TABLE jobs ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN dispatch_key varchar(200);

-- 2. Rate limits, one row per dispatch key: at most per_second jobs a second with bursts of up to
--    burst, as a token bucket. The definition (per_second, burst) is an operator's; the state
--    (tokens, refilled_at, refilled_by_token) only the scheduler lease's holder writes, in the
--    transaction that completes the jobs, with its token (dispatch_limits_state_guard,
--    R__dispatch_limits.sql). A new limit has no state yet: its bucket starts full.
CREATE TABLE dispatch_limits (
    dispatch_key      varchar(200)     PRIMARY KEY,
    per_second        double precision NOT NULL,
    burst             integer          NOT NULL,
    tokens            double precision,
    refilled_at       timestamptz,
    refilled_by_token bigint,
    created_at        timestamptz      NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT dispatch_limits_rate CHECK (per_second > 0 AND per_second <= 1000000),
    CONSTRAINT dispatch_limits_burst CHECK (burst >= 1 AND burst <= 1000000),
    CONSTRAINT dispatch_limits_state CHECK ((tokens IS NULL) = (refilled_at IS NULL) AND (tokens IS NULL) = (refilled_by_token IS NULL))
);

/* [jooq ignore start] */

-- Added NOT VALID and then validated, as in V9: the validation reads the table under a lock that
-- lets producers and the dispatcher go on writing.
ALTER TABLE jobs ADD CONSTRAINT jobs_priority CHECK (priority BETWEEN -86400 AND 86400) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_priority;

-- Whether the dispatcher must take the policy path: this partial index holds only pending jobs
-- that name a priority or a key, so it stays empty (and costs a producer's INSERT nothing) while
-- nobody uses either.
CREATE INDEX jobs_pending_policy ON jobs (id) WHERE state = 'pending' AND (priority <> 0 OR dispatch_key IS NOT NULL);

-- What the policy path reads: each key's pending jobs in rank order, the rank being the due time
-- moved earlier by the priority's seconds. In UTC without a time zone, so that the expression is
-- immutable and an index can hold it; dispatch_batch (R__jobs.sql) orders by the same expression.
CREATE INDEX jobs_pending_key ON jobs ((coalesce(dispatch_key, resource)), ((due_at AT TIME ZONE 'UTC') - priority * interval '1 second'), id)
    WHERE state = 'pending';

-- A producer sees its jobs' priority and key.
CREATE OR REPLACE VIEW my_jobs WITH (security_barrier) AS
    SELECT id, unique_key, state, resource, payload, due_at, created_at, completed_at, completed_by_token, cancelled_at, submitted_by,
           priority, dispatch_key
    FROM jobs
    WHERE submitted_by = session_user::text OR has_table_privilege(session_user, 'public.jobs', 'UPDATE');

ALTER TABLE dispatch_limits SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

/* [jooq ignore stop] */
