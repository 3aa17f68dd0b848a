-- The shard map's functions as they are now (V13, docs/shards.md). A repeatable migration: Flyway
-- applies it again whenever this file changes, after the versioned migrations. The functions that
-- call these are PL/pgSQL, which looks them up when they run, so this file may come after theirs.

/* [jooq ignore start] */

-- The shard of a resource among shard_count shards: the first 32 bits of the MD5 of its name,
-- modulo the count. MD5 rather than PostgreSQL's internal hashtext, whose result is not promised
-- to stay the same across major versions: a resource whose pending jobs fell in two shards would
-- lose its order.
CREATE OR REPLACE FUNCTION shard_of(resource varchar, shard_count integer) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN shard_count <= 1 THEN 0
        ELSE ((('x' || left(md5(resource), 8))::bit(32)::integer & 2147483647) % shard_count)::integer END
$$;

-- The lease role (and relay position) of a shard: shard 0 keeps the name the role had before
-- shards ('scheduler', 'relay'), so that a database of then upgrades with its leases and tokens as
-- they are; shard n is 'scheduler/n'.
CREATE OR REPLACE FUNCTION shard_role(base varchar, shard integer) RETURNS varchar LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT CASE WHEN shard = 0 THEN base ELSE base || '/' || shard END
$$;

-- The shards of the map in force, 0 to shard_count - 1: every pending job is in one of them.
CREATE OR REPLACE FUNCTION shard_list() RETURNS integer[] LANGUAGE sql STABLE PARALLEL SAFE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT array_agg(s ORDER BY s) FROM shard_map m, generate_series(0, m.shard_count - 1) s
$$;

