-- The fences' guard and audit as they are now (V3, V7). A repeatable migration: Flyway applies it
-- again whenever this file changes, after the consumer's versioned migrations.

/* [jooq ignore start] */

-- A fence moves back only by an operator's reset: the highest token lower, or the same token with a
-- lower highest outbox id (which the consumer itself never writes). The consumer's role, and any
-- login that is a member of it, is refused: a consumer that could lower its fences could let a
-- stale leader's records through. Superusers and other logins may, and the AFTER trigger records
-- each reset with the reason the operator set (fencedjobs.fence_reset_reason). Rows are never deleted.
CREATE OR REPLACE FUNCTION consumer_fence_guard() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'consumer_resource_fence rows are never deleted (resource %)', OLD.resource;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = current_user AND NOT r.rolsuper)
       AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fj_consumer')
       AND (pg_has_role(current_user, 'fj_consumer', 'MEMBER') OR pg_has_role(session_user, 'fj_consumer', 'MEMBER')) THEN
        RAISE EXCEPTION 'the highest token of resource % may not decrease (% to %): only an operator resets a fence, never the consumer''s role (%)',
            OLD.resource, OLD.highest_token, NEW.highest_token, session_user USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION consumer_fence_reset_audit() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO consumer_fence_reset (resource, reset_by, reset_at, reason, from_highest_token, from_token_first_outbox_id,
                                      from_highest_outbox_id, from_token_holder, from_token_acquired_at, to_highest_token,
                                      to_token_first_outbox_id, to_highest_outbox_id)
    VALUES (OLD.resource, session_user, clock_timestamp(), nullif(current_setting('fencedjobs.fence_reset_reason', true), ''),
            OLD.highest_token, OLD.token_first_outbox_id, OLD.highest_outbox_id, OLD.highest_token_holder, OLD.highest_token_acquired_at,
            NEW.highest_token, NEW.token_first_outbox_id, NEW.highest_outbox_id);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS consumer_fence_no_decrease ON consumer_resource_fence;
CREATE TRIGGER consumer_fence_no_decrease
    BEFORE UPDATE ON consumer_resource_fence
    FOR EACH ROW WHEN (NEW.highest_token < OLD.highest_token
                       OR (NEW.highest_token = OLD.highest_token AND NEW.highest_outbox_id < OLD.highest_outbox_id))
    EXECUTE FUNCTION consumer_fence_guard();

DROP TRIGGER IF EXISTS consumer_fence_no_delete ON consumer_resource_fence;
CREATE TRIGGER consumer_fence_no_delete
    BEFORE DELETE ON consumer_resource_fence
    FOR EACH ROW EXECUTE FUNCTION consumer_fence_guard();

DROP TRIGGER IF EXISTS consumer_fence_reset_audit ON consumer_resource_fence;
CREATE TRIGGER consumer_fence_reset_audit
    AFTER UPDATE ON consumer_resource_fence
    FOR EACH ROW WHEN (NEW.highest_token < OLD.highest_token
                       OR (NEW.highest_token = OLD.highest_token AND NEW.highest_outbox_id < OLD.highest_outbox_id))
    EXECUTE FUNCTION consumer_fence_reset_audit();

/* [jooq ignore stop] */
