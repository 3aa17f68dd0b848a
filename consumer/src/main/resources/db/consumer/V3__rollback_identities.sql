-- What a database rolled back by a failover can give the same number twice, told apart.
--
-- A job is its id and its creation time (jobCreatedAt in the record). consumer_processed keeps the
-- creation time of the first job seen with each id; NULL means not known (rows from before this
-- migration, or records without it), and a record with an unknown side is a duplicate of any job
-- with its id, as before. A record whose id was processed with another creation time is a job that
-- reuses the id: it is reported and claimed in consumer_processed_reissued, and applied once.
ALTER TABLE consumer_processed ADD COLUMN job_created_at timestamptz;

CREATE TABLE consumer_processed_reissued (
    job_id         bigint       NOT NULL,
    job_created_at timestamptz  NOT NULL,
    resource       varchar(200) NOT NULL,
    fencing_token  bigint       NOT NULL,
    outcome        varchar(16)  NOT NULL,
    processed_at   timestamptz  NOT NULL,
    PRIMARY KEY (job_id, job_created_at)
);

-- A tenure is its token, its holder and when the holder acquired it (tokenHolder, tokenAcquiredAt).
-- The fence keeps the tenure of the highest token; NULL means not known.
ALTER TABLE consumer_resource_fence ADD COLUMN highest_token_holder varchar(200);
ALTER TABLE consumer_resource_fence ADD COLUMN highest_token_acquired_at timestamptz;

-- The ledger (the example effect) keeps the job's creation time, so that an effect can be matched to
-- the job it belongs to even when two jobs had the same id.
ALTER TABLE ledger ADD COLUMN job_created_at timestamptz;

-- Every reuse the consumer saw: kind job_id (an id processed before, now on a job created at another
-- time) or token (a token accepted before, now from another tenure). Each is also logged at ERROR.
CREATE TABLE consumer_reused (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind              varchar(16)   NOT NULL,
    job_id            bigint        NOT NULL,
    resource          varchar(200)  NOT NULL,
    fencing_token     bigint        NOT NULL,
    job_created_at    timestamptz,
    token_holder      varchar(200),
    token_acquired_at timestamptz,
    previous          varchar(1000) NOT NULL,
    topic             varchar(249)  NOT NULL,
    kafka_partition   int           NOT NULL,
    kafka_offset      bigint        NOT NULL,
    seen_at           timestamptz   NOT NULL,
    CONSTRAINT consumer_reused_kind CHECK (kind IN ('job_id', 'token'))
);

/* [jooq ignore start] */
CREATE INDEX consumer_processed_reissued_at ON consumer_processed_reissued (processed_at);

-- The highest token never goes down, and a fence row is never deleted: either would let a stale
-- record through.
CREATE FUNCTION consumer_fence_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'consumer_resource_fence rows are never deleted (resource %)', OLD.resource;
    END IF;
    RAISE EXCEPTION 'the highest token of resource % may not decrease (% to %)', OLD.resource, OLD.highest_token, NEW.highest_token;
END
$$;

CREATE TRIGGER consumer_fence_no_decrease
    BEFORE UPDATE ON consumer_resource_fence
    FOR EACH ROW WHEN (NEW.highest_token < OLD.highest_token)
    EXECUTE FUNCTION consumer_fence_guard();

CREATE TRIGGER consumer_fence_no_delete
    BEFORE DELETE ON consumer_resource_fence
    FOR EACH ROW EXECUTE FUNCTION consumer_fence_guard();
/* [jooq ignore stop] */
