-- Pauses' triggers (V15, docs/dispatch.md). A repeatable migration: Flyway applies it again whenever
-- this file changes, after the versioned migrations.

/* [jooq ignore start] */

-- A pause, or a pause moved to another key, first takes jobs in SHARE mode: it waits for every
-- transaction that may complete jobs (each batch holds jobs in ROW EXCLUSIVE mode from the statement
-- after its lease check, dispatch_batch_begin in R__jobs.sql, and any completion is an UPDATE of jobs), and a
-- batch that starts meanwhile waits for the pause's commit and then sees it. So once a pause has
-- committed, no job of its key completes. While it waits, batches and producers' inserts wait
-- behind it; an operator's lock_timeout bounds that (fenced-jobs pause sets 5 s).
CREATE OR REPLACE FUNCTION dispatch_pauses_wait_for_batches() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE jobs IN SHARE MODE;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS dispatch_pauses_wait_for_batches ON dispatch_pauses;
CREATE TRIGGER dispatch_pauses_wait_for_batches
    BEFORE INSERT OR UPDATE ON dispatch_pauses
    FOR EACH STATEMENT EXECUTE FUNCTION dispatch_pauses_wait_for_batches();

-- A resume wakes the leader: the key's due jobs are free to go. The wake-up of a limit's change
-- (dispatch_limits_notify, R__dispatch_limits.sql).
DROP TRIGGER IF EXISTS dispatch_pauses_notify ON dispatch_pauses;
CREATE TRIGGER dispatch_pauses_notify
    AFTER DELETE OR UPDATE ON dispatch_pauses
    FOR EACH STATEMENT EXECUTE FUNCTION dispatch_limits_notify();

/* [jooq ignore stop] */
