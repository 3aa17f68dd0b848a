-- The jobs table's guards, wake-ups and control functions as they are now (V2, V5, V6, V8, V9,
-- V10). A repeatable migration: Flyway applies it again whenever this file changes, after the
-- versioned migrations. Grants to the roles are in Roles (fenced-jobs migrate --roles).

/* [jooq ignore start] */

-- Wake-ups for the dispatcher leader, so it sleeps until the earliest due job instead of polling.
-- Payload: "<earliest due_at among the new or rescheduled pending jobs, epoch ms (database time)>
-- <the notifying transaction's xid8>". The leader compares the transaction with the snapshots of
-- its recent batches, to tell a notification that arrives after its jobs were already completed
-- from a job it has not seen.
CREATE OR REPLACE FUNCTION jobs_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    earliest timestamptz;
BEGIN
    SELECT min(due_at) INTO earliest FROM inserted WHERE state = 'pending';
    IF earliest IS NOT NULL THEN
        PERFORM pg_notify('jobs_due', (floor(extract(epoch FROM earliest) * 1000))::bigint::text || ' ' || pg_current_xact_id()::text);
    END IF;
    RETURN NULL;
END
$$;

-- One notification per INSERT or COPY statement, however many rows it writes.
DROP TRIGGER IF EXISTS jobs_notify_inserted ON jobs;
CREATE TRIGGER jobs_notify_inserted
    AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_inserted();

CREATE OR REPLACE FUNCTION jobs_notify_rescheduled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobs_due', (floor(extract(epoch FROM NEW.due_at) * 1000))::bigint::text || ' ' || pg_current_xact_id()::text);
    RETURN NULL;
END
$$;

-- A pending job moved earlier by an UPDATE of due_at. The leader's own updates never set due_at.
DROP TRIGGER IF EXISTS jobs_notify_rescheduled ON jobs;
CREATE TRIGGER jobs_notify_rescheduled
    AFTER UPDATE OF due_at ON jobs
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.due_at < OLD.due_at)
    EXECUTE FUNCTION jobs_notify_rescheduled();

-- A completed or cancelled job is final: never reopened, completed, cancelled again or edited. The
-- WHEN clause is evaluated without calling the function, so pending jobs cost nothing.
CREATE OR REPLACE FUNCTION jobs_completed_are_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'cancelled' THEN
        RAISE EXCEPTION 'job % was cancelled at %; a cancelled job is never changed', OLD.id, OLD.cancelled_at
            USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'job % was completed with token % at %; a completed job is never changed', OLD.id, OLD.completed_by_token, OLD.completed_at
        USING ERRCODE = 'check_violation';
END
$$;

DROP TRIGGER IF EXISTS jobs_completed_are_final ON jobs;
CREATE TRIGGER jobs_completed_are_final
    BEFORE UPDATE ON jobs
    FOR EACH ROW WHEN (OLD.state <> 'pending')
    EXECUTE FUNCTION jobs_completed_are_final();

-- Only the scheduler lease's current token completes jobs. Once per statement: the dispatcher
-- completes a batch and writes its outbox rows in one statement.
CREATE OR REPLACE FUNCTION jobs_completed_with_lease_token() RETURNS trigger LANGUAGE plpgsql AS $$
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

DROP TRIGGER IF EXISTS jobs_completed_with_lease_token ON jobs;
CREATE TRIGGER jobs_completed_with_lease_token
    AFTER UPDATE ON jobs
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_completed_with_lease_token();

-- Pending jobs are deleted by nobody but the owner: the dispatcher's retention deletes completed
-- jobs, and a producer cancels through cancel_job.
CREATE OR REPLACE FUNCTION jobs_pending_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT login_owns_schema() THEN
        RAISE EXCEPTION '% deletes completed jobs only; job % is %', current_user, OLD.id, OLD.state USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END
$$;

DROP TRIGGER IF EXISTS jobs_pending_kept ON jobs;
CREATE TRIGGER jobs_pending_kept
    BEFORE DELETE ON jobs
    FOR EACH ROW WHEN (OLD.state = 'pending')
    EXECUTE FUNCTION jobs_pending_kept();

