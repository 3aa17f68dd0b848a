-- Least privilege: the takeover history is written by the lease trigger with the owner's rights,
-- so the services' roles need no INSERT on lease_takeover and cannot forge its history.

/* [jooq ignore start] */
ALTER FUNCTION leader_lease_history() SECURITY DEFINER SET search_path = pg_catalog, public;
/* [jooq ignore stop] */
