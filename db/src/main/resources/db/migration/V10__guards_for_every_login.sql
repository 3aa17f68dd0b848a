-- Guards that hold for every login, not only for the services' own roles. The guards of V5, V6
-- and V9 named fj_dispatcher and fj_relay: an embedded dispatcher or relay under an application's
-- own login (a member of those roles, or a login simply granted the same rights) passed them
-- untouched. Each guard now decides by what the login may do, and only the schema's owner (and
-- its members) and superusers, whom nothing can stop, are exempt.

/* [jooq ignore start] */

-- The schema's owner, one of its members, or a superuser: the only logins the guards let through.
-- SECURITY DEFINER functions (cancel_job, reschedule_job) run as the owner and are exempt too.
CREATE FUNCTION login_owns_schema() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT r.rolsuper OR pg_has_role(current_user, c.relowner, 'MEMBER')
    FROM pg_roles r, pg_class c
    WHERE r.rolname = current_user AND c.oid = to_regclass('jobs')
$$;

-- Whether the login does a role's work, by its rights: the scheduler's is to complete jobs, the
-- relay's to move the relay's position. No other role has work a login could be granted.
CREATE FUNCTION login_does_work_of(lease_role varchar) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT CASE lease_role
        WHEN 'scheduler' THEN has_column_privilege(current_user, 'jobs', 'completed_by_token', 'UPDATE')
        WHEN 'relay' THEN has_table_privilege(current_user, 'outbox_position', 'UPDATE')
        ELSE false
    END
$$;

-- The lease guard checks a login's rights with login_does_work_of too: a login writes the lease of
-- a role whose work it may do. That guard is in the lease's own location (db/lease,
-- R__leader_lease.sql).

-- Pending jobs are deleted by nobody but the owner (V6 refused fj_dispatcher only): the
-- dispatcher's retention deletes completed jobs, and a producer cancels through cancel_job.
CREATE OR REPLACE FUNCTION jobs_pending_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT login_owns_schema() THEN
        RAISE EXCEPTION '% deletes completed jobs only; job % is %', current_user, OLD.id, OLD.state USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END
$$;

-- A login that may complete jobs inserts only the occurrences of existing schedules (V9 checked
-- fj_dispatcher only): one that could also submit work of its own could make effects out of
-- nothing. Checked once per statement over the rows it inserted, so a producer's bulk insert pays
-- one privilege check, not one per row.
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

DROP TRIGGER jobs_inserted_by_dispatcher ON jobs;
CREATE TRIGGER jobs_inserted_by_dispatcher
    AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_inserted_by_dispatcher();

/* [jooq ignore stop] */
