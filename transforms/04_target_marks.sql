-- step: target_marks
-- engine: duckdb (plan; the target attached read-only as `tgt` — an empty Remnic schema when there is none)
-- reads: tgt.lcm_messages, tgt.lcm_summary_nodes, tgt.lcm_compaction_events
-- produces: target_marks(session_id, mark) — per target session: messages, highest message id, summaries,
--           boundary events
-- key: session_id
-- why: between two runs the target changes too (a live Remnic appends, `reconcile` or `undo` runs). A
--      session whose mark differs from the one the last run stored is re-planned whole, whatever the source
--      did. The same figures are stored at the end of a run by 95_write_provenance.sql, in SQLite's words.
CREATE OR REPLACE TABLE target_marks AS
WITH m AS (SELECT session_id, count(*) AS n, max(id) AS hi FROM tgt.lcm_messages GROUP BY session_id),
     s AS (SELECT session_id, count(*) AS n FROM tgt.lcm_summary_nodes GROUP BY session_id),
     b AS (SELECT session_id, count(*) AS n FROM tgt.lcm_compaction_events GROUP BY session_id)
SELECT session_id, concat_ws(':', coalesce(m.n, 0), coalesce(m.hi, 0), coalesce(s.n, 0), coalesce(b.n, 0)) AS mark
FROM m FULL JOIN s USING (session_id) FULL JOIN b USING (session_id);