-- A login that may complete jobs inserts only the occurrences of existing schedules, with their
-- resource and payload, its name in submitted_by and the key schedule:<name>@...: one that could
-- also submit work of its own could make effects out of nothing. Checked once per statement over
-- the rows it inserted, so a producer's bulk insert pays one privilege check, not one per row.
CREATE OR REPLACE FUNCTION jobs_inserted_by_dispatcher() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    IF login_owns_schema() OR NOT has_column_privilege(current_user, 'jobs', 'completed_by_token', 'UPDATE') THEN
        RETURN NULL;
    END IF;
    SELECT n.unique_key INTO bad FROM inserted_jobs n
    WHERE NOT EXISTS (SELECT 1 FROM schedules s
                      WHERE n.submitted_by = 'schedule:' || s.name
                        AND left(n.unique_key, length(s.name) + 10) = 'schedule:' || s.name || '@'
                        AND n.resource = s.resource AND n.payload = s.payload AND n.due_at >= s.starts_at)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'permission denied: % may complete jobs, so it inserts only the occurrences of existing schedules, with their resource and payload (key %)',
            current_user, coalesce(bad.unique_key, '(none)') USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS jobs_inserted_by_dispatcher ON jobs;
CREATE TRIGGER jobs_inserted_by_dispatcher
    AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_inserted_by_dispatcher();

-- What a producer may see and do: its own jobs only (submitted_by = its login), or every job for a
-- role that may update jobs outright (the schema owner, an operator). The functions run with the
-- owner's rights; nobody may call them unless granted (Roles: fj_producer). The view my_jobs
-- inlines the same predicate (V9).
CREATE OR REPLACE FUNCTION jobs_visible_to(submitter varchar, viewer name) RETURNS boolean LANGUAGE sql STABLE
    SET search_path = pg_catalog, public AS $$
    SELECT submitter = viewer::text OR has_table_privilege(viewer, 'public.jobs', 'UPDATE')
$$;

-- The job a producer names, locked: by id, or by unique key when the id is null.
CREATE OR REPLACE FUNCTION job_for_control(job_id bigint, key varchar, action text) RETURNS jobs LANGUAGE plpgsql
    SET search_path = pg_catalog, public AS $$
DECLARE
    j jobs;
BEGIN
    IF job_id IS NOT NULL THEN
        SELECT * INTO j FROM jobs WHERE id = job_id FOR UPDATE;
    ELSE
        SELECT * INTO j FROM jobs WHERE unique_key = key FOR UPDATE;
    END IF;
    IF NOT FOUND OR NOT jobs_visible_to(j.submitted_by, session_user) THEN
        RAISE EXCEPTION 'no job % submitted by %', coalesce(job_id::text, 'with key ' || key), session_user
            USING ERRCODE = 'no_data_found', HINT = 'a producer controls only the jobs its own login submitted';
    END IF;
    IF j.state = 'completed' THEN
        RAISE EXCEPTION 'job % was already completed at % (token %); it cannot be %', j.id, j.completed_at, j.completed_by_token, action
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN j;
END
$$;

-- Cancels a pending job; cancelling a cancelled job again is a no-op. Returns the job's id.
CREATE OR REPLACE FUNCTION cancel_job_internal(job_id bigint, key varchar) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$
DECLARE
    j jobs := job_for_control(job_id, key, 'cancelled');
BEGIN
    IF j.state = 'pending' THEN
        UPDATE jobs SET state = 'cancelled', cancelled_at = clock_timestamp() WHERE id = j.id;
    END IF;
    RETURN j.id;
END
$$;

CREATE OR REPLACE FUNCTION reschedule_job_internal(job_id bigint, key varchar, new_due_at timestamptz) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$
DECLARE
    j jobs := job_for_control(job_id, key, 'rescheduled');
BEGIN
    IF new_due_at IS NULL THEN
        RAISE EXCEPTION 'a job needs a due time' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF j.state = 'cancelled' THEN
        RAISE EXCEPTION 'job % was cancelled at %; it cannot be rescheduled', j.id, j.cancelled_at
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE jobs SET due_at = new_due_at WHERE id = j.id;
    RETURN j.id;
END
$$;

CREATE OR REPLACE FUNCTION cancel_job(job_id bigint) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$ SELECT cancel_job_internal(job_id, NULL) $$;
CREATE OR REPLACE FUNCTION cancel_job_by_key(key varchar) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$ SELECT cancel_job_internal(NULL, key) $$;
CREATE OR REPLACE FUNCTION reschedule_job(job_id bigint, due_at timestamptz) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$ SELECT reschedule_job_internal(job_id, NULL, due_at) $$;
CREATE OR REPLACE FUNCTION reschedule_job_by_key(key varchar, due_at timestamptz) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$ SELECT reschedule_job_internal(NULL, key, due_at) $$;

REVOKE ALL ON FUNCTION jobs_visible_to(varchar, name), job_for_control(bigint, varchar, text), cancel_job_internal(bigint, varchar),
    reschedule_job_internal(bigint, varchar, timestamptz), cancel_job(bigint), cancel_job_by_key(varchar),
    reschedule_job(bigint, timestamptz), reschedule_job_by_key(varchar, timestamptz) FROM PUBLIC;

/* [jooq ignore stop] */
