-- step: batches
-- engine: duckdb (plan)
-- reads: msg_plan, part_plan, sum_plan, tgt_boundaries, tgt_messages
-- produces: write_messages, write_parts, write_summaries, write_boundaries — the rows to write, each
--           with the batch (one SQLite transaction) it lands in
-- key: batch
-- why: a live Remnic waits at most 5 s for the write lock (SPEC §4), so one transaction carries about
--      $budget rows. Sessions are packed whole while they fit; a larger session is cut in turn order.
--      A session's summaries and its boundary event go into its last batch, after all its messages,
--      so a run killed between batches leaves every session complete, untouched, or a turn-order prefix
--      without its boundary event — which the next run completes.
CREATE OR REPLACE TABLE write_messages AS
WITH w AS (
  SELECT m.*, 1 + coalesce(pc.n, 0) AS weight
  FROM msg_plan m
  LEFT JOIN (SELECT message_id, count(*) AS n FROM part_plan GROUP BY message_id) pc USING (message_id)
  WHERE m.is_new
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
WITH touched AS (
  SELECT session_id FROM write_messages
  UNION SELECT session_id FROM part_plan
  UNION SELECT session_id FROM sum_plan WHERE status = 'new'
), unbounded AS (
  -- sessions whose imported rows have no boundary event yet (a run killed before its last batch,
  -- or a boundary deleted by hand): the boundary is owed even if nothing else is
  SELECT DISTINCT m.session_id FROM msg_plan m
  WHERE NOT m.is_new AND m.session_id NOT IN (SELECT session_id FROM tgt_boundaries)
)
SELECT s.session_id, s.session_id IN (SELECT session_id FROM touched) AS gains_data,
       coalesce((SELECT max(batch) FROM write_messages w WHERE w.session_id = s.session_id), 0) AS batch
FROM (SELECT session_id FROM touched UNION SELECT session_id FROM unbounded) s;

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
