-- Pause and resume (docs/dispatch.md): an operator stops the completion of one dispatch key's jobs,
-- or of every job, without deleting any. A row per paused key; a row without a key pauses
-- everything. Resuming deletes the row. The jobs stay pending and due; resumed, they go in their
-- order.
--
-- Who may: the schema's owner (an operator), as for dispatch_limits; no service role and no producer
-- may write it (one tenant must not pause another). Every login may read it: the guard that refuses
-- the completion of a paused key's job (jobs_completed_with_lease_token, R__jobs.sql) reads it with
-- the rights of whoever completes jobs, as it reads shard_map.
--
-- Once a pause has committed, no job of its key completes: a pause takes jobs in SHARE mode first
-- (dispatch_pauses_wait_for_batches, R__jobs.sql), so it waits for every transaction that may be
-- completing jobs, and a batch that starts after it waits for it and then sees it.
/* [jooq ignore start] */

CREATE TABLE dispatch_pauses (
    id           bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dispatch_key varchar(200),
    reason       varchar(1000),
    paused_by    varchar(200)  NOT NULL DEFAULT SESSION_USER,
    paused_at    timestamptz   NOT NULL DEFAULT clock_timestamp()
);

-- One row a key, and one for everything.
CREATE UNIQUE INDEX dispatch_pauses_key ON dispatch_pauses (dispatch_key) WHERE dispatch_key IS NOT NULL;
CREATE UNIQUE INDEX dispatch_pauses_everything ON dispatch_pauses ((true)) WHERE dispatch_key IS NULL;

GRANT SELECT ON dispatch_pauses TO PUBLIC;

/* [jooq ignore stop] */
