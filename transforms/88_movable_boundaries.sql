-- step: movable_boundaries
-- engine: sqlite (write, once per batch, before 89_move_boundary.sql; and a reconcile's plan, over the target as it
--        is, with no row new yet: the plan's count is this step's, so a dry run reports the moves the run makes)
-- reads: plan.plan_sessions, _new, lcm_messages, lcm_compaction_events, lcm_etl_runs, lcm_etl_run_ranges,
--        lcm_etl_run_rows
-- produces: _movable (session_id, id: the last import boundary of a session that 89_move_boundary.sql moves)
-- key: lcm_compaction_events.id
-- why: one import seam per stretch of one source's rows (docs/mapping.md, "Boundary events"). A sync that only
--      extends the rows a run of the same command and source (:placed_by, its command and source key) left at a
--      session's end moves that run's boundary to the new end; `--watch` would otherwise add an event per session
--      per sync (170 for 1,020 messages in 4.5 minutes). Moved only when every one of these holds: the event is
--      the session's last (no Remnic compaction after it), a boundary (tokens_before = tokens_after), placed
--      (inserted, or last moved) by a run of this command and source, and the session's first row after it (turn
--      msg_before) is one this run wrote (_new; before the write: none yet, the event at the session's end), or one
--      such a run wrote (a killed run's prefix, which this one completes), or there is none (the run added
--      summaries or parts only): nothing Remnic or another source appended lies between.
DROP TABLE IF EXISTS temp._movable;
CREATE TEMP TABLE _movable AS
SELECT e.session_id, e.id
FROM lcm_compaction_events e
JOIN (SELECT session_id, max(id) AS id FROM lcm_compaction_events
      WHERE session_id IN (SELECT session_id FROM plan.plan_sessions WHERE batch BETWEEN :lo AND :hi AND needs_boundary)
      GROUP BY session_id) l ON e.id = l.id
WHERE e.tokens_before = e.tokens_after
  AND coalesce((SELECT x.id IN (SELECT id FROM _new)
                       OR (SELECT r.command || char(31) || coalesce(r.source_path, '')
                           FROM lcm_etl_run_ranges g JOIN lcm_etl_runs r USING (run_id)
                           WHERE g.tbl = 'lcm_messages' AND g.hi >= x.id AND g.lo <= x.id) = :placed_by
                FROM lcm_messages x WHERE x.session_id = e.session_id AND x.turn_index = e.msg_before),
               e.msg_before = (SELECT max(turn_index) + 1 FROM lcm_messages WHERE session_id = e.session_id))
  AND (SELECT r.command || char(31) || coalesce(r.source_path, '')
       FROM (SELECT w.run_id FROM lcm_etl_run_rows w
             WHERE w.tbl = 'lcm_compaction_events' AND w.key = json_array(e.id)
             UNION ALL
             SELECT g.run_id FROM lcm_etl_run_ranges g
             WHERE g.tbl = 'lcm_compaction_events' AND g.hi >= e.id AND g.lo <= e.id) p
       JOIN lcm_etl_runs r USING (run_id) ORDER BY r.rowid DESC LIMIT 1) = :placed_by;
