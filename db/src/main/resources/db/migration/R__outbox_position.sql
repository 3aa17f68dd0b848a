-- The relay's position as it is guarded now (V6). A repeatable migration: Flyway applies it again
-- whenever this file changes, after the versioned migrations.

/* [jooq ignore start] */

-- The position only moves forward, and its row stays.
CREATE OR REPLACE FUNCTION outbox_position_guard() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'outbox_position rows are never deleted (role %)', OLD.role;
    END IF;
    IF NEW.published_through < OLD.published_through THEN
        RAISE EXCEPTION 'the relay position may not go back (% to %)', OLD.published_through, NEW.published_through;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS outbox_position_guard ON outbox_position;
CREATE TRIGGER outbox_position_guard
    BEFORE UPDATE OR DELETE ON outbox_position
    FOR EACH ROW EXECUTE FUNCTION outbox_position_guard();

/* [jooq ignore stop] */