-- Asks for a new shard count. The map drains: dispatchers complete nothing more until
-- shards_switch has put the new count in force, once the relays have published every outbox row
-- of the map now in force. Asking for the count in force cancels a drain. The schema owner's (an
-- operator's): `fenced-jobs shards set N` calls it, then shards_switch until it has switched.
CREATE OR REPLACE FUNCTION shards_set(new_count integer) RETURNS shard_map LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    m shard_map;
BEGIN
    IF new_count IS NULL OR new_count < 1 OR new_count > 256 THEN
        RAISE EXCEPTION 'a shard count is between 1 and 256, not %', coalesce(new_count::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE shard_map SET target_count = CASE WHEN new_count = shard_count THEN NULL ELSE new_count END
        WHERE id = 1 RETURNING * INTO m;
    PERFORM pg_notify('shard_map', m.generation::text);
    RETURN m;
END
$$;

-- Puts the asked-for count in force, when nothing of the map now in force is left to publish:
--   0. while a shard of the old map still has rows to publish, it returns at once, locking nothing;
--   1. the jobs table is locked in SHARE ROW EXCLUSIVE mode (a producer's INSERT or a batch in flight commits
--      first, and one that comes after waits and is assigned by the new map), then the scheduler
--      leases' rows, without waiting (a batch that passed its guard before the jobs lock would wait
--      behind this call while it waited for that batch: a deadlock; the call fails instead, 55P03,
--      and is tried again). So no lease row is held while the call waits, and the holders' renewals
--      never queue behind a switch that waits for the jobs table;
--   2. if any outbox row of the old map is not yet published, nothing changes: switched is false,
--      waiting says how many shards still have rows to publish; call again;
--   3. else the map's generation moves up, the shard trigger is rewritten for the new count
--      (R__jobs.sql), every pending job gets its shard under the new count,
--      every scheduler lease ends with a new token, so that neither its holder's guard nor the
--      triggers let the old token write again (each new token is above every token the family
--      issued before, leader_lease_guard; the history shows the holder with it), and every relay
--      shard of the new map has its position, at least the last outbox row (all published).
-- So for every resource, every record of the old map reaches the topic before any of the new,
-- and with a lower token. SECURITY DEFINER: the dispatcher that holds shard 0 calls it too, so that
-- a drain finishes when the operator's command is gone; it changes nothing until the map may switch.
CREATE OR REPLACE FUNCTION shards_switch(OUT switched boolean, OUT generation integer, OUT shard_count integer,
        OUT target_count integer, OUT waiting integer, OUT moved bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    m shard_map;
    r record;
    top bigint;
BEGIN
    switched := false;
    waiting := 0;
    moved := 0;
    -- A switch that waits this long for a lock (a long producer transaction, a purge) gives up and is
    -- tried again: producers' inserts queue behind it meanwhile.
    PERFORM set_config('lock_timeout', '2s', true);
    SELECT * INTO m FROM shard_map WHERE id = 1 FOR UPDATE;
    generation := m.generation;
    shard_count := m.shard_count;
    target_count := m.target_count;
    IF m.target_count IS NULL THEN
        RETURN;
    END IF;
    -- First without locks: while the relays still have rows to publish, nothing is locked and nothing
    -- waits for this call (the dispatcher holding shard 0 calls it every 50 ms during a drain).
    waiting := shards_unpublished(m.shard_count);
    IF waiting > 0 THEN
        RETURN;
    END IF;
    -- SHARE ROW EXCLUSIVE: SHARE's hold on writers, and the lock the shard trigger's new definition takes below.
    LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;
    PERFORM 1 FROM leader_lease l WHERE split_part(l.role, '/', 1) = 'scheduler' ORDER BY l.role FOR UPDATE NOWAIT;
    waiting := shards_unpublished(m.shard_count);
    IF waiting > 0 THEN
        RETURN;
    END IF;
    UPDATE shard_map SET generation = m.generation + 1, shard_count = m.target_count, target_count = NULL, changed_at = clock_timestamp()
        WHERE id = 1;
    -- The shard trigger assigns by the new count from here on (R__jobs.sql): transactional, and no
    -- other session writes jobs until this commits (the lock above).
    PERFORM jobs_shard_trigger(m.target_count);
    -- Every pending job whose shard changes, in one statement, while producers wait: its cost is per
    -- job moved, and the jobs to move grow while the map drains. So the statement is made cheap: shard_of
    -- written out (a SQL function with a search path of its own is called, not inlined, per row), and the
    -- rows it writes already have the shard the trigger's WHEN clause asks for, so its function is not
    -- called. Measured on an idle machine, 6,000 jobs moved among 500,000 completed: 784 ms with shard_of
    -- and a trigger that read the map per row, 246 ms without either.
    UPDATE jobs j SET shard = CASE WHEN m.target_count <= 1 THEN 0
            ELSE ((('x' || left(md5(j.resource), 8))::bit(32)::integer & 2147483647) % m.target_count)::integer END
        WHERE j.state = 'pending'
          AND j.shard <> CASE WHEN m.target_count <= 1 THEN 0
            ELSE ((('x' || left(md5(j.resource), 8))::bit(32)::integer & 2147483647) % m.target_count)::integer END;
    GET DIAGNOSTICS moved = ROW_COUNT;
    -- One statement per lease: each new token is drawn above the ones the statements before drew.
    FOR r IN SELECT l.role FROM leader_lease l WHERE split_part(l.role, '/', 1) = 'scheduler' ORDER BY l.role LOOP
        UPDATE leader_lease l SET fencing_token = l.fencing_token + 1, expires_at = least(l.expires_at, clock_timestamp())
            WHERE l.role = r.role;
    END LOOP;
    SELECT coalesce(max(o.id), 0) INTO top FROM outbox o;
    INSERT INTO outbox_position (role, published_through, updated_at)
        SELECT shard_role('relay', n), top, clock_timestamp() FROM generate_series(0, m.target_count - 1) n
        ON CONFLICT (role) DO UPDATE SET published_through = greatest(outbox_position.published_through, excluded.published_through),
            updated_at = excluded.updated_at;
    switched := true;
    generation := m.generation + 1;
    shard_count := m.target_count;
    target_count := NULL;
    PERFORM pg_notify('shard_map', generation::text);
    -- Every job whose shard moved is due as it was: wake the new holders.
    PERFORM notify_jobs_due(clock_timestamp());
END
$$;

-- How many of the map's shards have outbox rows past their relay position.
CREATE OR REPLACE FUNCTION shards_unpublished(shard_count integer) RETURNS integer LANGUAGE sql STABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT count(*)::integer FROM generate_series(0, shard_count - 1) s
    WHERE EXISTS (SELECT 1 FROM outbox o
                  WHERE o.shard = s
                    AND o.id > coalesce((SELECT p.published_through FROM outbox_position p WHERE p.role = shard_role('relay', s)), 0))
$$;

REVOKE ALL ON FUNCTION shards_set(integer), shards_switch() FROM PUBLIC;

/* [jooq ignore stop] */
