-- Patient retries of failing effects (EFFECT_RETRY_MAX_AGE). A record whose effect still fails
-- after EFFECT_MAX_ATTEMPTS quick tries waits here, durable across restarts and rebalances, and is
-- tried again with exponential back-off and jitter until it succeeds or is older than the maximum
-- age (then dead-lettered). Every later record of its resource waits behind it, in order (seq), so
-- the resource's effects stay in commit order; other resources flow on. Not yet claimed in
-- consumer_processed: a waiting job has not been decided.
CREATE TABLE consumer_waiting (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id          bigint        NOT NULL,
    job_created_at  timestamptz,
    resource        varchar(200)  NOT NULL,
    topic           varchar(249)  NOT NULL,
    kafka_partition int           NOT NULL,
    kafka_offset    bigint        NOT NULL,
    record_key      varchar(1000),
    record_value    bytea,
    attempts        int           NOT NULL,
    first_failed_at timestamptz   NOT NULL,
    next_attempt_at timestamptz   NOT NULL,
    last_error      varchar(2000) NOT NULL
);

/* [jooq ignore start] */

CREATE INDEX consumer_waiting_resource ON consumer_waiting (resource, seq);

-- A job waits once (a redelivery of it is a duplicate); a job is its id and its creation time, so
-- another job that a failover handed the same id is not mistaken for it.
CREATE UNIQUE INDEX consumer_waiting_job ON consumer_waiting (job_id, coalesce(job_created_at, '-infinity'::timestamptz));

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fj_consumer') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON consumer_waiting TO fj_consumer;
    END IF;
END
$$;

/* [jooq ignore stop] */
