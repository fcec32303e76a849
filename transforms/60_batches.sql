-- step: batches
-- engine: duckdb (plan)
-- reads: write_messages (57_assign_batches.sql), msg_plan, part_plan, sum_plan, sum_parent, sum_level,
--        tgt_boundaries, message_refresh, summary_refresh, parent_updates
-- produces: session_work (sessions to finish, and the batch that finishes them), write_summaries,
--           write_present (present messages the writer must resolve)
-- key: session_id / summary_id
-- why: a session's summaries, its in-place changes and its boundary event go into its last batch, after all
--      its messages. A session that only changed in place (52_in_place_changes.sql) gained no data: it gets
--      no boundary event (90_write_boundary.sql), only its updates.
CREATE OR REPLACE TABLE session_work AS
WITH touched AS (
  SELECT session_id FROM write_messages
  UNION SELECT session_id FROM part_plan
  UNION SELECT session_id FROM sum_plan WHERE status = 'new'
), changed AS (
  SELECT session_id FROM message_refresh
  UNION SELECT session_id FROM summary_refresh
  UNION SELECT session_id FROM parent_updates
), unbounded AS (
  -- sessions whose imported rows have no boundary event yet (a run killed before its last batch,
  -- or a boundary deleted by hand): the boundary is owed even if nothing else is
  SELECT DISTINCT m.session_id FROM msg_plan m
  WHERE NOT m.is_new AND m.session_id NOT IN (SELECT session_id FROM tgt_boundaries)
)
SELECT s.session_id, s.session_id IN (SELECT session_id FROM touched) AS gains_data,
       s.session_id IN (SELECT session_id FROM touched UNION SELECT session_id FROM unbounded) AS needs_boundary,
       coalesce((SELECT max(batch) FROM write_messages w WHERE w.session_id = s.session_id), 0) AS batch
FROM (SELECT session_id FROM touched UNION SELECT session_id FROM unbounded UNION SELECT session_id FROM changed) s;

CREATE OR REPLACE TABLE write_summaries AS
SELECT p.*, CASE WHEN l.lvl IS NOT NULL THEN sp.parent_id END AS parent_id,
       coalesce(sp.candidates, 0) AS candidates, coalesce(l.lvl, 0) AS lvl, w.batch
FROM sum_plan p
JOIN session_work w USING (session_id)
LEFT JOIN sum_parent sp ON sp.source_id = p.summary_id
LEFT JOIN sum_level l ON l.summary_id = p.summary_id
WHERE p.status = 'new';

-- present messages the writer must know the turn of: ends of new summaries' ranges, owners of new parts
CREATE OR REPLACE TABLE write_present AS
SELECT DISTINCT m.message_id, m.tid_present, m.turn_present
FROM msg_plan m
WHERE NOT m.is_new
  AND (m.message_id IN (SELECT lo_msg FROM write_summaries UNION SELECT hi_msg FROM write_summaries)
       OR m.message_id IN (SELECT message_id FROM part_plan WHERE NOT is_new));
