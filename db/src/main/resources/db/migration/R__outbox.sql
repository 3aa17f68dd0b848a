-- The outbox's guards and wake-up as they are now (V3, V5, V6). A repeatable migration: Flyway
-- applies it again whenever this file changes, after the versioned migrations.

/* [jooq ignore start] */

-- Wakes the relay: one notification per statement (the dispatcher writes a batch in one statement).
CREATE OR REPLACE FUNCTION outbox_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_inserted', '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS outbox_notify_inserted ON outbox;
CREATE TRIGGER outbox_notify_inserted
    AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify_inserted();

-- An outbox row is written only with the scheduler lease's current token, for a job completed with
-- that same token. Once per statement.
CREATE OR REPLACE FUNCTION outbox_written_for_completed_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lease_token bigint;
    forged record;
BEGIN
    SELECT fencing_token INTO lease_token FROM leader_lease WHERE role = 'scheduler';
    SELECT o.job_id, o.fencing_token, j.completed_by_token INTO forged
        FROM written o LEFT JOIN jobs j ON j.id = o.job_id
        WHERE o.fencing_token IS DISTINCT FROM lease_token OR j.completed_by_token IS DISTINCT FROM o.fencing_token LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox row for job % has token %, but the job was completed with token % and the scheduler lease has token %: '
            'outbox rows are written only with the completion, by the lease holder',
            forged.job_id, forged.fencing_token, coalesce(forged.completed_by_token::text, '(none)'), coalesce(lease_token::text, '(none)')
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

-- Rows past the relay's position are not published yet and are never deleted: an unpublished row
-- is a message not sent. One check per statement against the position.
CREATE OR REPLACE FUNCTION outbox_unpublished_kept() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kept record;
BEGIN
    SELECT d.id, d.job_id INTO kept FROM deleted d
        WHERE d.id > coalesce((SELECT published_through FROM outbox_position WHERE role = 'relay'), 0) LIMIT 1;
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
