-- Recurring schedules, and producers' control over the jobs they submitted.
--
-- 1. A job can be cancelled while it is pending, and says who submitted it. submitted_by is the
--    submitting session's login (session_user) or 'schedule:<name>' for a schedule's occurrences;
--    jobs inserted before this migration have none. Both columns are added without a rewrite of
--    the table (no default on existing rows; the default below applies to new ones).
ALTER TABLE jobs ADD COLUMN submitted_by varchar(200);
ALTER TABLE jobs ADD COLUMN cancelled_at timestamptz;

/* [jooq ignore start] */

ALTER TABLE jobs ALTER COLUMN submitted_by SET DEFAULT session_user;

-- The states and what each carries. Added NOT VALID and then validated: the validation reads the
-- table under a lock that lets producers and the dispatcher go on writing.
ALTER TABLE jobs DROP CONSTRAINT jobs_state;
ALTER TABLE jobs ADD CONSTRAINT jobs_state CHECK (state IN ('pending', 'completed', 'cancelled')) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_state;
ALTER TABLE jobs DROP CONSTRAINT jobs_completion;
ALTER TABLE jobs ADD CONSTRAINT jobs_completion CHECK (
    (state = 'pending' AND completed_by_token IS NULL AND completed_at IS NULL AND cancelled_at IS NULL)
    OR (state = 'completed' AND completed_by_token IS NOT NULL AND completed_at IS NOT NULL AND cancelled_at IS NULL)
    OR (state = 'cancelled' AND completed_by_token IS NULL AND completed_at IS NULL AND cancelled_at IS NOT NULL)) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_completion;

-- A completed or cancelled job is final: never reopened, completed, cancelled again or edited.
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

DROP TRIGGER jobs_completed_are_final ON jobs;
CREATE TRIGGER jobs_completed_are_final
    BEFORE UPDATE ON jobs
    FOR EACH ROW WHEN (OLD.state <> 'pending')
    EXECUTE FUNCTION jobs_completed_are_final();

-- JOBS_RETENTION applies to cancelled jobs too, by the time they were cancelled.
CREATE INDEX jobs_cancelled_at ON jobs (cancelled_at) WHERE state = 'cancelled';

-- 2. What a producer may see and do: its own jobs only (submitted_by = its login), or every job
--    for a role that may update jobs outright (the schema owner, an operator). The view reads jobs
--    with the owner's rights (the predicate is inlined: a function in a view is called with the
--    reader's), and the functions run with them; nobody may call the functions unless granted
--    (Roles: fj_producer).
CREATE FUNCTION jobs_visible_to(submitter varchar, viewer name) RETURNS boolean LANGUAGE sql STABLE
    SET search_path = pg_catalog, public AS $$
    SELECT submitter = viewer::text OR has_table_privilege(viewer, 'public.jobs', 'UPDATE')
$$;

CREATE VIEW my_jobs WITH (security_barrier) AS
    SELECT id, unique_key, state, resource, payload, due_at, created_at, completed_at, completed_by_token, cancelled_at, submitted_by
    FROM jobs
    WHERE submitted_by = session_user::text OR has_table_privilege(session_user, 'public.jobs', 'UPDATE');

-- The job a producer names, locked: by id, or by unique key when the id is null.
CREATE FUNCTION job_for_control(job_id bigint, key varchar, action text) RETURNS jobs LANGUAGE plpgsql
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
CREATE FUNCTION cancel_job_internal(job_id bigint, key varchar) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
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

CREATE FUNCTION reschedule_job_internal(job_id bigint, key varchar, new_due_at timestamptz) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
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

CREATE FUNCTION cancel_job(job_id bigint) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$ SELECT cancel_job_internal(job_id, NULL) $$;
CREATE FUNCTION cancel_job_by_key(key varchar) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$ SELECT cancel_job_internal(NULL, key) $$;
CREATE FUNCTION reschedule_job(job_id bigint, due_at timestamptz) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$ SELECT reschedule_job_internal(job_id, NULL, due_at) $$;
CREATE FUNCTION reschedule_job_by_key(key varchar, due_at timestamptz) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public AS $$ SELECT reschedule_job_internal(NULL, key, due_at) $$;

REVOKE ALL ON FUNCTION jobs_visible_to(varchar, name), job_for_control(bigint, varchar, text), cancel_job_internal(bigint, varchar),
    reschedule_job_internal(bigint, varchar, timestamptz), cancel_job(bigint), cancel_job_by_key(varchar),
    reschedule_job(bigint, timestamptz), reschedule_job_by_key(varchar, timestamptz) FROM PUBLIC;

-- 3. Recurring schedules. Each occurrence becomes one job, inserted by the dispatcher leader in a
--    transaction that re-checks its lease, with the unique key 'schedule:<name>@<fire time, UTC>'.
--    next_fire_at is the first occurrence not yet decided; it only moves forward, in the same
--    transaction that decides the occurrences before it (a job, or a skip recorded below).
CREATE TABLE schedules (
    name          varchar(150) PRIMARY KEY,
    cron          varchar(200),
    every         interval,
    time_zone     varchar(64)  NOT NULL DEFAULT 'UTC',
    resource      varchar(200) NOT NULL DEFAULT 'default',
    payload       jsonb        NOT NULL DEFAULT '{}',
    misfire       varchar(16)  NOT NULL DEFAULT 'latest',
    paused        boolean      NOT NULL DEFAULT false,
    starts_at     timestamptz  NOT NULL DEFAULT CURRENT_TIMESTAMP,
    next_fire_at  timestamptz,
    fired         bigint       NOT NULL DEFAULT 0,
    skipped       bigint       NOT NULL DEFAULT 0,
    last_fired_at timestamptz,
    resumed_at    timestamptz,
    error         text,
    created_at    timestamptz  NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT schedules_cron_or_every CHECK ((cron IS NULL) <> (every IS NULL)),
    CONSTRAINT schedules_every_fixed CHECK (every IS NULL OR (every > interval '0' AND extract(month FROM every) = 0 AND extract(year FROM every) = 0)),
    CONSTRAINT schedules_misfire CHECK (misfire IN ('all', 'latest', 'skip')),
    CONSTRAINT schedules_name CHECK (name <> '' AND name !~ '[@[:cntrl:]]')
);

