-- step: reconcile_batch_weights
-- engine: duckdb (plan)
-- reads: jsonl_plan, jsonl_parts
-- produces: batch_input(message_id, session_id, new_rank, weight) for 57_assign_batches.sql
-- key: message_id
-- why: as 55_batch_weights.sql: a transcript message costs one row plus one per content block.
CREATE OR REPLACE TABLE batch_input AS
SELECT j.message_id, j.session_id, j.new_rank, 1 + coalesce(pc.n, 0) AS weight
FROM jsonl_plan j
LEFT JOIN (SELECT message_id, count(*) AS n FROM jsonl_parts GROUP BY message_id) pc USING (message_id)
WHERE j.is_new;
