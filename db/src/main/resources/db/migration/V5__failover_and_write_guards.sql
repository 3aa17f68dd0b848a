-- Database failover, and the writes no role may make.
--
-- 1. The job's identity travels with its completion. A job id is unique on one database, but a
--    standby promoted after it missed some commits hands out again the ids those commits used. The
--    job's creation time, set by the database when the job was inserted, goes with the id into the
--    outbox and to the consumer, which deduplicates by both: a reissued id is a new job to it.
ALTER TABLE outbox ADD COLUMN job_created_at timestamptz;

-- Rows written before this column existed keep it empty, and the consumer deduplicates them by the
-- id alone, as before. They are not filled in: a row sent before the upgrade and sent again after it
-- would then reach an external receiver under a different idempotency key.

/* [jooq ignore start] */

-- 2. Fencing epochs: a token issued after a promotion is greater than every token issued before
--    it. This migration defined fencing_epoch_base() and put it in the lease guard; both are now in
--    the lease's own location (db/lease, R__leader_lease.sql).

-- 3. A completed job stays as it was completed: never reopened, completed again or edited. The
--    WHEN clause is evaluated without calling the function, so pending jobs cost nothing.
CREATE FUNCTION jobs_completed_are_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'job % was completed with token % at %; a completed job is never changed', OLD.id, OLD.completed_by_token, OLD.completed_at
        USING ERRCODE = 'check_violation';
END
$$;

CREATE TRIGGER jobs_completed_are_final
    BEFORE UPDATE ON jobs
    FOR EACH ROW WHEN (OLD.state = 'completed')
    EXECUTE FUNCTION jobs_completed_are_final();

-- 4. Only the scheduler lease's current token completes jobs, and an outbox row is written only for
--    a job completed with the row's token, which is that same token. Once per statement: the
--    dispatcher completes a batch and writes its outbox rows in one statement.
CREATE FUNCTION jobs_completed_with_lease_token() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lease_token bigint;
    forged record;
BEGIN
    SELECT fencing_token INTO lease_token FROM leader_lease WHERE role = 'scheduler';
    SELECT id, completed_by_token INTO forged FROM changed
        WHERE state = 'completed' AND completed_by_token IS DISTINCT FROM lease_token LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job % completed with token %, but the scheduler lease has token %: only the lease holder completes jobs, with its own token',
            forged.id, forged.completed_by_token, coalesce(lease_token::text, '(none)') USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_completed_with_lease_token
    AFTER UPDATE ON jobs
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_completed_with_lease_token();

CREATE FUNCTION outbox_written_for_completed_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER outbox_written_for_completed_jobs
    AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_written_for_completed_jobs();

-- 5. An outbox row is deleted only once it is published: an unpublished one is a message not sent.
CREATE FUNCTION outbox_unpublished_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outbox row % (job %) is not published yet and may not be deleted', OLD.id, OLD.job_id
        USING ERRCODE = 'check_violation';
END
$$;

CREATE TRIGGER outbox_unpublished_kept
    BEFORE DELETE ON outbox
    FOR EACH ROW WHEN (OLD.published_at IS NULL)
    EXECUTE FUNCTION outbox_unpublished_kept();

/* [jooq ignore stop] */
