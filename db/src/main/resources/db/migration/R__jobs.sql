-- The jobs table's guards, wake-ups and control functions as they are now (V2, V5, V6, V8, V9,
-- V10). A repeatable migration: Flyway applies it again whenever this file changes, after the
-- versioned migrations. Grants to the roles are in Roles (fenced-jobs migrate --roles).

/* [jooq ignore start] */

-- Wake-ups for the dispatcher leader, so it sleeps until the earliest due job instead of polling.
-- Payload: "<earliest due_at among the new or rescheduled pending jobs, epoch ms (database time)>
-- <the notifying transaction's xid8>". The leader compares the transaction with the snapshots of
-- its recent batches, to tell a notification that arrives after its jobs were already completed
-- from a job it has not seen. The one place the payload is written (DispatchLoop.Notified reads it).
CREATE OR REPLACE FUNCTION notify_jobs_due(due timestamptz) RETURNS void LANGUAGE sql
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT pg_notify('jobs_due', (floor(extract(epoch FROM due) * 1000))::bigint::text || ' ' || pg_current_xact_id()::text)
$$;

CREATE OR REPLACE FUNCTION jobs_notify_inserted() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    earliest timestamptz;
BEGIN
    SELECT min(due_at) INTO earliest FROM inserted WHERE state = 'pending';
    IF earliest IS NOT NULL THEN
        PERFORM notify_jobs_due(earliest);
    END IF;
    RETURN NULL;
END
$$;

-- One notification per INSERT or COPY statement, however many rows it writes.
DROP TRIGGER IF EXISTS jobs_notify_inserted ON jobs;
CREATE TRIGGER jobs_notify_inserted
    AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_inserted();

CREATE OR REPLACE FUNCTION jobs_notify_rescheduled() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    PERFORM notify_jobs_due(NEW.due_at);
    RETURN NULL;
END
$$;

-- A pending job moved earlier by an UPDATE of due_at. The leader's own updates never set due_at.
DROP TRIGGER IF EXISTS jobs_notify_rescheduled ON jobs;
CREATE TRIGGER jobs_notify_rescheduled
    AFTER UPDATE OF due_at ON jobs
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.due_at < OLD.due_at)
    EXECUTE FUNCTION jobs_notify_rescheduled();

-- A completed or cancelled job is final: never reopened, completed, cancelled again or edited. The
-- WHEN clause is evaluated without calling the function, so pending jobs cost nothing.
CREATE OR REPLACE FUNCTION jobs_completed_are_final() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF OLD.state = 'cancelled' THEN
        RAISE EXCEPTION 'job % was cancelled at %; a cancelled job is never changed', OLD.id, OLD.cancelled_at
            USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'job % was completed with token % at %; a completed job is never changed', OLD.id, OLD.completed_by_token, OLD.completed_at
        USING ERRCODE = 'check_violation';
END
$$;

DROP TRIGGER IF EXISTS jobs_completed_are_final ON jobs;
CREATE TRIGGER jobs_completed_are_final
    BEFORE UPDATE ON jobs
    FOR EACH ROW WHEN (OLD.state <> 'pending')
    EXECUTE FUNCTION jobs_completed_are_final();

-- Only the current token of the job's shard's scheduler lease completes it (a switch of the shard
-- map gives every scheduler lease a new token: R__shards.sql). Once per statement:
-- the dispatcher completes a batch and writes its outbox rows in one statement. Every shard's token
-- is one no other shard's lease has (leader_lease_guard), so the holder of one shard cannot
-- complete a job of another.
CREATE OR REPLACE FUNCTION jobs_completed_with_lease_token() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    forged record;
BEGIN
    SELECT c.id, c.shard, c.completed_by_token, l.fencing_token AS lease_token INTO forged
        -- shard_role written out: a function with its own search path costs a setting's save and
        -- restore per call, per row here.
        FROM changed c LEFT JOIN leader_lease l ON l.role = CASE WHEN c.shard = 0 THEN 'scheduler' ELSE 'scheduler/' || c.shard END
        WHERE c.state = 'completed' AND c.completed_by_token IS DISTINCT FROM l.fencing_token LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job % (shard %) completed with token %, but the shard''s scheduler lease has token %: only the shard''s lease holder completes its jobs, with its own token',
            forged.id, forged.shard, forged.completed_by_token, coalesce(forged.lease_token::text, '(none)') USING ERRCODE = 'check_violation';
    END IF;
    -- No job of a paused key (dispatch_pauses, V15), nor any while everything is paused. A pause
    -- waits for the statements that may complete jobs (dispatch_pauses_wait_for_batches), so one
    -- that committed before this statement is seen here.
    IF EXISTS (SELECT 1 FROM dispatch_pauses) THEN
        SELECT c.id, coalesce(c.dispatch_key, c.resource) AS dkey, p.dispatch_key IS NULL AS everything, p.paused_by INTO forged
            FROM changed c JOIN dispatch_pauses p ON p.dispatch_key IS NULL OR p.dispatch_key = coalesce(c.dispatch_key, c.resource)
            WHERE c.state = 'completed' LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'job % (key %) completed while %, paused by %: a paused key''s jobs stay pending until it is resumed',
                forged.id, forged.dkey, CASE WHEN forged.everything THEN 'everything is paused' ELSE 'its key is paused' END, forged.paused_by
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS jobs_completed_with_lease_token ON jobs;
CREATE TRIGGER jobs_completed_with_lease_token
    AFTER UPDATE ON jobs
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_completed_with_lease_token();

