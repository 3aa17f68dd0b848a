-- The relay's position replaces per-row marking. Only the scheduler lease holder writes the outbox,
-- under the lease row lock, so id order is commit order: every row up to the highest one the relay
-- has had acknowledged is published, and one row per relay role says where that is. Marking a batch
-- is one update of that row instead of an update (a new row version and two index entries) per row.
--   published_through: the highest outbox id published (or set aside with publish_error);
--   updated_at:        when the relay last moved it.
-- Unpublished rows: SELECT * FROM outbox WHERE id > (SELECT published_through FROM outbox_position WHERE role = 'relay');
CREATE TABLE outbox_position (
    role              varchar(100) PRIMARY KEY,
    published_through bigint       NOT NULL,
    updated_at        timestamptz  NOT NULL
);

/* [jooq ignore start] */

-- Where an existing relay had got to: just below its first unpublished row, else its last row.
INSERT INTO outbox_position (role, published_through, updated_at)
SELECT 'relay', coalesce((SELECT min(id) - 1 FROM outbox WHERE published_at IS NULL), (SELECT max(id) FROM outbox), 0), clock_timestamp();

-- The position only moves forward, and its row stays.
CREATE FUNCTION outbox_position_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER outbox_position_guard
    BEFORE UPDATE OR DELETE ON outbox_position
    FOR EACH ROW EXECUTE FUNCTION outbox_position_guard();

-- Rows past the position are not published yet and are never deleted (it was a row trigger on
-- published_at; now one check per statement against the position).
DROP TRIGGER outbox_unpublished_kept ON outbox;
DROP FUNCTION outbox_unpublished_kept();

CREATE FUNCTION outbox_unpublished_kept() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kept record;
BEGIN
    SELECT d.id, d.job_id INTO kept FROM deleted d
        WHERE d.id > coalesce((SELECT published_through FROM outbox_position WHERE role = 'relay'), 0) LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'outbox row % (job %) is not published yet and may not be deleted', kept.id, kept.job_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_unpublished_kept
    AFTER DELETE ON outbox
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_unpublished_kept();

-- The two partial indexes served the per-row marks; the relay now reads by primary key.
DROP INDEX outbox_unpublished;
DROP INDEX outbox_published_at;

-- published_at is gone with them (the dropped trigger and indexes were what depended on it).
/* [jooq ignore stop] */
ALTER TABLE outbox DROP COLUMN published_at;
/* [jooq ignore start] */

-- What is left to publish, for people and tools: SELECT count(*) FROM outbox_unpublished;
CREATE VIEW outbox_unpublished AS
    SELECT o.* FROM outbox o WHERE o.id > (SELECT p.published_through FROM outbox_position p WHERE p.role = 'relay');

/* [jooq ignore stop] */

/* [jooq ignore start] */

-- Retention of completed jobs (JOBS_RETENTION): the dispatcher leader deletes those completed longer
-- ago than that, oldest first, a bounded number at a time, through this index. It holds completed
-- jobs only, and costs one index entry per completion.
CREATE INDEX jobs_completed_at ON jobs (completed_at) WHERE state = 'completed';

-- fj_dispatcher deletes completed jobs only: a pending job deleted would never run.
CREATE FUNCTION jobs_pending_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_user = 'fj_dispatcher' THEN
        RAISE EXCEPTION 'fj_dispatcher deletes completed jobs only; job % is %', OLD.id, OLD.state USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER jobs_pending_kept
    BEFORE DELETE ON jobs
    FOR EACH ROW WHEN (OLD.state = 'pending')
    EXECUTE FUNCTION jobs_pending_kept();

/* [jooq ignore stop] */
