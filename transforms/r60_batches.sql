-- step: reconcile_batches
-- engine: duckdb (plan)
-- reads: jsonl_plan, jsonl_parts, held_tgt, tgt_boundaries
-- produces: write_messages (new messages with their batch), session_work (sessions to finish, and where)
-- key: batch
-- why: the same transaction sizing and ordering as 60_batches.sql: whole sessions while they fit in
--      $budget rows, larger ones cut in path order, the boundary event in the session's last batch.
CREATE OR REPLACE TABLE write_messages AS
WITH w AS (
  SELECT j.*, 1 + coalesce(pc.n, 0) AS weight
  FROM jsonl_plan j
  LEFT JOIN (SELECT message_id, count(*) AS n FROM jsonl_parts GROUP BY message_id) pc USING (message_id)
  WHERE j.is_new
), c AS (
  SELECT *, sum(weight) OVER (ORDER BY session_id, new_rank ROWS UNBOUNDED PRECEDING) - weight AS cum_before,
         sum(weight) OVER (PARTITION BY session_id) AS session_weight
  FROM w
)
SELECT *, CAST(floor(CASE WHEN session_weight <= $budget
                          THEN min(cum_before) OVER (PARTITION BY session_id)
                          ELSE cum_before END / $budget) AS BIGINT) AS batch
FROM c;

CREATE OR REPLACE TABLE session_work AS
WITH unbounded AS (
  -- sessions holding rows reconcile imported earlier, but no boundary event (a run killed mid-way)
  SELECT DISTINCT t.session_id FROM held_tgt t
  WHERE t.source = 'openclaw-jsonl' AND t.session_id IN (SELECT session_id FROM jsonl_plan)
    AND t.session_id NOT IN (SELECT session_id FROM tgt_boundaries)
)
SELECT s.session_id, s.session_id IN (SELECT session_id FROM write_messages) AS gains_data,
       coalesce((SELECT max(batch) FROM write_messages w WHERE w.session_id = s.session_id), 0) AS batch
FROM (SELECT session_id FROM write_messages UNION SELECT session_id FROM unbounded) s;
