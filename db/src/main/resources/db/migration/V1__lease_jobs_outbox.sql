-- Schema of the fenced job dispatcher: jobs and the outbox. The lease's tables (leader_lease,
-- lease_takeover), which this file created until the lease became its own migration location, are
-- in db/lease; a database migrated before then keeps them as they are.
--
-- jOOQ generates its classes from this file at build time by replaying it into H2 (DDLDatabase),
-- so keys are varchar, not text, and PL/pgSQL sits between jOOQ ignore markers.

-- Producers write here with plain SQL. Only id is generated; every other column but due_at has a
-- default, and the article's INSERT INTO jobs (due_at) VALUES (clock_timestamp()) works as is.
CREATE TABLE jobs (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    due_at             timestamptz  NOT NULL,
    state              varchar(16)  NOT NULL DEFAULT 'pending',
    completed_by_token bigint,
    resource           varchar(200) NOT NULL DEFAULT 'default',
    payload            jsonb        NOT NULL DEFAULT '{}',
    unique_key         varchar(200),
    created_at         timestamptz  NOT NULL DEFAULT CURRENT_TIMESTAMP,
    completed_at       timestamptz,
    CONSTRAINT jobs_unique_key UNIQUE (unique_key),
    CONSTRAINT jobs_state CHECK (state IN ('pending', 'completed')),
    CONSTRAINT jobs_completion CHECK (
        (state = 'pending' AND completed_by_token IS NULL AND completed_at IS NULL)
        OR (state = 'completed' AND completed_by_token IS NOT NULL AND completed_at IS NOT NULL))
);

-- Completed jobs' messages, written in the transaction that completed the job, with its token.
-- Only the lease holder writes here, under the lease row lock, so id order is commit order.
CREATE TABLE outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint       NOT NULL,
    resource      varchar(200) NOT NULL,
    fencing_token bigint       NOT NULL,
    payload       jsonb        NOT NULL,
    due_at        timestamptz  NOT NULL,
    completed_at  timestamptz  NOT NULL,
    CONSTRAINT outbox_job_id UNIQUE (job_id)
);

/* [jooq ignore start] */

-- "Due pending jobs in due_at order" reads this partial index: it holds pending jobs only, so it
-- stays as small as the backlog however many completed jobs the table keeps.
CREATE INDEX jobs_pending_due ON jobs (due_at, id) WHERE state = 'pending';

/* [jooq ignore stop] */
