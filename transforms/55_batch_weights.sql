-- step: batch_weights
-- engine: duckdb (plan)
-- reads: msg_plan, part_plan
-- produces: batch_input(message_id, session_id, new_rank, weight) — each new message and the rows it brings
-- key: message_id
-- why: a message costs one row plus one per new part; 57_assign_batches.sql sizes transactions by it.
CREATE OR REPLACE TABLE batch_input AS
SELECT m.message_id, m.session_id, m.new_rank, 1 + coalesce(pc.n, 0) AS weight
FROM msg_plan m
LEFT JOIN (SELECT message_id, count(*) AS n FROM part_plan GROUP BY message_id) pc USING (message_id)
WHERE m.is_new;
