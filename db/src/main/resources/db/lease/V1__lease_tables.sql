-- The lease's tables: one row per role, and the history of its tokens. The current body of every
-- lease function and trigger is in R__leader_lease.sql (a repeatable migration, applied after this
-- one). This location has its own history table, lease_schema_history, and is migrated before the
-- dispatcher's schema (db/migration), whose guards read leader_lease.
--
-- A database migrated before the lease had a location of its own already has both tables (the
-- dispatcher's V1 created them): Flyway baselines this location at version 1 there, so this file
-- runs on new databases only. jOOQ generates its classes from this file too (see db/pom.xml).

-- One row per role ('scheduler', 'relay'). The row is never deleted: deleting it would let the
-- next insert restart the fencing token at 1 (leader_lease_guard, in R__leader_lease.sql, refuses deletes).
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
