-- Schema of the fenced job dispatcher.
--
-- jOOQ generates its classes from this file at build time by replaying it into H2 (DDLDatabase),
-- so keys are varchar, not text, and PL/pgSQL sits between jOOQ ignore markers.

-- One row per role ('scheduler', 'relay'). The row is never deleted: deleting it would let the
-- next insert restart the fencing token at 1 (a trigger below refuses deletes).
CREATE TABLE leader_lease (
    role          varchar(100) PRIMARY KEY,
    holder_id     varchar(200) NOT NULL,
    fencing_token bigint       NOT NULL CHECK (fencing_token > 0),
    expires_at    timestamptz  NOT NULL
);

-- Every change of fencing token, written by a trigger on leader_lease, so the history holds even
-- for writes made by hand. Token history of a role:
--   SELECT * FROM lease_takeover WHERE role = 'scheduler' ORDER BY fencing_token;
CREATE TABLE lease_takeover (
    role          varchar(100) NOT NULL,
    fencing_token bigint       NOT NULL,
    holder_id     varchar(200) NOT NULL,
    acquired_at   timestamptz  NOT NULL,
    expires_at    timestamptz  NOT NULL,
    PRIMARY KEY (role, fencing_token)
);

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

-- Refuses the writes that would break the token's guarantees, whoever makes them.
CREATE FUNCTION leader_lease_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'leader_lease rows are never deleted (role %): a new row would restart the fencing token', OLD.role;
    END IF;
    IF NEW.role <> OLD.role THEN
        RAISE EXCEPTION 'leader_lease.role may not change (% to %)', OLD.role, NEW.role;
    END IF;
    IF NEW.fencing_token < OLD.fencing_token THEN
        RAISE EXCEPTION 'fencing token of role % may not decrease (% to %)', OLD.role, OLD.fencing_token, NEW.fencing_token;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER leader_lease_guard
    BEFORE UPDATE OR DELETE ON leader_lease
    FOR EACH ROW EXECUTE FUNCTION leader_lease_guard();

-- Records every new token, and wakes followers when a lease is released. AFTER, not BEFORE:
-- a BEFORE INSERT trigger also fires for an upsert that ends up updating.
CREATE FUNCTION leader_lease_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.fencing_token <> OLD.fencing_token THEN
        INSERT INTO lease_takeover (role, fencing_token, holder_id, acquired_at, expires_at)
        VALUES (NEW.role, NEW.fencing_token, NEW.holder_id, clock_timestamp(), NEW.expires_at);
    ELSIF NEW.expires_at < OLD.expires_at THEN
        PERFORM pg_notify('lease_released', NEW.role);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER leader_lease_history
    AFTER INSERT OR UPDATE ON leader_lease
    FOR EACH ROW EXECUTE FUNCTION leader_lease_history();

-- Writes to the takeover history are append-only.
CREATE FUNCTION lease_takeover_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'lease_takeover is append-only';
END
$$;

CREATE TRIGGER lease_takeover_append_only
    BEFORE UPDATE OR DELETE ON lease_takeover
    FOR EACH ROW EXECUTE FUNCTION lease_takeover_append_only();

/* [jooq ignore stop] */