-- A job's shard is the database's to assign, from its resource and the shard map in force
-- (V13, R__shards.sql): whatever an INSERT or UPDATE names, the shard is set here. The trigger
-- carries the count in force, written into its definition by jobs_shard_trigger: here, from the
-- map, and by the map's switch (shards_switch), which holds the jobs table against writers while
-- it puts a new count in force, so no job is assigned by a map that is no longer in force when it
-- commits. The count in the definition, not read from the map per row: reading it cost a query a
-- row, and the function's call on every row was the rest. Measured on PostgreSQL 17, an idle 2-core
-- machine, 50,000 jobs in one INSERT: 46 us a row with the map read per row, 22 with no trigger; now
-- 22 with one shard (the WHEN clause is false for every row that names no shard: no call), 30 with
-- two and 31 with four (a call for each row whose shard is not the default 0).
CREATE OR REPLACE FUNCTION jobs_assign_shard() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    n integer := TG_ARGV[0]::integer;
BEGIN
    -- shard_of written out (R__shards.sql; ShardSchemaTest compares them).
    NEW.shard := CASE WHEN n <= 1 THEN 0
        ELSE ((('x' || left(md5(NEW.resource), 8))::bit(32)::integer & 2147483647) % n)::integer END;
    RETURN NEW;
END
$$;

-- (Re)defines jobs_assign_shard for shard_count shards: called only where the jobs table is held
-- against writers (a migration, shards_switch's SHARE ROW EXCLUSIVE lock, which CREATE OR REPLACE
-- TRIGGER takes too). Its WHEN clause is the shard the row must have, so the function is called
-- only for a row whose shard is not already right.
CREATE OR REPLACE FUNCTION jobs_shard_trigger(shard_count integer) RETURNS void LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    EXECUTE format('CREATE OR REPLACE TRIGGER jobs_assign_shard BEFORE INSERT OR UPDATE OF resource, shard ON jobs'
        ' FOR EACH ROW WHEN (NEW.shard IS DISTINCT FROM (%s)) EXECUTE FUNCTION jobs_assign_shard(%L)',
        CASE WHEN shard_count <= 1 THEN '0'
            ELSE format('((''x'' || left(md5(NEW.resource), 8))::bit(32)::integer & 2147483647) %% %s', shard_count) END,
        shard_count);
END
$$;
REVOKE ALL ON FUNCTION jobs_shard_trigger(integer) FROM PUBLIC;

