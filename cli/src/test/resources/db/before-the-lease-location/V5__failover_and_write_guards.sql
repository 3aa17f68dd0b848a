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

-- 2. Fencing epochs. A promoted standby is on a new WAL timeline; each timeline is an epoch of 2^32
--    tokens, (timeline - 1) << 32 + 1 onwards, so a token issued after a promotion is greater than
--    every token issued before it, even those the promoted database never received. On timeline 1
--    (a database that never failed over) the base is 0 and tokens are what they always were.
--    pg_walfile_name's first eight hex digits are the timeline that WAL is being written on now.
CREATE FUNCTION fencing_epoch_base() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT (('x' || lpad(substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8), 16, '0'))::bit(64)::bigint - 1) << 32
$$;

-- The lease guard, now also on INSERT:
--   * rows are never deleted, the role never changes and the token never decreases (as before);
--   * a new holder comes with a new token (two holders never share one);
--   * fj_dispatcher writes only the scheduler's lease and fj_relay only the relay's;
--   * a token of an earlier epoch moves to the first token of the current one on any write, a
--     renewal included, so the holder of a lease that crossed a promotion gets a new token.
CREATE OR REPLACE FUNCTION leader_lease_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    epoch_base bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'leader_lease rows are never deleted (role %): a new row would restart the fencing token', OLD.role;
    END IF;
    IF (current_user = 'fj_dispatcher' AND NEW.role <> 'scheduler') OR (current_user = 'fj_relay' AND NEW.role <> 'relay') THEN
        RAISE EXCEPTION '% may not write the lease of role %', current_user, NEW.role USING ERRCODE = 'insufficient_privilege';
    END IF;
    epoch_base := fencing_epoch_base();
    IF TG_OP = 'INSERT' THEN
        NEW.fencing_token := greatest(NEW.fencing_token, epoch_base + 1);
        RETURN NEW;
    END IF;
    IF NEW.role <> OLD.role THEN
        RAISE EXCEPTION 'leader_lease.role may not change (% to %)', OLD.role, NEW.role;
    END IF;
    IF NEW.fencing_token < OLD.fencing_token THEN
        RAISE EXCEPTION 'fencing token of role % may not decrease (% to %)', OLD.role, OLD.fencing_token, NEW.fencing_token;
    END IF;
    IF NEW.holder_id <> OLD.holder_id AND NEW.fencing_token = OLD.fencing_token THEN
        RAISE EXCEPTION 'a new holder of role % needs a new fencing token (% took over % with token %)',
            OLD.role, NEW.holder_id, OLD.holder_id, OLD.fencing_token;
    END IF;
    IF NEW.fencing_token <= epoch_base THEN
        NEW.fencing_token := epoch_base + 1;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER leader_lease_guard ON leader_lease;
CREATE TRIGGER leader_lease_guard
    BEFORE INSERT OR UPDATE OR DELETE ON leader_lease
    FOR EACH ROW EXECUTE FUNCTION leader_lease_guard();

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
