-- step: single_batch (a new target: in place of 55_batch_weights.sql and 57_assign_batches.sql)
-- engine: duckdb (plan)
-- reads: msg_plan
-- produces: write_messages(message_id, session_id, new_rank, weight, batch) — every new message in batch 0
-- key: message_id
-- why: a new target is built in one transaction, in a private file nobody else can lock or read (it
--      appears complete or not at all), so batches would bound nothing; sizing them costs two window
--      passes over every message (about 0.6 s per 200k). The report then says what happens: one batch.
CREATE OR REPLACE TABLE write_messages AS
SELECT message_id, session_id, new_rank, CAST(1 AS BIGINT) AS weight, CAST(0 AS BIGINT) AS batch
FROM msg_plan
WHERE is_new;
