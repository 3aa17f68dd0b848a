-- Wake-ups for the dispatcher leader, so it sleeps until the earliest due job instead of polling.
-- Payload: the earliest due_at among the new or rescheduled pending jobs, in epoch milliseconds
-- (database time). The leader compares it with its own plan and wakes only when it is sooner.

/* [jooq ignore start] */

CREATE FUNCTION jobs_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    earliest timestamptz;
BEGIN
    SELECT min(due_at) INTO earliest FROM inserted WHERE state = 'pending';
    IF earliest IS NOT NULL THEN
        PERFORM pg_notify('jobs_due', (floor(extract(epoch FROM earliest) * 1000))::bigint::text);
    END IF;
    RETURN NULL;
END
$$;

-- One notification per INSERT or COPY statement, however many rows it writes.
CREATE TRIGGER jobs_notify_inserted
    AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_inserted();

CREATE FUNCTION jobs_notify_rescheduled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobs_due', (floor(extract(epoch FROM NEW.due_at) * 1000))::bigint::text);
    RETURN NULL;
END
$$;

-- A pending job moved earlier by an UPDATE of due_at. The leader's own updates never set due_at.
CREATE TRIGGER jobs_notify_rescheduled
    AFTER UPDATE OF due_at ON jobs
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.due_at < OLD.due_at)
    EXECUTE FUNCTION jobs_notify_rescheduled();

/* [jooq ignore stop] */
