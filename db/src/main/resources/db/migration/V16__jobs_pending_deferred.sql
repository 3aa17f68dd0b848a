-- The policy path's batch (dispatch_batch, R__jobs.sql) lists only the keys that may have due jobs:
-- those with a pending job ranked no later than now less the lowest priority pending. This index
-- answers that lowest priority with one descent. It holds only pending jobs of a negative priority,
-- so it stays empty, and costs a producer's INSERT nothing, while nobody defers a job that way.
/* [jooq ignore start] */

CREATE INDEX jobs_pending_deferred ON jobs (shard, priority) WHERE state = 'pending' AND priority < 0;

/* [jooq ignore stop] */
