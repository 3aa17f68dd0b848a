-- The jobs_due payload also names the notifying transaction: "<earliest due_at, epoch ms> <xid8>".
-- The dispatcher leader compares the transaction with the snapshots of its recent batches, to tell
-- a notification that arrives after its jobs were already completed (most of them, under load)
-- from a job it has not seen, and sends its next batch back to the start of the index only for
-- the second. A dispatcher of an earlier version reads the new payload as unparseable and runs a
-- batch from the start for each: correct, only slower, until it is upgraded.

/* [jooq ignore start] */

CREATE OR REPLACE FUNCTION jobs_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    earliest timestamptz;
BEGIN
    SELECT min(due_at) INTO earliest FROM inserted WHERE state = 'pending';
    IF earliest IS NOT NULL THEN
        PERFORM pg_notify('jobs_due', (floor(extract(epoch FROM earliest) * 1000))::bigint::text || ' ' || pg_current_xact_id()::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION jobs_notify_rescheduled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('jobs_due', (floor(extract(epoch FROM NEW.due_at) * 1000))::bigint::text || ' ' || pg_current_xact_id()::text);
    RETURN NULL;
END
$$;

/* [jooq ignore stop] */
