-- The schedules' guard and wake-up as they are now (V9). A repeatable migration: Flyway applies it
-- again whenever this file changes, after the versioned migrations.

/* [jooq ignore start] */

-- A new, changed, resumed or removed schedule wakes the dispatcher leader at once.
CREATE OR REPLACE FUNCTION schedules_notify_changed() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM pg_notify('schedules_changed', '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS schedules_notify_changed ON schedules;
CREATE TRIGGER schedules_notify_changed
    AFTER INSERT OR DELETE OR UPDATE OF cron, every, time_zone, paused, starts_at, misfire ON schedules
    FOR EACH STATEMENT EXECUTE FUNCTION schedules_notify_changed();

-- Whoever edits a schedule, next_fire_at moves only forward once set; a changed rule or start
-- sets it back to NULL only together with those (the dispatcher then starts after the last fire).
CREATE OR REPLACE FUNCTION schedules_guard() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
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

DROP TRIGGER IF EXISTS schedules_guard ON schedules;
CREATE TRIGGER schedules_guard
    BEFORE UPDATE ON schedules
    FOR EACH ROW EXECUTE FUNCTION schedules_guard();

/* [jooq ignore stop] */