-- Occurrences decided without a job: missed while nobody led (by the misfire policy) or while the
-- schedule was paused. One row per run of consecutive occurrences.
CREATE TABLE schedule_skips (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_name  varchar(150) NOT NULL,
    first_fire_at  timestamptz  NOT NULL,
    last_fire_at   timestamptz  NOT NULL,
    occurrences    bigint       NOT NULL,
    reason         varchar(16)  NOT NULL CHECK (reason IN ('misfire', 'paused')),
    decided_at     timestamptz  NOT NULL DEFAULT clock_timestamp(),
    fencing_token  bigint       NOT NULL
);
CREATE INDEX schedule_skips_schedule ON schedule_skips (schedule_name, first_fire_at);

-- fj_dispatcher inserts jobs only as occurrences of a schedule that exists, with that schedule's
-- resource and payload, its name in submitted_by and the key schedule:<name>@...: it cannot submit
-- work of its own. Only its inserts pay for the check.
CREATE FUNCTION jobs_inserted_by_dispatcher() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM schedules s
                   WHERE NEW.submitted_by = 'schedule:' || s.name
                     AND left(NEW.unique_key, length(s.name) + 10) = 'schedule:' || s.name || '@'
                     AND NEW.resource = s.resource AND NEW.payload = s.payload AND NEW.due_at >= s.starts_at) THEN
        RAISE EXCEPTION 'permission denied: fj_dispatcher inserts only the occurrences of existing schedules, with their resource and payload (key %)',
            coalesce(NEW.unique_key, '(none)') USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_inserted_by_dispatcher
    BEFORE INSERT ON jobs
    FOR EACH ROW WHEN (current_user = 'fj_dispatcher')
    EXECUTE FUNCTION jobs_inserted_by_dispatcher();

-- A new, changed, resumed or removed schedule wakes the dispatcher leader at once.
CREATE FUNCTION schedules_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('schedules_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER schedules_notify_changed
    AFTER INSERT OR DELETE OR UPDATE OF cron, every, time_zone, paused, starts_at, misfire ON schedules
    FOR EACH STATEMENT EXECUTE FUNCTION schedules_notify_changed();

-- Whoever edits a schedule, next_fire_at moves only forward once set; a changed rule or start
-- sets it back to NULL only together with those (the dispatcher then starts after the last fire).
CREATE FUNCTION schedules_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.name <> OLD.name THEN
        RAISE EXCEPTION 'a schedule''s name is the identity of its occurrences and never changes (% to %)', OLD.name, NEW.name;
    END IF;
    IF NEW.next_fire_at IS NOT NULL AND OLD.next_fire_at IS NOT NULL AND NEW.next_fire_at < OLD.next_fire_at THEN
        RAISE EXCEPTION 'schedule %: next_fire_at may not move back (% to %): its occurrences up to % are already decided',
            OLD.name, OLD.next_fire_at, NEW.next_fire_at, OLD.next_fire_at;
    END IF;
    -- Occurrences not yet decided when a paused schedule resumes are skipped (reason paused).
    IF OLD.paused AND NOT NEW.paused THEN
        NEW.resumed_at := clock_timestamp();
    END IF;
    IF NEW.cron IS DISTINCT FROM OLD.cron OR NEW.every IS DISTINCT FROM OLD.every OR NEW.time_zone <> OLD.time_zone
            OR NEW.starts_at <> OLD.starts_at THEN
        -- The new rule starts after the last decided occurrence: nothing decided is decided again.
        NEW.starts_at := greatest(NEW.starts_at, OLD.next_fire_at, OLD.last_fired_at + interval '1 millisecond');
        NEW.next_fire_at := NULL;
        NEW.error := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER schedules_guard
    BEFORE UPDATE ON schedules
    FOR EACH ROW EXECUTE FUNCTION schedules_guard();

-- Dispatchers and producers upgraded before `fenced-jobs migrate --roles` is run again: where the
-- roles exist, they get what this migration's features need now (the same grants as Roles).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fj_dispatcher') THEN
        GRANT INSERT (due_at, resource, payload, unique_key, submitted_by) ON jobs TO fj_dispatcher;
        GRANT SELECT ON schedules TO fj_dispatcher;
        GRANT UPDATE (next_fire_at, fired, skipped, last_fired_at, resumed_at, error) ON schedules TO fj_dispatcher;
        GRANT INSERT ON schedule_skips TO fj_dispatcher;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fj_producer') THEN
        GRANT SELECT (id) ON jobs TO fj_producer;
        GRANT SELECT ON my_jobs TO fj_producer;
        GRANT EXECUTE ON FUNCTION cancel_job(bigint), cancel_job_by_key(varchar), reschedule_job(bigint, timestamptz),
            reschedule_job_by_key(varchar, timestamptz) TO fj_producer;
    END IF;
END
$$;

/* [jooq ignore stop] */
