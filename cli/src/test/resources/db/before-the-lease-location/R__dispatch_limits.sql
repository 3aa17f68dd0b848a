-- The rate limits' guard (docs/dispatch.md). A repeatable migration: Flyway applies it again
-- whenever this file changes, after the versioned migrations.

/* [jooq ignore start] */

-- A bucket's tokens at a time: what it held, refilled at per_second for each second since
-- refilled_at (none for a time before it), up to burst; full while it has no state. The one
-- formula of a bucket: the batch spends by it, the guard checks by it, the CLI shows it.
CREATE OR REPLACE FUNCTION dispatch_limit_tokens(tokens double precision, refilled_at timestamptz, per_second double precision, burst integer,
        at timestamptz) RETURNS double precision LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN tokens IS NULL THEN burst::double precision
        ELSE least(burst, tokens + per_second * greatest(0, extract(epoch FROM at - refilled_at))) END
$$;

-- A limit's state (tokens, refilled_at, refilled_by_token) is written only with the scheduler
-- lease's current token, by whatever login, and never faster than the limit refills: its time
-- only moves forward, and its tokens never exceed what the bucket held plus per_second for each
-- second since, up to burst. So neither a paused former leader nor anyone else can refill a
-- bucket, and a takeover or a restart finds the state the last batch left. The definition
-- (per_second, burst) is an operator's to change at any time; a new limit starts without state
-- (a full bucket). Once per statement, over the rows it wrote.
CREATE OR REPLACE FUNCTION dispatch_limits_state_guard() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    lease_token bigint;
    forged record;
BEGIN
    SELECT fencing_token INTO lease_token FROM leader_lease WHERE role = 'scheduler';
    IF TG_OP = 'INSERT' THEN
        SELECT n.dispatch_key, n.refilled_by_token INTO forged FROM new_limits n
        WHERE n.tokens IS NOT NULL AND (n.refilled_by_token IS DISTINCT FROM lease_token OR n.tokens > n.burst)
        LIMIT 1;
    ELSE
        SELECT n.dispatch_key, n.refilled_by_token INTO forged FROM new_limits n
        LEFT JOIN old_limits o ON o.dispatch_key = n.dispatch_key
        WHERE (o.tokens, o.refilled_at, o.refilled_by_token) IS DISTINCT FROM (n.tokens, n.refilled_at, n.refilled_by_token)
          AND (n.refilled_by_token IS DISTINCT FROM lease_token OR n.tokens IS NULL
               OR n.refilled_at < o.refilled_at
               OR n.tokens > 1e-6 + dispatch_limit_tokens(o.tokens, o.refilled_at, n.per_second, n.burst, n.refilled_at))
        LIMIT 1;
    END IF;
    IF FOUND THEN
        RAISE EXCEPTION 'the tokens of limit % were written with token % (the scheduler lease has token %): only the lease holder spends a limit''s tokens, and never refills them faster than the limit',
            forged.dispatch_key, coalesce(forged.refilled_by_token::text, '(none)'), coalesce(lease_token::text, '(none)')
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS dispatch_limits_inserted ON dispatch_limits;
CREATE TRIGGER dispatch_limits_inserted
    AFTER INSERT ON dispatch_limits
    REFERENCING NEW TABLE AS new_limits
    FOR EACH STATEMENT EXECUTE FUNCTION dispatch_limits_state_guard();

DROP TRIGGER IF EXISTS dispatch_limits_updated ON dispatch_limits;
CREATE TRIGGER dispatch_limits_updated
    AFTER UPDATE ON dispatch_limits
    REFERENCING OLD TABLE AS old_limits NEW TABLE AS new_limits
    FOR EACH STATEMENT EXECUTE FUNCTION dispatch_limits_state_guard();

-- A limit defined, changed or removed wakes the leader: jobs held back may be free to go now.
CREATE OR REPLACE FUNCTION dispatch_limits_notify() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM notify_jobs_due(clock_timestamp());
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS dispatch_limits_notify ON dispatch_limits;
CREATE TRIGGER dispatch_limits_notify
    AFTER INSERT OR DELETE OR UPDATE OF per_second, burst ON dispatch_limits
    FOR EACH STATEMENT EXECUTE FUNCTION dispatch_limits_notify();

/* [jooq ignore stop] */
