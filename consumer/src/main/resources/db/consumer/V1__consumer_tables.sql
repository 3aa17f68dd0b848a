-- The consumer's own tables. They may share the dispatcher's database or live in another one;
-- their Flyway history is consumer_schema_history.

-- Highest fencing token accepted per resource. A record with a lower token is stale.
CREATE TABLE consumer_resource_fence (
    resource      varchar(200) PRIMARY KEY,
    highest_token bigint       NOT NULL,
    updated_at    timestamptz  NOT NULL
);

-- Every job id the consumer has decided on, whatever the outcome: a later copy of the same
-- job is a duplicate and is skipped. Rows older than PROCESSED_RETENTION are purged.
CREATE TABLE consumer_processed (
    job_id        bigint       PRIMARY KEY,
    resource      varchar(200) NOT NULL,
    fencing_token bigint       NOT NULL,
    outcome       varchar(16)  NOT NULL,
    processed_at  timestamptz  NOT NULL,
    CONSTRAINT consumer_processed_outcome CHECK (outcome IN ('applied', 'rejected', 'dead_letter'))
);

-- Stale records: never applied, never silently dropped.
CREATE TABLE consumer_rejected (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint       NOT NULL,
    resource      varchar(200) NOT NULL,
    fencing_token bigint       NOT NULL,
    highest_token bigint       NOT NULL,
    topic         varchar(249) NOT NULL,
    kafka_partition int        NOT NULL,
    kafka_offset  bigint       NOT NULL,
    rejected_at   timestamptz  NOT NULL
);

-- Records that could not be handled: unparseable, missing fields, bad token, or an effect that
-- kept failing. The raw bytes are kept so the record can be examined and replayed.
CREATE TABLE consumer_dead_letter (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic         varchar(249)  NOT NULL,
    kafka_partition int         NOT NULL,
    kafka_offset  bigint        NOT NULL,
    record_key    varchar(1000),
    record_value  bytea,
    job_id        bigint,
    reason        varchar(2000) NOT NULL,
    dead_lettered_at timestamptz NOT NULL,
    CONSTRAINT consumer_dead_letter_record UNIQUE (topic, kafka_partition, kafka_offset)
);

-- The built-in example effect: one row per applied job. Deliberately no unique constraint on
-- job_id, so a deduplication bug would show as a duplicate row instead of being hidden.
CREATE TABLE ledger (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint       NOT NULL,
    resource      varchar(200) NOT NULL,
    fencing_token bigint       NOT NULL,
    payload       jsonb        NOT NULL,
    applied_at    timestamptz  NOT NULL
);

/* [jooq ignore start] */
CREATE INDEX consumer_processed_at ON consumer_processed (processed_at);
CREATE INDEX ledger_job_id ON ledger (job_id);
/* [jooq ignore stop] */