-- The jobs table first, then the map: a switch that commits meanwhile (a replica of the version before,
-- during a rolling upgrade) either waits for this migration or has committed its count before the map
-- is read here (a statement's snapshot is taken after the lock), so the trigger never gets a count
-- that is no longer in force.
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;
SELECT jobs_shard_trigger((SELECT m.shard_count FROM shard_map m WHERE m.id = 1));

-- Pending jobs are deleted by nobody but the owner: the dispatcher's retention deletes completed
-- jobs, and a producer cancels through cancel_job.
CREATE OR REPLACE FUNCTION jobs_pending_kept() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF NOT login_owns_schema() THEN
        RAISE EXCEPTION '% deletes completed jobs only; job % is %', current_user, OLD.id, OLD.state USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END
$$;

DROP TRIGGER IF EXISTS jobs_pending_kept ON jobs;
CREATE TRIGGER jobs_pending_kept
    BEFORE DELETE ON jobs
    FOR EACH ROW WHEN (OLD.state = 'pending')
    EXECUTE FUNCTION jobs_pending_kept();

-- A login that may complete jobs inserts only the occurrences of existing schedules, with their
-- resource and payload, its name in submitted_by and the key schedule:<name>@...: one that could
-- also submit work of its own could make effects out of nothing. Checked once per statement over
-- the rows it inserted, so a producer's bulk insert pays one privilege check, not one per row.
CREATE OR REPLACE FUNCTION jobs_inserted_by_dispatcher() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    bad record;
BEGIN
    IF login_owns_schema() OR NOT has_column_privilege(current_user, 'jobs', 'completed_by_token', 'UPDATE') THEN
        RETURN NULL;
    END IF;
    SELECT n.unique_key INTO bad FROM inserted_jobs n
    WHERE NOT EXISTS (SELECT 1 FROM schedules s
                      WHERE n.submitted_by = 'schedule:' || s.name
                        AND left(n.unique_key, length(s.name) + 10) = 'schedule:' || s.name || '@'
                        AND n.resource = s.resource AND n.payload = s.payload AND n.due_at >= s.starts_at)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'permission denied: % may complete jobs, so it inserts only the occurrences of existing schedules, with their resource and payload (key %)',
            current_user, coalesce(bad.unique_key, '(none)') USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS jobs_inserted_by_dispatcher ON jobs;
CREATE TRIGGER jobs_inserted_by_dispatcher
    AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobs_inserted_by_dispatcher();

-- What a producer may see and do: its own jobs only (submitted_by = its login), or every job for a
-- role that may update jobs outright (the schema owner, an operator). The functions run with the
-- owner's rights; nobody may call them unless granted (Roles: fj_producer). The view my_jobs
-- inlines the same predicate (V9).
CREATE OR REPLACE FUNCTION jobs_visible_to(submitter varchar, viewer name) RETURNS boolean LANGUAGE sql STABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT submitter = viewer::text OR has_table_privilege(viewer, 'public.jobs', 'UPDATE')
$$;

-- The job a producer names, locked: by id, or by unique key when the id is null.
CREATE OR REPLACE FUNCTION job_for_control(job_id bigint, key varchar, action text) RETURNS jobs LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    j jobs;
BEGIN
    IF job_id IS NOT NULL THEN
        SELECT * INTO j FROM jobs WHERE id = job_id FOR UPDATE;
    ELSE
        SELECT * INTO j FROM jobs WHERE unique_key = key FOR UPDATE;
    END IF;
    IF NOT FOUND OR NOT jobs_visible_to(j.submitted_by, session_user) THEN
        RAISE EXCEPTION 'no job % submitted by %', coalesce(job_id::text, 'with key ' || key), session_user
            USING ERRCODE = 'no_data_found', HINT = 'a producer controls only the jobs its own login submitted';
    END IF;
    IF j.state = 'completed' THEN
        RAISE EXCEPTION 'job % was already completed at % (token %); it cannot be %', j.id, j.completed_at, j.completed_by_token, action
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN j;
END
$$;

-- Cancels a pending job; cancelling a cancelled job again is a no-op. Returns the job's id.
CREATE OR REPLACE FUNCTION cancel_job_internal(job_id bigint, key varchar) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    j jobs := job_for_control(job_id, key, 'cancelled');
BEGIN
    IF j.state = 'pending' THEN
        UPDATE jobs SET state = 'cancelled', cancelled_at = clock_timestamp() WHERE id = j.id;
    END IF;
    RETURN j.id;
END
$$;

CREATE OR REPLACE FUNCTION reschedule_job_internal(job_id bigint, key varchar, new_due_at timestamptz) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF new_due_at IS NULL THEN
        RAISE EXCEPTION 'a job needs a due time' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    RETURN reschedule_job_internal(job_id, key, new_due_at, NULL::integer);
END
$$;

-- Moves a pending job to a new due time, a new priority (seconds, docs/dispatch.md), or both; NULL
-- keeps what the job has.
CREATE OR REPLACE FUNCTION reschedule_job_internal(job_id bigint, key varchar, new_due_at timestamptz, new_priority integer) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    j jobs := job_for_control(job_id, key, 'rescheduled');
BEGIN
    IF new_due_at IS NULL AND new_priority IS NULL THEN
        RAISE EXCEPTION 'nothing to change: give a due time, a priority or both' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF j.state = 'cancelled' THEN
        RAISE EXCEPTION 'job % was cancelled at %; it cannot be rescheduled', j.id, j.cancelled_at
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE jobs SET due_at = coalesce(new_due_at, jobs.due_at), priority = coalesce(new_priority, jobs.priority) WHERE id = j.id;
    RETURN j.id;
END
$$;

CREATE OR REPLACE FUNCTION cancel_job(job_id bigint) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$ SELECT cancel_job_internal(job_id, NULL) $$;
CREATE OR REPLACE FUNCTION cancel_job_by_key(key varchar) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$ SELECT cancel_job_internal(NULL, key) $$;
CREATE OR REPLACE FUNCTION reschedule_job(job_id bigint, due_at timestamptz) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$ SELECT reschedule_job_internal(job_id, NULL, due_at) $$;
CREATE OR REPLACE FUNCTION reschedule_job_by_key(key varchar, due_at timestamptz) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$ SELECT reschedule_job_internal(NULL, key, due_at) $$;
CREATE OR REPLACE FUNCTION reschedule_job(job_id bigint, due_at timestamptz, priority integer) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$ SELECT reschedule_job_internal(job_id, NULL, due_at, priority) $$;
CREATE OR REPLACE FUNCTION reschedule_job_by_key(key varchar, due_at timestamptz, priority integer) RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, public, pg_temp AS $$ SELECT reschedule_job_internal(NULL, key, due_at, priority) $$;

REVOKE ALL ON FUNCTION jobs_visible_to(varchar, name), job_for_control(bigint, varchar, text), cancel_job_internal(bigint, varchar),
    reschedule_job_internal(bigint, varchar, timestamptz), cancel_job(bigint), cancel_job_by_key(varchar),
    reschedule_job(bigint, timestamptz), reschedule_job_by_key(varchar, timestamptz),
    reschedule_job_internal(bigint, varchar, timestamptz, integer), reschedule_job(bigint, timestamptz, integer),
    reschedule_job_by_key(varchar, timestamptz, integer) FROM PUBLIC;

-- The dispatch policy (docs/dispatch.md) -------------------------------------------------------

-- Whether the dispatcher's batch takes the policy path: while any rate limit or pause is defined, or any
-- pending job names a priority or a dispatch key (through the partial index jobs_pending_policy,
-- empty while nobody does). Otherwise the plain batch completes due jobs in (due_at, id) order.
-- PL/pgSQL, which keeps its plan for the session: a SQL function with a SET clause is not inlined,
-- and PostgreSQL 17 plans its query again at every call (0.4 ms, once a batch: measured with
-- pg_stat_statements at 400 jobs/s over two shards, where the answer itself takes microseconds).
CREATE OR REPLACE FUNCTION dispatch_policy_active() RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    -- The index read from its newest entry: batches complete the oldest jobs first, and the entries
    -- of completed jobs stay in the index until a vacuum, so read from its oldest this stepped over
    -- a drained backlog's (1,559 pages and 7.3 ms a batch, 1,000 keys drained at batch 500).
    RETURN EXISTS (SELECT 1 FROM dispatch_limits)
        OR EXISTS (SELECT 1 FROM dispatch_pauses)
        OR (SELECT j.id FROM jobs j WHERE j.state = 'pending' AND (j.priority <> 0 OR j.dispatch_key IS NOT NULL)
            ORDER BY j.id DESC LIMIT 1) IS NOT NULL;
END
$$;

-- The statement after the lease check in every batch transaction (FencedJobBatches.policyActive): holds jobs in ROW
-- EXCLUSIVE mode from here to the commit, as the batch's UPDATE will, so that a pause (which takes
-- SHARE, dispatch_pauses_wait_for_batches) either committed before and is seen by every statement
-- after this one, or waits for the batch's commit. Then whether the policy path decides the batch.
CREATE OR REPLACE FUNCTION dispatch_batch_begin() RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE jobs IN ROW EXCLUSIVE MODE;
    RETURN dispatch_policy_active();
