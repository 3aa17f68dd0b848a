-- Late records: a record whose outbox id is below one already applied for its resource arrived
-- out of commit order. The fence keeps, beside the highest token, the highest outbox id applied
-- and the lowest outbox id applied with the highest token (where that token's rows begin), so a
-- record that is merely late is told apart from a stale one: outbox ids are commit order and a
-- later row never carries a lower token, so a lower token below where the higher one begins is a
-- late row of an earlier tenure, and a lower token above it contradicts commit order (stale).
-- 0 means not known (rows from before this migration): such a resource treats every lower token
-- as stale, as before, until its token rises again.
ALTER TABLE consumer_resource_fence ADD COLUMN highest_outbox_id bigint NOT NULL DEFAULT 0;
ALTER TABLE consumer_resource_fence ADD COLUMN token_first_outbox_id bigint NOT NULL DEFAULT 0;

-- Every late record applied, with what had been applied before it.
CREATE TABLE consumer_late (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id            bigint       NOT NULL,
    resource          varchar(200) NOT NULL,
    outbox_id         bigint       NOT NULL,
    fencing_token     bigint       NOT NULL,
    highest_outbox_id bigint       NOT NULL,
    highest_token     bigint       NOT NULL,
    topic             varchar(249) NOT NULL,
    kafka_partition   int          NOT NULL,
    kafka_offset      bigint       NOT NULL,
    seen_at           timestamptz  NOT NULL
);
