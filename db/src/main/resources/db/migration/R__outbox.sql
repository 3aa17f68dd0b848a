-- The outbox's guards and wake-up as they are now (V3, V5, V6). A repeatable migration: Flyway
-- applies it again whenever this file changes, after the versioned migrations.

/* [jooq ignore start] */

-- Wakes the relay of each shard the statement wrote rows of, the shard the payload (a dispatcher's
-- batch is one statement of one shard): the relay loops of the other shards sleep on. A relay from
-- before shards wakes on any payload.
CREATE OR REPLACE FUNCTION outbox_notify_inserted() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM pg_notify('outbox_inserted', s::text) FROM (SELECT DISTINCT shard AS s FROM inserted) d;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS outbox_notify_inserted ON outbox;
CREATE TRIGGER outbox_notify_inserted
    AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify_inserted();

-- An outbox row is written only with the current token of its shard's scheduler lease, for a job of
-- that shard completed with that same token. Once per statement.
--
-- The join with jobs is planned anew each time (EXECUTE), for the table as it is then. PL/pgSQL
-- would keep the plan its session's first statements got, until an ANALYZE of jobs: for a leader
-- that started on a small table (a new database), a scan of every job for each of the batch's rows
-- (measured: 500 rows against 6,000 jobs, 250 ms a batch and growing, until the statement timeout
-- failed every batch). Planned here, a batch's rows are looked up by jobs' primary key; the
-- planning costs about 0.2 ms a batch (500 rows, 60,000 jobs). (BatchPlanTest.)
CREATE OR REPLACE FUNCTION outbox_written_for_completed_jobs() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    forged record;
    found_forged integer;
BEGIN
    EXECUTE 'SELECT o.job_id, o.shard, o.fencing_token, j.completed_by_token, j.shard AS job_shard, l.fencing_token AS lease_token
        FROM written o LEFT JOIN jobs j ON j.id = o.job_id
        LEFT JOIN leader_lease l ON l.role = CASE WHEN o.shard = 0 THEN ''scheduler'' ELSE ''scheduler/'' || o.shard END
        WHERE o.fencing_token IS DISTINCT FROM l.fencing_token OR j.completed_by_token IS DISTINCT FROM o.fencing_token
           OR j.shard IS DISTINCT FROM o.shard LIMIT 1'
        INTO forged;
    -- EXECUTE sets the row count, not FOUND.
    GET DIAGNOSTICS found_forged = ROW_COUNT;
    IF found_forged > 0 THEN
        RAISE EXCEPTION 'outbox row for job % (shard %) has token %, but the job (shard %) was completed with token % and the shard''s scheduler lease has token %: '
            'outbox rows are written only with the completion, by the lease holder',
            forged.job_id, forged.shard, forged.fencing_token, coalesce(forged.job_shard::text, '(none)'),
            coalesce(forged.completed_by_token::text, '(none)'), coalesce(forged.lease_token::text, '(none)')
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS outbox_written_for_completed_jobs ON outbox;
CREATE TRIGGER outbox_written_for_completed_jobs
    AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_written_for_completed_jobs();

-- Rows past their shard's relay position are not published yet and are never deleted: an
-- unpublished row is a message not sent. One check per statement against the positions.
CREATE OR REPLACE FUNCTION outbox_unpublished_kept() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    kept record;
BEGIN
    SELECT d.id, d.job_id INTO kept FROM deleted d
        LEFT JOIN outbox_position p ON p.role = CASE WHEN d.shard = 0 THEN 'relay' ELSE 'relay/' || d.shard END
        WHERE d.id > coalesce(p.published_through, 0) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox row % (job %) is not published yet and may not be deleted', kept.id, kept.job_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS outbox_unpublished_kept ON outbox;
CREATE TRIGGER outbox_unpublished_kept
    AFTER DELETE ON outbox
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_unpublished_kept();

/* [jooq ignore stop] */
