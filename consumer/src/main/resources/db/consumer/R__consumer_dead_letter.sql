-- The dead letters' guard as it is now (V5). A repeatable migration: Flyway applies it again
-- whenever this file changes, after the consumer's versioned migrations.

/* [jooq ignore start] */

-- A replayed or discarded letter stays so: it is history.
CREATE OR REPLACE FUNCTION consumer_dead_letter_final() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'dead letter % was % by % at %; it is not changed again', OLD.id, OLD.status, OLD.status_by, OLD.status_at
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

DROP TRIGGER IF EXISTS consumer_dead_letter_final ON consumer_dead_letter;
CREATE TRIGGER consumer_dead_letter_final
    BEFORE UPDATE ON consumer_dead_letter
    FOR EACH ROW WHEN (OLD.status IN ('replayed', 'discarded'))
    EXECUTE FUNCTION consumer_dead_letter_final();

/* [jooq ignore stop] */
