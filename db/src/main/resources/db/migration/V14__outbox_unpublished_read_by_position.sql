-- What is left to publish (SELECT count(*) FROM outbox_unpublished, as `fenced-jobs status` asks)
-- reads each shard's rows after its position, whatever the planner estimates.
--
-- V13's view let the planner flatten the per-shard subquery into a join of the shards with the
-- whole outbox, and it guesses 1,570,000 shards (shard_map and generate_series have no statistics
-- it can use). Once autovacuum had analyzed outbox_position, the position's lookup looked cheap
-- enough for a merge join on the shard that read every entry of outbox (shard, id) and looked the
-- position up for each: 1.5 s for an outbox of 460,000 rows under the end-to-end benchmark's load,
-- 0.5 s for 400,000 idle, where 10 rows were unpublished (an hour of rows is kept by default). The
-- subquery's OFFSET 0 keeps it a subquery of its own, run for each shard with the shard as a
-- parameter: an index read from the position on (0.3 ms there). OutboxLagTest.
/* [jooq ignore start] */

CREATE OR REPLACE VIEW outbox_unpublished AS
    SELECT o.* FROM shard_map m CROSS JOIN generate_series(0, m.shard_count - 1) s
    CROSS JOIN LATERAL (
        SELECT u.* FROM outbox u
        WHERE u.shard = s
          AND u.id > coalesce((SELECT p.published_through FROM outbox_position p
                               WHERE p.role = CASE WHEN s = 0 THEN 'relay' ELSE 'relay/' || s END), 0)
        OFFSET 0) o;

/* [jooq ignore stop] */
