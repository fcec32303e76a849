-- step: target_marks
-- engine: sqlite (a read-only connection to the target — an empty Remnic schema when there is none — whose
--         rows plan.py hands to DuckDB; 94_target_marks_after.sql reads the same figures for the sessions a
--         run wrote, in its last transaction)
-- reads: lcm_messages, lcm_summary_nodes, lcm_compaction_events
-- produces: TEMP TABLE target_marks(session_id, messages, max_message_id, summaries, boundary_events) — per
--           target session (lcm_etl/store/marks.py)
-- key: session_id
-- why: between two runs the target changes too (a live Remnic appends, `reconcile` or `undo` runs). A
--      session whose mark differs from the one the last run stored is re-planned whole, whatever the source
--      did. SQLite answers from the sessions' indexes alone (DuckDB's scanner would read every row); the same
--      statement's figures (94 reads them per written session) are what 95_write_provenance.sql stores.
DROP TABLE IF EXISTS temp.target_marks;

CREATE TEMP TABLE target_marks AS
SELECT session_id, sum(n_messages) AS messages, max(hi) AS max_message_id, sum(n_summaries) AS summaries,
       sum(n_boundaries) AS boundary_events
FROM (SELECT session_id, count(*) AS n_messages, max(id) AS hi, 0 AS n_summaries, 0 AS n_boundaries
      FROM lcm_messages GROUP BY session_id
      UNION ALL SELECT session_id, 0, 0, count(*), 0 FROM lcm_summary_nodes GROUP BY session_id
      UNION ALL SELECT session_id, 0, 0, 0, count(*) FROM lcm_compaction_events GROUP BY session_id)
GROUP BY session_id;