END
$$;

-- A time as microseconds since the epoch: what the policy path's remembered walk is stamped with.
CREATE OR REPLACE FUNCTION dispatch_micros(t timestamptz) RETURNS bigint LANGUAGE sql STABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT (extract(epoch FROM t) * 1000000)::bigint
$$;

-- The keys of shard p_shard with a pending job ranked no later than p_due_rank, in key order: after
-- p_after (NULL: from the first) and up to p_upto (NULL: to the last), paused keys passed over, at most
-- p_want. One index descent a key (a skip scan of jobs_pending_key): a key's entries ranked after
-- p_due_rank are passed over inside the index.
CREATE OR REPLACE FUNCTION dispatch_walk(p_shard integer, p_after varchar, p_upto varchar, p_due_rank timestamp,
        p_paused boolean, p_want integer) RETURNS varchar[]
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_first varchar;
BEGIN
    -- The first key apart, so that each statement's bound is one the index can start from whatever
    -- the plan (PL/pgSQL keeps a plan for any values, in which 'p_after IS NULL OR key > p_after'
    -- would read the whole index).
    IF p_after IS NULL THEN
        v_first := (SELECT min(coalesce(j.dispatch_key, j.resource)) FROM jobs j WHERE j.state = 'pending' AND j.shard = p_shard
                      AND (j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second' <= p_due_rank);
    ELSE
        v_first := (SELECT min(coalesce(j.dispatch_key, j.resource)) FROM jobs j WHERE j.state = 'pending' AND j.shard = p_shard
                      AND coalesce(j.dispatch_key, j.resource) > p_after
                      AND (j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second' <= p_due_rank);
    END IF;
    RETURN (WITH RECURSIVE walk(k) AS (
                SELECT v_first
                UNION ALL
                SELECT (SELECT min(coalesce(j.dispatch_key, j.resource)) FROM jobs j
                        WHERE j.state = 'pending' AND j.shard = p_shard AND coalesce(j.dispatch_key, j.resource) > w.k
                          AND (j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second' <= p_due_rank)
                FROM walk w WHERE w.k IS NOT NULL AND (p_upto IS NULL OR w.k < p_upto)
            )
            SELECT coalesce(array_agg(t.k), '{}') FROM (SELECT w.k FROM walk w WHERE w.k IS NOT NULL AND (p_upto IS NULL OR w.k <= p_upto)
                AND (NOT p_paused OR NOT EXISTS (SELECT 1 FROM dispatch_pauses p WHERE p.dispatch_key = w.k)) LIMIT p_want) t);
END
$$;

-- The policy path's batch, for the scheduler lease's holder, in the transaction of its lease guard.
-- One instant of database time, now, stands for the whole batch: it decides what is due, refills
-- the token buckets, and is every completed job's completed_at.
--
-- 1. The keys (a job's dispatch_key, else its resource) that may have due jobs, in key order after
--    start_key and wrapping round, in chunks of at most 64 keys (and no more than the room left in
--    the batch); the next chunk is walked only while the batch has room, and the keys not reached
--    wait for the next batch, which starts after the last key visited here. A key whose pending
--    jobs all rank after now (moved later by the lowest negative priority pending, through
--    jobs_pending_deferred, V16) has none due and is stepped over inside the index, without a
--    visit: keys whose jobs are due tomorrow cost a batch an index entry each, not a batch slot.
-- 2. A chunk's keys share the room left: each gets up to room / keys of its due jobs (the
--    remainder one each to the first keys), in rank order (due time moved earlier by the priority's
--    seconds, then id), and no more than its limit's whole tokens. With 64 keys in a chunk and a
--    batch of 500, a key whose turn comes takes 7 or 8 jobs rather than one: a visit (an index
--    descent and read, a limit's row locked and written) is paid once for them all.
-- 3. Room left in the batch goes to the chunk's keys that had more, in the same order.
-- 4. The chosen jobs are completed with the token (SKIP LOCKED: a job a producer is updating waits
--    for the next batch), their outbox rows written in rank order, and each limited key's bucket
--    keeps what is left: refilled to now, less what it completed.
--
-- Returns how many jobs it completed (at most batch_limit); whether a batch could complete more at
-- once (it was full, or a key was left because another batch held its limit); else when the next
-- job becomes due or the next token of a key held back by its limit comes (at most a second away
-- when SKIP LOCKED passed a job over; NULL when nothing is pending and nothing held, so an idle
-- leader sends nothing); the keys held back; and the batch's database time.
CREATE OR REPLACE FUNCTION dispatch_batch(p_token bigint, p_shard integer, batch_limit integer, start_key varchar,
        OUT completed integer, OUT next_key varchar, OUT more boolean, OUT next_at timestamptz, OUT held_keys integer,
        OUT database_now timestamptz)
    LANGUAGE plpgsql
    -- Its statements are planned with sorts allowed, whatever the batch's transaction says (the
    -- plain path's enable_sort = off, set before the path is known): without them the limits'
    -- lock read all of dispatch_limits in key order for 64 keys (6.3 ms a batch against 0.2).
    SET enable_sort = on
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    -- The keys a chunk visits at most: with more keys than that, each gets at least
    -- batch_limit / 64 of its due jobs when its turn comes, rather than one.
    v_fanout integer := least(batch_limit, 64);
    v_due_rank timestamp;
    v_keys varchar[];
    v_n integer;
    v_caps integer[];
    v_avail double precision[];
    v_rate double precision[];
    v_taken integer[];
    v_locked varchar[];
    v_room integer;
    v_share integer;
    v_want integer;
    v_width integer;
    v_got bigint[];
    v_chunk_ids bigint[];
    v_ids bigint[];
    v_fill_key varchar;
    v_cursor varchar;
    v_second boolean;
    v_second_at integer;
    v_chunk integer;
    v_chunk_more boolean;
    v_skipped boolean;
    v_seen_keys varchar[];
    v_seen_avail double precision[];
    v_seen_taken integer[];
    v_seen_rate double precision[];
    v_held_until timestamptz;
    v_future timestamptz;
    v_paused boolean;
    v_limited boolean;
    v_max_id bigint;
    v_walk text[];
    v_remembered boolean;
    v_memo boolean;
    v_memo_micros bigint;
    v_memo_text text;
    v_after_rank timestamp[];
    v_after_id bigint[];
    v_memo_keys varchar[];
    v_memo_rank timestamp[];
    v_memo_id bigint[];
    v_last_keys varchar[];
    v_last_rank timestamp[];
    v_last_id bigint[];
BEGIN
    completed := 0;
    more := false;
    held_keys := 0;
    database_now := v_now;
    IF batch_limit <= 0 THEN
        RETURN;
    END IF;
    -- While the shard map drains (R__shards.sql), nothing completes; look again soon.
    IF EXISTS (SELECT 1 FROM shard_map m WHERE m.target_count IS NOT NULL) THEN
        next_at := v_now + interval '100 milliseconds';
        RETURN;
    END IF;
    -- While everything is paused (dispatch_pauses, V15), nothing completes, and the leader sleeps
    -- until the resume's notification.
    IF EXISTS (SELECT 1 FROM dispatch_pauses p WHERE p.dispatch_key IS NULL) THEN
        RETURN;
    END IF;
    -- A paused key is passed over where the keys are listed: one index descent, none of its jobs.
    v_paused := EXISTS (SELECT 1 FROM dispatch_pauses);
    -- The latest rank a due job can have: a job is due when its due_at is now or before, and its rank
    -- is its due_at less its priority, so no later than now less the lowest priority pending (an
    -- index descent of jobs_pending_deferred, which holds only jobs of a negative priority).
    v_due_rank := (v_now AT TIME ZONE 'UTC') - least(0, coalesce((SELECT min(j.priority) FROM jobs j
        WHERE j.state = 'pending' AND j.shard = p_shard AND j.priority < 0), 0)) * interval '1 second';
    v_limited := EXISTS (SELECT 1 FROM dispatch_limits);
    v_max_id := coalesce((SELECT max(j.id) FROM jobs j), 0);
    -- The keys the last walk of this shard found, when it went all the way round in one chunk (so
    -- they were every key with due jobs then), remembered in this session's setting
    -- fenced_jobs.keys_of_shard_<n> (set with the batch's transaction, so gone with its rollback)
    -- with each key's position, the rank and id of the last job its batches took: used instead of a
    -- walk for 200 ms of database time while no job has been inserted since (the highest job id is
    -- the same), and each key read from its position rather than from its first index entry, past
    -- the entries of the jobs completed before (as the plain path reads from its position). A walk
    -- passes every key in turn, and with 100,000 keys whose jobs are due tomorrow it passes their
    -- index entries once a batch. A key that came due since, or a job ranked before its key's
    -- position since (by the clock, a reschedule, a higher priority, the commit of an earlier
    -- insert), waits for the next walk: at most 200 ms, at once if a job was inserted. Another
    -- session's batch walks.
    v_walk := regexp_match(current_setting('fenced_jobs.keys_of_shard_' || p_shard, true),
        '^(-?[0-9]+)\|(-?[0-9]+)\|(.*)\|(\{[^|]*\})\|(\{[^|]*\})$');
    v_remembered := v_walk IS NOT NULL AND v_walk[2]::bigint = v_max_id
        AND v_walk[1]::bigint BETWEEN dispatch_micros(v_now) - 200000 AND dispatch_micros(v_now);
    LOOP
        v_ids := '{}';
        more := false;
        next_key := NULL;
        v_skipped := false;
        v_seen_keys := '{}';
        v_seen_avail := '{}';
        v_seen_taken := '{}';
        v_seen_rate := '{}';
        v_memo := false;
        -- The walk goes round the keys in key order from start_key: first those after it, then from
        -- the first up to start_key, which comes last.
        v_cursor := start_key;
        v_second := false;
        v_chunk := 0;
        LOOP
            v_chunk := v_chunk + 1;
            IF v_remembered THEN
                SELECT coalesce(array_agg(u.k ORDER BY u.i), '{}'), coalesce(array_agg(u.r ORDER BY u.i), '{}'), coalesce(array_agg(u.id ORDER BY u.i), '{}')
                INTO v_keys, v_after_rank, v_after_id
                FROM unnest(v_walk[3]::varchar[], v_walk[4]::timestamp[], v_walk[5]::bigint[]) WITH ORDINALITY u(k, r, id, i)
                WHERE NOT v_paused OR NOT EXISTS (SELECT 1 FROM dispatch_pauses p WHERE p.dispatch_key = u.k);
                v_chunk_more := false;
                v_memo := true;
                v_memo_micros := v_walk[1]::bigint;
                -- Kept whole, paused keys too: a resumed key is in the next batch.
                v_memo_keys := v_walk[3]::varchar[];
                v_memo_rank := v_walk[4]::timestamp[];
                v_memo_id := v_walk[5]::bigint[];
            ELSE
                -- 1. The next chunk of keys, one index descent each, no more than the room left (so
                -- that each gets a job); one more than fit says there are more.
                v_width := least(v_fanout, batch_limit - cardinality(v_ids));
                IF v_second THEN
                    v_keys := dispatch_walk(p_shard, v_cursor, start_key, v_due_rank, v_paused, v_width + 1);
                    v_second_at := 1;
                ELSE
                    v_keys := dispatch_walk(p_shard, v_cursor, NULL, v_due_rank, v_paused, v_width + 1);
                    v_second_at := cardinality(v_keys) + 1;
                    IF start_key IS NOT NULL AND cardinality(v_keys) <= v_width THEN
                        v_keys := v_keys || dispatch_walk(p_shard, NULL, start_key, v_due_rank, v_paused, v_width + 1 - cardinality(v_keys));
                    END IF;
                END IF;
                v_chunk_more := cardinality(v_keys) > v_width;
                IF v_chunk_more THEN
                    v_keys := v_keys[1:v_width];
                END IF;
                v_cursor := v_keys[cardinality(v_keys)];
                v_second := v_second OR cardinality(v_keys) >= v_second_at;
                v_memo := v_chunk = 1 AND NOT v_chunk_more;
                v_memo_micros := dispatch_micros(v_now);
                -- A walk's keys are read from their first entries.
                v_after_rank := array_fill('-infinity'::timestamp, ARRAY[cardinality(v_keys)]);
                v_after_id := array_fill(0::bigint, ARRAY[cardinality(v_keys)]);
                v_memo_keys := v_keys;
                v_memo_rank := v_after_rank;
                v_memo_id := v_after_id;
            END IF;
            v_n := cardinality(v_keys);
            EXIT WHEN v_n = 0;
            -- 2. Each key of the chunk gets its share of the room left, within its limit: the limits
            -- locked in key order, then read in one statement; while no limit is defined, none to
            -- read. A later chunk's keys may sort before the first's, so its limits are not waited
            -- for: a key whose limit another batch holds is left for the next batch.
            v_room := batch_limit - cardinality(v_ids);
            v_share := v_room / v_n;
            IF v_limited THEN
                -- Joined to the keys: 'dispatch_key = ANY (v_keys)' in a plan for any values cast the
                -- array for every row of dispatch_limits (1.3 ms for 64 keys among 1,000 limits).
                IF v_chunk = 1 THEN
                    PERFORM 1 FROM unnest(v_keys) u(k) JOIN dispatch_limits l ON l.dispatch_key = u.k ORDER BY l.dispatch_key FOR UPDATE OF l;
                    v_locked := NULL;
                ELSE
                    SELECT coalesce(array_agg(x.dispatch_key), '{}') INTO v_locked FROM (SELECT l.dispatch_key FROM unnest(v_keys) u(k)
                        JOIN dispatch_limits l ON l.dispatch_key = u.k ORDER BY l.dispatch_key FOR UPDATE OF l SKIP LOCKED) x;
                END IF;
                SELECT array_agg(x.avail ORDER BY x.i), array_agg(x.rate ORDER BY x.i),
                       -- Whole tokens only; the margin keeps 2.9999999999 from rounding a token away.
                       array_agg(CASE WHEN x.rate IS NULL THEN batch_limit WHEN NOT x.locked THEN 0
                                      ELSE least(batch_limit, greatest(0, floor(x.avail + 1e-9)))::integer END ORDER BY x.i),
                       coalesce(bool_or(NOT x.locked), false)
                INTO v_avail, v_rate, v_caps, v_skipped
                FROM (SELECT u.i, l.per_second AS rate, v_locked IS NULL OR l.dispatch_key IS NULL OR l.dispatch_key = ANY (v_locked) AS locked,
                             CASE WHEN l.dispatch_key IS NOT NULL THEN dispatch_limit_tokens(l.tokens, l.refilled_at, l.per_second, l.burst, v_now) END AS avail
                      FROM unnest(v_keys) WITH ORDINALITY u(k, i) LEFT JOIN dispatch_limits l ON l.dispatch_key = u.k) x;
            ELSE
                v_caps := array_fill(batch_limit, ARRAY[v_n]);
                v_avail := array_fill(NULL::double precision, ARRAY[v_n]);
                v_rate := v_avail;
            END IF;
            -- Round 1, in one statement: each key's share of its due jobs in rank order after its
            -- position (an index read each), the first v_room % keys one more, so that the shares add
            -- up to the room and no more.
            WITH got AS MATERIALIZED (
                SELECT u.i, x.id, x.rank FROM unnest(v_keys, v_caps, v_after_rank, v_after_id) WITH ORDINALITY u(k, cap, after_rank, after_id, i)
                CROSS JOIN LATERAL (
                    SELECT j.id, (j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second' AS rank FROM jobs j
                    WHERE j.state = 'pending' AND j.shard = p_shard AND coalesce(j.dispatch_key, j.resource) = u.k AND j.due_at <= v_now
                      AND ((j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second', j.id) > (u.after_rank, u.after_id)
                    ORDER BY (j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second', j.id
                    LIMIT least(v_share + CASE WHEN u.i <= v_room % v_n THEN 1 ELSE 0 END, u.cap)) x
            )
            SELECT coalesce((SELECT array_agg(g.id ORDER BY g.i, g.rank, g.id) FROM got g), '{}'),
                   (SELECT array_agg(coalesce(c.n, 0)::integer ORDER BY u.i) FROM unnest(v_keys) WITH ORDINALITY u(k, i)
                    LEFT JOIN (SELECT g.i, count(*) AS n FROM got g GROUP BY g.i) c ON c.i = u.i)
            INTO v_chunk_ids, v_taken;
            v_ids := v_ids || v_chunk_ids;
            -- 3. Round 2 gives the room left to the keys that filled their share, each after the jobs it took.
            v_fill_key := NULL;
            FOR i IN 1 .. v_n LOOP
                EXIT WHEN cardinality(v_ids) >= batch_limit;
                CONTINUE WHEN v_taken[i] < least(v_share + CASE WHEN i <= v_room % v_n THEN 1 ELSE 0 END, v_caps[i]);
                v_want := least(batch_limit - cardinality(v_ids), v_caps[i] - v_taken[i]);
                CONTINUE WHEN v_want <= 0;
                SELECT array_agg(c.id) INTO v_got FROM (
                    SELECT j.id FROM jobs j
                    WHERE j.state = 'pending' AND j.shard = p_shard AND coalesce(j.dispatch_key, j.resource) = v_keys[i] AND j.due_at <= v_now
                      AND ((j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second', j.id) > (v_after_rank[i], v_after_id[i])
                    ORDER BY (j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second', j.id
                    LIMIT v_want OFFSET v_taken[i]) c;
                IF v_got IS NOT NULL THEN
                    v_taken[i] := v_taken[i] + cardinality(v_got);
                    v_ids := v_ids || v_got;
                    -- The batch filled here: the next one's keys start after this one.
                    IF cardinality(v_ids) >= batch_limit THEN
                        v_fill_key := v_keys[i];
                    END IF;
                END IF;
            END LOOP;
            v_seen_keys := v_seen_keys || v_keys;
            v_seen_avail := v_seen_avail || v_avail;
            v_seen_taken := v_seen_taken || v_taken;
            v_seen_rate := v_seen_rate || v_rate;
            IF cardinality(v_ids) >= batch_limit THEN
                more := true;
                next_key := coalesce(v_fill_key, v_keys[v_n]);
                EXIT;
            END IF;
            -- A key whose limit another batch held: the next batch at once.
            more := more OR v_skipped;
            -- The walk went round: every key with due jobs had its turn.
            EXIT WHEN NOT v_chunk_more;
        END LOOP;
        -- Remembered keys that did not fill the batch: walk, as a key may have come due since.
        EXIT WHEN NOT v_remembered OR cardinality(v_ids) >= batch_limit;
        v_remembered := false;
    END LOOP;
    -- 4. Complete, write the outbox, spend the tokens. The jobs are updated by their primary key
    -- whatever the plan: joined to the locked ones, a plan made for any values hashed a sequential
    -- scan of jobs once its statistics said it was small (15.8 ms a batch of 500 where 8.5 did).
    IF cardinality(v_ids) > 0 THEN
        WITH due AS (
            SELECT j.id FROM jobs j WHERE j.id = ANY (v_ids) AND j.state = 'pending' FOR UPDATE SKIP LOCKED
        ), done AS (
            UPDATE jobs j SET state = 'completed', completed_by_token = p_token, completed_at = v_now
            WHERE j.id = ANY (ARRAY(SELECT due.id FROM due))
            RETURNING j.id, j.resource, j.payload, j.due_at, j.completed_at, j.created_at, j.traceparent, j.tracestate,
                coalesce(j.dispatch_key, j.resource) AS dkey, (j.due_at AT TIME ZONE 'UTC') - j.priority * interval '1 second' AS rank
        ), written AS (
            INSERT INTO outbox (job_id, shard, resource, fencing_token, payload, due_at, completed_at, job_created_at, traceparent, tracestate)
            SELECT d.id, p_shard, d.resource, p_token, d.payload, d.due_at, d.completed_at, d.created_at, d.traceparent, d.tracestate
            FROM done d ORDER BY d.rank, d.id
            RETURNING 1
        ), spent AS (
            UPDATE dispatch_limits l
            SET tokens = dispatch_limit_tokens(l.tokens, l.refilled_at, l.per_second, l.burst, v_now) - c.n,
                -- Never back: a database clock stepped back refills nothing until it passes the last refill.
                refilled_at = greatest(v_now, l.refilled_at), refilled_by_token = p_token
            FROM (SELECT d.dkey, count(*) AS n FROM done d GROUP BY d.dkey) c
            WHERE l.dispatch_key = c.dkey
            RETURNING 1
        ), last AS (
            SELECT DISTINCT ON (d.dkey) d.dkey, d.rank, d.id FROM done d WHERE v_memo ORDER BY d.dkey, d.rank DESC, d.id DESC
        )
        SELECT (SELECT count(*) FROM written) + 0 * (SELECT count(*) FROM spent),
               (SELECT array_agg(l.dkey) FROM last l), (SELECT array_agg(l.rank) FROM last l), (SELECT array_agg(l.id) FROM last l)
        INTO completed, v_last_keys, v_last_rank, v_last_id;
    END IF;
    -- The keys to remember, each at the last job taken of it (else where it was), or none: the walk
    -- did not go round in one chunk.
    IF v_memo THEN
        SELECT format('%s|%s|%s|%s|%s', v_memo_micros, v_max_id, v_memo_keys::text,
                      coalesce(array_agg(coalesce(l.rank, u.r) ORDER BY u.i), '{}')::text,
                      coalesce(array_agg(coalesce(l.id, u.id) ORDER BY u.i), '{}')::text)
        INTO v_memo_text
        FROM unnest(v_memo_keys, v_memo_rank, v_memo_id) WITH ORDINALITY u(k, r, id, i)
        LEFT JOIN unnest(v_last_keys, v_last_rank, v_last_id) l(k, rank, id) ON l.k = u.k;
    END IF;
    PERFORM set_config('fenced_jobs.keys_of_shard_' || p_shard, CASE WHEN v_memo THEN v_memo_text ELSE '' END, false);
    -- Keys held back: a limit without a whole token left, and due jobs still waiting.
    IF v_limited THEN
        SELECT count(*)::integer, min(v_now + make_interval(secs => (1 - (u.a - u.t)) / u.r)) INTO held_keys, v_held_until
        FROM unnest(v_seen_keys, v_seen_avail, v_seen_taken, v_seen_rate) u(k, a, t, r)
        WHERE u.r IS NOT NULL AND u.a - u.t < 1 - 1e-9
          AND EXISTS (SELECT 1 FROM jobs j WHERE j.state = 'pending' AND j.shard = p_shard AND coalesce(j.dispatch_key, j.resource) = u.k AND j.due_at <= v_now);
    END IF;
    IF more THEN
        next_at := v_now;
    ELSE
        v_future := (SELECT min(due_at) FROM jobs WHERE state = 'pending' AND shard = p_shard AND due_at > v_now);
        next_at := least(v_held_until, v_future);
        -- A job SKIP LOCKED passed over (a producer was updating it) is due and in no time above:
        -- look again in a second.
        IF completed < cardinality(v_ids) THEN
            next_at := least(next_at, v_now + interval '1 second');
        END IF;
    END IF;
END
$$;

-- As the release before shards called it, without a shard: shard 0's batch, so that its dispatchers
-- keep completing jobs on the policy path while the database has one shard (an upgrade, docs/operations.md).
CREATE OR REPLACE FUNCTION dispatch_batch(p_token bigint, batch_limit integer, start_key varchar,
        OUT completed integer, OUT next_key varchar, OUT more boolean, OUT next_at timestamptz, OUT held_keys integer,
        OUT database_now timestamptz)
    LANGUAGE sql
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT * FROM dispatch_batch(p_token, 0, batch_limit, start_key)
$$;

/* [jooq ignore stop] */
