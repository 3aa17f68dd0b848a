-- Dead letters an operator can act on (fenced-jobs dead-letters list|show|replay|discard), and the
-- duplicates absorbed, counted where `status` can read them.
--
-- status: dead (as dead-lettered), replay_requested (an operator asked; a consumer replays it through
-- the same dedup and fence path as a fresh record), replayed (with the outcome), discarded. Who asked
-- and when are kept. Only replayed and discarded letters are purged after RECORDS_RETENTION: one
-- nobody acted on stays until somebody does.
ALTER TABLE consumer_dead_letter ADD COLUMN status varchar(20) NOT NULL DEFAULT 'dead';
ALTER TABLE consumer_dead_letter ADD COLUMN status_by varchar(200);
ALTER TABLE consumer_dead_letter ADD COLUMN status_at timestamptz;
ALTER TABLE consumer_dead_letter ADD COLUMN replay_outcome varchar(2000);

CREATE TABLE consumer_counters (
    name  varchar(50) PRIMARY KEY,
    value bigint      NOT NULL
);
INSERT INTO consumer_counters (name, value) VALUES ('duplicates', 0);

/* [jooq ignore start] */

ALTER TABLE consumer_dead_letter ADD CONSTRAINT consumer_dead_letter_status
    CHECK (status IN ('dead', 'replay_requested', 'replayed', 'discarded'));

-- The replayer's queue: requests only, usually none.
CREATE INDEX consumer_dead_letter_replay ON consumer_dead_letter (id) WHERE status = 'replay_requested';

-- A replayed or discarded letter stays so: it is history.
CREATE FUNCTION consumer_dead_letter_final() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'dead letter % was % by % at %; it is not changed again', OLD.id, OLD.status, OLD.status_by, OLD.status_at
        USING ERRCODE = 'object_not_in_prerequisite_state';
END
$$;

CREATE TRIGGER consumer_dead_letter_final
    BEFORE UPDATE ON consumer_dead_letter
    FOR EACH ROW WHEN (OLD.status IN ('replayed', 'discarded'))
    EXECUTE FUNCTION consumer_dead_letter_final();

-- A consumer upgraded before `fenced-jobs migrate --roles` is run again must not stop at its first
-- duplicate: where fj_consumer exists, it gets what this migration's features need now.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fj_consumer') THEN
        GRANT UPDATE (status, status_at, replay_outcome) ON consumer_dead_letter TO fj_consumer;
        GRANT SELECT, UPDATE (value) ON consumer_counters TO fj_consumer;
    END IF;
END
$$;

/* [jooq ignore stop] */
