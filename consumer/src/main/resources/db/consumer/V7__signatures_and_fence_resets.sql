-- Record signatures (RECORD_SIGNATURES): a dead letter and a waiting record keep the record's
-- signature header (fj-signature), so that a replay checks the record again as it arrived, and a
-- waiting record that ends as a dead letter keeps it too. NULL: unsigned, or stored before this
-- version (a replay of such a letter needs RECORD_SIGNATURES=accept-unsigned).
ALTER TABLE consumer_dead_letter ADD COLUMN record_signature bytea;
ALTER TABLE consumer_waiting ADD COLUMN record_signature bytea;

-- An operator's reset of a poisoned fence (fenced-jobs fence reset): who, when, why, from what, to
-- what. Written by the fence's own trigger, so no reset goes unrecorded.
CREATE TABLE consumer_fence_reset (
    id                         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource                   varchar(200)  NOT NULL,
    reset_by                   varchar(200)  NOT NULL,
    reset_at                   timestamptz   NOT NULL,
    reason                     varchar(2000),
    from_highest_token         bigint        NOT NULL,
    from_token_first_outbox_id bigint        NOT NULL,
    from_highest_outbox_id     bigint        NOT NULL,
    from_token_holder          varchar(200),
    from_token_acquired_at     timestamptz,
    to_highest_token           bigint        NOT NULL,
    to_token_first_outbox_id   bigint        NOT NULL,
    to_highest_outbox_id       bigint        NOT NULL
);

/* [jooq ignore start] */

-- A fence moves back only by an operator's reset: the highest token lower, or the same token with a
-- lower highest outbox id (which the consumer itself never writes). The consumer's role, and any
-- login that is a member of it, is refused: a consumer that could lower its fences could let a
-- stale leader's records through. Superusers and other logins may, and the AFTER trigger records
-- each reset with the reason the operator set (fencedjobs.fence_reset_reason). Rows are never deleted.
CREATE OR REPLACE FUNCTION consumer_fence_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE FUNCTION consumer_fence_reset_audit() RETURNS trigger LANGUAGE plpgsql AS $$
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

DROP TRIGGER consumer_fence_no_decrease ON consumer_resource_fence;
CREATE TRIGGER consumer_fence_no_decrease
    BEFORE UPDATE ON consumer_resource_fence
    FOR EACH ROW WHEN (NEW.highest_token < OLD.highest_token
                       OR (NEW.highest_token = OLD.highest_token AND NEW.highest_outbox_id < OLD.highest_outbox_id))
    EXECUTE FUNCTION consumer_fence_guard();

CREATE TRIGGER consumer_fence_reset_audit
    AFTER UPDATE ON consumer_resource_fence
    FOR EACH ROW WHEN (NEW.highest_token < OLD.highest_token
                       OR (NEW.highest_token = OLD.highest_token AND NEW.highest_outbox_id < OLD.highest_outbox_id))
    EXECUTE FUNCTION consumer_fence_reset_audit();

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fj_consumer') THEN
        GRANT SELECT ON consumer_fence_reset TO fj_consumer;
    END IF;
END
$$;

/* [jooq ignore stop] */
