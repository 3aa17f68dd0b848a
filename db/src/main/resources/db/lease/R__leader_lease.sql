-- The lease's guards as they are now: the current body of every function and trigger on
-- leader_lease and lease_takeover. The tables are in V1__lease_tables.sql of this location; a
-- change to a function or trigger here is an edit of this file, which Flyway applies again
-- (repeatable migration, re-run whenever the file changes, after the versioned ones). The guard
-- asks login_owns_schema() and login_does_work_of() of the dispatcher's schema (R__login_rights.sql)
-- who may write; PL/pgSQL looks them up only when the trigger fires.
-- The (V…) notes name the dispatcher's migrations that first made each part, before the lease had
-- a location of its own.
-- Docs: docs/schema.md "What the database refuses", which SchemaDefinitionsTest compares with the
-- live triggers.

/* [jooq ignore start] */

-- Fencing epochs. A promoted standby is on a new WAL timeline; each timeline is an epoch of 2^32
-- tokens, (timeline - 1) << 32 + 1 onwards, so a token issued after a promotion is greater than
-- every token issued before it, even those the promoted database never received. On timeline 1
-- (a database that never failed over) the base is 0. pg_walfile_name's first eight hex digits are
-- the timeline that WAL is being written on now. (V5)
CREATE OR REPLACE FUNCTION fencing_epoch_base() RETURNS bigint LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT (('x' || lpad(substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8), 16, '0'))::bit(64)::bigint - 1) << 32
$$;

-- The lease guard, for every write:
--   * rows are never deleted, the role never changes and the token never decreases;
--   * a new holder comes with a new token (two holders never share one);
--   * a login writes the lease of a role whose work it may do (login_does_work_of), so a relay's
--     login cannot take the scheduler's lease (and hold up every job), nor a dispatcher's the
--     relay's; the schema's owner is exempt;
--   * a token of an earlier epoch moves to the first token of the current one on any write, a
--     renewal included, so the holder of a lease that crossed a promotion gets a new token;
--   * a new token is above every token of the role's family: the roles of a family are its shards
--     ('scheduler', 'scheduler/1', ...; shards, V13 of the dispatcher's schema), so no two shards
--     ever hold the same token, and the first token of a shard's holder is above every token that
--     any shard issued before (a resource that moves to another shard keeps seeing its tokens
--     grow). The family's new tokens are issued one at a time (a transaction-level advisory lock).
-- (V1, V5, V10, shards)
CREATE OR REPLACE FUNCTION leader_lease_guard() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    epoch_base bigint;
    family_top bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'leader_lease rows are never deleted (role %): a new row would restart the fencing token', OLD.role;
    END IF;
    IF NOT login_owns_schema() AND NOT login_does_work_of(NEW.role) THEN
        RAISE EXCEPTION '% may not write the lease of role % (it may not do that role''s work)', current_user, NEW.role
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    epoch_base := fencing_epoch_base();
    IF TG_OP = 'UPDATE' THEN
        IF NEW.role <> OLD.role THEN
            RAISE EXCEPTION 'leader_lease.role may not change (% to %)', OLD.role, NEW.role;
        END IF;
        IF NEW.fencing_token < OLD.fencing_token THEN
            RAISE EXCEPTION 'fencing token of role % may not decrease (% to %)', OLD.role, OLD.fencing_token, NEW.fencing_token;
        END IF;
        IF NEW.holder_id <> OLD.holder_id AND NEW.fencing_token = OLD.fencing_token THEN
            RAISE EXCEPTION 'a new holder of role % needs a new fencing token (% took over % with token %)',
                OLD.role, NEW.holder_id, OLD.holder_id, OLD.fencing_token;
        END IF;
    END IF;
    IF NEW.fencing_token <= epoch_base THEN
        NEW.fencing_token := epoch_base + 1;
    END IF;
    -- An upsert fires this for its INSERT too, also when it ends up updating: a row that exists gets its
    -- token drawn by the UPDATE's firing, if its token changes, so a renewal takes no family lock. (Taken
    -- here while the upsert then waited for the row, it closed a cycle with shards_switch, which holds
    -- the rows and draws the family's tokens: renewals timed out and the switch never got through.)
    IF (TG_OP = 'INSERT' AND NOT EXISTS (SELECT 1 FROM leader_lease l WHERE l.role = NEW.role))
       OR (TG_OP = 'UPDATE' AND NEW.fencing_token <> OLD.fencing_token) THEN
        PERFORM pg_advisory_xact_lock(hashtext('fenced-jobs lease family ' || split_part(NEW.role, '/', 1)));
        SELECT max(l.fencing_token) INTO family_top FROM leader_lease l
            WHERE split_part(l.role, '/', 1) = split_part(NEW.role, '/', 1) AND l.role <> NEW.role;
        NEW.fencing_token := greatest(NEW.fencing_token, family_top + 1);
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS leader_lease_guard ON leader_lease;
CREATE TRIGGER leader_lease_guard
    BEFORE INSERT OR UPDATE OR DELETE ON leader_lease
    FOR EACH ROW EXECUTE FUNCTION leader_lease_guard();

-- Records every new token, and wakes followers when a lease is released. AFTER, not BEFORE:
-- a BEFORE INSERT trigger also fires for an upsert that ends up updating. It writes the history
-- with the owner's rights, so the services' roles need no INSERT on lease_takeover and cannot forge
-- it. (V1, V4)
CREATE OR REPLACE FUNCTION leader_lease_history() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$
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

DROP TRIGGER IF EXISTS leader_lease_history ON leader_lease;
CREATE TRIGGER leader_lease_history
    AFTER INSERT OR UPDATE ON leader_lease
    FOR EACH ROW EXECUTE FUNCTION leader_lease_history();

-- The takeover history is append-only. (V1)
CREATE OR REPLACE FUNCTION lease_takeover_append_only() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'lease_takeover is append-only';
END
$$;

DROP TRIGGER IF EXISTS lease_takeover_append_only ON lease_takeover;
CREATE TRIGGER lease_takeover_append_only
    BEFORE UPDATE OR DELETE ON lease_takeover
    FOR EACH ROW EXECUTE FUNCTION lease_takeover_append_only();

/* [jooq ignore stop] */
