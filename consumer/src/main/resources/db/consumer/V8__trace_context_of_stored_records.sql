-- Trace context (docs/tracing.md): a waiting record and a dead letter keep the job's W3C context
-- from the record's traceparent and tracestate headers, so that the patient retry or the replay is
-- in the job's trace like the first attempt, and the context of the consumer's span that put the
-- record there (first_attempt, a traceparent), which the retry's or the replay's span links to.
-- NULL: the record had no context, no SDK recorded the first attempt, or stored before this version.
ALTER TABLE consumer_waiting ADD COLUMN traceparent varchar(55);
ALTER TABLE consumer_waiting ADD COLUMN tracestate varchar(512);
ALTER TABLE consumer_waiting ADD COLUMN first_attempt varchar(55);
ALTER TABLE consumer_dead_letter ADD COLUMN traceparent varchar(55);
ALTER TABLE consumer_dead_letter ADD COLUMN tracestate varchar(512);
ALTER TABLE consumer_dead_letter ADD COLUMN first_attempt varchar(55);
