-- step: reconcile_batches
-- engine: duckdb (plan)
-- reads: write_messages (57_assign_batches.sql), jsonl_plan, held_tgt, tgt_boundaries
-- produces: session_work (sessions to finish, and the batch that finishes them)
-- key: session_id
-- why: the boundary event goes into the session's last batch, as in 60_batches.sql.
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
