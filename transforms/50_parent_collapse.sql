-- step: parent_collapse
-- engine: duckdb (plan)
-- reads: src_summary_parents, sum_plan
-- produces: sum_edges(cover_id, source_id, ordinal, kept, reason) — every summary_parents row with its fate
--           sum_parent(source_id, parent_id, candidates)           — the one parent each summary gets
--           sum_level(summary_id, lvl)                              — distance from its root (write order)
-- key: (cover_id, source_id)
-- why: lossless-claw's row (summary_id=C, parent_summary_id=S) means S was condensed into C; Remnic's
--      parent_id points up from S to the node covering it, and holds one value. The parent
--      is the C of the lowest ordinal among edges naming S whose C is importable in S's session, ties to
--      the smallest C id. The other candidates are "collapsed" edges, kept in provenance. Summaries are
--      written roots first (sum_level), so every parent_id exists when its child is inserted and foreign
--      keys are checked immediately (a deferred check would scan lcm_summary_nodes per row: Remnic has no
--      index on parent_id). A chain that never reaches a root (a cycle in damaged data) loses its parent.
CREATE OR REPLACE TABLE sum_edges AS
WITH e AS (
  SELECT p.summary_id AS cover_id, p.parent_summary_id AS source_id, p.ordinal,
         c.status AS cover_status, c.session_id AS cover_session, s.session_id AS source_session
  FROM src_summary_parents p
  LEFT JOIN sum_plan c ON c.summary_id = p.summary_id
  LEFT JOIN sum_plan s ON s.summary_id = p.parent_summary_id
), eligible AS (
  SELECT *, cover_status IN ('new', 'present') AND cover_session = source_session AS ok
  FROM e
), ranked AS (
  SELECT *, CASE WHEN ok THEN row_number() OVER (PARTITION BY source_id, ok ORDER BY ordinal, cover_id) END AS rk
  FROM eligible
)
SELECT cover_id, source_id, ordinal, coalesce(rk = 1, false) AS kept,
       CASE
         WHEN rk = 1 THEN NULL
         WHEN ok THEN 'collapsed: another covering summary has a lower ordinal'
         WHEN cover_status IS NULL THEN 'covering summary missing from the source'
         WHEN cover_status NOT IN ('new', 'present') THEN 'covering summary is not imported'
         ELSE 'covering summary is in another session'
       END AS reason
FROM ranked;

CREATE OR REPLACE TABLE sum_parent AS
SELECT source_id,
       max(cover_id) FILTER (WHERE kept) AS parent_id,
       count(*) FILTER (WHERE kept OR reason LIKE 'collapsed:%') AS candidates
FROM sum_edges
GROUP BY source_id;

CREATE OR REPLACE TABLE sum_level AS
WITH RECURSIVE up(summary_id, lvl) AS (
  SELECT p.summary_id, 0
  FROM sum_plan p LEFT JOIN sum_parent sp ON sp.source_id = p.summary_id
  WHERE p.status IN ('new', 'present') AND sp.parent_id IS NULL
  UNION ALL
  SELECT sp.source_id, u.lvl + 1
  FROM up u JOIN sum_parent sp ON sp.parent_id = u.summary_id
)
SELECT summary_id, max(lvl) AS lvl FROM up GROUP BY summary_id;
