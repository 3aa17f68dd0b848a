-- Shards (docs/shards.md): the jobs split by resource into shards, each dispatched under a lease and
-- a fencing token of its own and published by a relay lease of its own, so that every replica can
-- be at work.
--
-- 1. The shard map, one row: how many shards there are (shard_count), the generation of that map
--    (raised by every change of the count), and a count asked for and not yet in force
--    (target_count, while the map drains: see shards_switch, R__shards.sql).
-- 2. jobs.shard, which the database assigns (jobs_assign_shard, R__shards.sql) from the job's
--    resource and the map: a producer's INSERT does not change. outbox.shard is the completed job's,
--    written by the same statement; each relay shard publishes its own rows in id order.
-- 3. A database of before shards has one shard, shard 0, whose leases keep their roles ('scheduler',
--    'relay') and their tokens, and whose relay position is the relay's. Its jobs and outbox rows
--    get shard 0 by the columns' default, without a rewrite.
CREATE TABLE shard_map (
    id           integer     PRIMARY KEY,
    generation   integer     NOT NULL,
    shard_count  integer     NOT NULL,
    target_count integer,
    changed_at   timestamptz NOT NULL,
    CONSTRAINT shard_map_one_row CHECK (id = 1),
    CONSTRAINT shard_map_counts CHECK (shard_count BETWEEN 1 AND 256 AND (target_count IS NULL OR target_count BETWEEN 1 AND 256))
);

ALTER TABLE jobs ADD COLUMN shard integer NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN shard integer NOT NULL DEFAULT 0;

/* [jooq ignore start] */

-- A new database starts with the count its migrator gives (the placeholder: 2 from the services and
-- `fenced-jobs migrate`, Shards.DEFAULT_COUNT); one that has held jobs or leases starts with one
-- shard, which is what it had, until an operator changes it with the drain that keeps its records in
-- order (R__shards.sql).
INSERT INTO shard_map (id, generation, shard_count, target_count, changed_at)
SELECT 1, 1, CASE WHEN EXISTS (SELECT 1 FROM jobs) OR EXISTS (SELECT 1 FROM outbox) OR EXISTS (SELECT 1 FROM leader_lease) THEN 1
                  ELSE greatest(1, least(256, ${initial_shards})) END, NULL, clock_timestamp();

-- Each relay shard's position (shard 0's is the relay's, from V6), at the last outbox row: in a new
-- database there is none.
INSERT INTO outbox_position (role, published_through, updated_at)
SELECT 'relay/' || s, coalesce((SELECT max(id) FROM outbox), 0), clock_timestamp()
FROM shard_map m, generate_series(1, m.shard_count - 1) s
ON CONFLICT (role) DO NOTHING;

-- Each shard's due jobs in order: the dispatcher of shard s reads (s, due_at, id) from the left.
DROP INDEX jobs_pending_due;
CREATE INDEX jobs_pending_due ON jobs (shard, due_at, id) WHERE state = 'pending';

-- The policy path's keys, per shard.
DROP INDEX jobs_pending_key;
CREATE INDEX jobs_pending_key ON jobs (shard, (coalesce(dispatch_key, resource)), ((due_at AT TIME ZONE 'UTC') - priority * interval '1 second'), id)
    WHERE state = 'pending';

-- Each relay shard's unpublished rows: (shard, id) after its position.
CREATE INDEX outbox_shard ON outbox (shard, id);

-- What is left to publish, shard by shard from each one's position (shard 0's is the relay's):
-- SELECT count(*) FROM outbox_unpublished. Every unpublished row is in a shard of the map in force
-- (a switch of the map waits until none of the old one is left).
DROP VIEW outbox_unpublished;
CREATE VIEW outbox_unpublished AS
    SELECT o.* FROM shard_map m CROSS JOIN generate_series(0, m.shard_count - 1) s
    CROSS JOIN LATERAL (
        SELECT u.* FROM outbox u
        WHERE u.shard = s
          AND u.id > coalesce((SELECT p.published_through FROM outbox_position p
                               WHERE p.role = CASE WHEN s = 0 THEN 'relay' ELSE 'relay/' || s END), 0)) o;

ALTER TABLE shard_map SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100);

-- Every login that inserts jobs reads the map (jobs_assign_shard runs with its rights), whatever
-- grants it has: a producer's login of an application's own keeps working as it did.
GRANT SELECT ON shard_map TO PUBLIC;

/* [jooq ignore stop] */
