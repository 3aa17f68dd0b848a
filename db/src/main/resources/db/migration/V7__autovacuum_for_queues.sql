-- Autovacuum for the tables that churn (measured with the soak benchmark; README "Retention and
-- vacuum"). A completed job leaves a dead entry in jobs_pending_due, at the left of the index where
-- every batch and every next-due read begin, and only VACUUM removes it: until then each scan walks
-- over all of them (13 ms for the next-due read after 2 minutes at 2,000 jobs/s without a vacuum,
-- 0.05 ms after one). PostgreSQL's default waits for dead rows to reach 20 % of the table, which with
-- a 7-day JOBS_RETENTION is more than a day of completions. Here a vacuum starts once 10,000 rows are
-- dead, whatever the table's size (so at most once per autovacuum_naptime), and always cleans the
-- indexes: with a large history, the default would skip index cleanup while dead rows are under 2 %
-- of the table's pages, and leave the dead entries in place.
-- The outbox's and the consumer's purges read their tables from the oldest row too.

/* [jooq ignore start] */

ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, vacuum_index_cleanup = on);
ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, vacuum_index_cleanup = on);

/* [jooq ignore stop] */
