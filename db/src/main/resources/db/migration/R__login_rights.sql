-- Who the guards let through, decided by what a login may do, never by its name, so an embedded
-- dispatcher or relay under an application's own login gets the same refusals as the services.
-- The current body of each; the history is in V10. A repeatable migration: Flyway applies it again
-- whenever this file changes, after the versioned migrations.

/* [jooq ignore start] */

-- The schema's owner, one of its members, or a superuser: the only logins the guards let through.
-- SECURITY DEFINER functions (cancel_job, reschedule_job) run as the owner and are exempt too.
CREATE OR REPLACE FUNCTION login_owns_schema() RETURNS boolean LANGUAGE sql STABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT r.rolsuper OR pg_has_role(current_user, c.relowner, 'MEMBER')
    FROM pg_roles r, pg_class c
    WHERE r.rolname = current_user AND c.oid = to_regclass('jobs')
$$;

-- Whether the login does a role's work, by its rights: the scheduler's is to complete jobs, the
-- relay's to move the relay's position; a shard's role ('scheduler/3') is its family's. No other
-- role has work a login could be granted.
CREATE OR REPLACE FUNCTION login_does_work_of(lease_role varchar) RETURNS boolean LANGUAGE sql STABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE split_part(lease_role, '/', 1)
        WHEN 'scheduler' THEN has_column_privilege(current_user, 'jobs', 'completed_by_token', 'UPDATE')
        WHEN 'relay' THEN has_table_privilege(current_user, 'outbox_position', 'UPDATE')
        ELSE false
    END
$$;

/* [jooq ignore stop] */
