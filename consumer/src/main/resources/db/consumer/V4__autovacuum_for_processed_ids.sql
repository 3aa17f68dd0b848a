-- The processed ids are purged oldest first through consumer_processed_at, and every purge walks
-- the dead entries the ones before it left until VACUUM removes them: vacuum once 10,000 rows are
-- dead, whatever the table's size, indexes included (see the dispatcher's migration V7).

/* [jooq ignore start] */

ALTER TABLE consumer_processed SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, vacuum_index_cleanup = on);

/* [jooq ignore stop] */
