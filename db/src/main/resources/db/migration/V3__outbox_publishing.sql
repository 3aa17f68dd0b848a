-- Relay bookkeeping on the outbox.
--   published_at:  when the broker acknowledged the row (in a Kafka transaction the relay committed);
--                  NULL while unpublished.
--   publish_error: why a row was not sent (for example larger than the broker accepts); such a
--                  row is marked published so it cannot stall the relay, and it stays queryable:
--                  SELECT * FROM outbox WHERE publish_error IS NOT NULL;
-- Published rows are purged by the relay after OUTBOX_RETENTION.

ALTER TABLE outbox ADD COLUMN published_at timestamptz;
ALTER TABLE outbox ADD COLUMN publish_error varchar(1000);

/* [jooq ignore start] */

-- The relay reads unpublished rows in id (= commit) order from this index only.
CREATE INDEX outbox_unpublished ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published_at ON outbox (published_at) WHERE published_at IS NOT NULL;

CREATE FUNCTION outbox_notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_inserted', '');
    RETURN NULL;
END
$$;

-- One notification per statement (the dispatcher writes a batch in one statement).
CREATE TRIGGER outbox_notify_inserted
    AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify_inserted();

/* [jooq ignore stop] */
