-- step: move_boundary
-- engine: sqlite (write, once per batch, before 90_write_boundary.sql; not on a new target: it has no event to move)
-- reads: plan.plan_sessions, _new, lcm_messages, lcm_compaction_events, lcm_etl_runs, lcm_etl_run_ranges,
--        lcm_etl_run_rows
-- produces: lcm_compaction_events — a session's last import boundary moved to the session's end (fired_at,
--           msg_before, tokens), in place of a new one
-- key: lcm_compaction_events.id
-- why: one import seam per stretch of one source's rows (docs/mapping.md, "Boundary events"). A sync that only
--      extends the rows a run of the same command and source left at a session's end moves that run's boundary
--      to the new end; `--watch` would otherwise add an event per session per sync (170 for 1,020 messages in
--      4.5 minutes). Moved only when every one of these holds, at write time: the event is the session's last
--      (no Remnic compaction after it), a boundary (tokens_before = tokens_after), placed (inserted, or last
--      moved) by a run of this run's command with this run's source key, and the session's first row after it
--      (turn msg_before) is one this run or such a run wrote (a killed run's prefix, which this one completes), or
--      there is none (the run added summaries or parts only): nothing Remnic or another source appended lies
--      between. Else 90_write_boundary.sql adds a new seam. The provenance trigger keeps the event as it was, for undo.
-- count: boundaries_moved
UPDATE lcm_compaction_events AS e   -- no WITH: Python 3.11 gives a statement that starts with one no row count
SET fired_at = :fired_at, msg_before = n.msg_before, tokens_before = n.tokens, tokens_after = n.tokens
FROM (SELECT session_id, max(id) AS id FROM lcm_compaction_events
      WHERE session_id IN (SELECT session_id FROM plan.plan_sessions
                           WHERE batch BETWEEN :lo AND :hi AND needs_boundary)
      GROUP BY session_id) l
JOIN (SELECT t.session_id, max(t.turn_index) + 1 AS msg_before, sum(t.token_count) AS tokens
      FROM lcm_messages t   -- the sessions with an event only: a first import's are not summed twice
      WHERE t.session_id IN (SELECT session_id FROM lcm_compaction_events
                             WHERE session_id IN (SELECT session_id FROM plan.plan_sessions
                                                  WHERE batch BETWEEN :lo AND :hi AND needs_boundary))
      GROUP BY t.session_id) n USING (session_id)
WHERE e.id = l.id AND e.tokens_before = e.tokens_after
  AND (e.msg_before = n.msg_before   -- the run added no message (summaries, parts): the end is where it was
       OR EXISTS (SELECT 1 FROM lcm_messages x
                  WHERE x.session_id = e.session_id AND x.turn_index = e.msg_before
                    AND (x.id IN (SELECT id FROM _new)
                         OR (SELECT r.command || char(31) || coalesce(r.source_path, '')
                             FROM lcm_etl_run_ranges g JOIN lcm_etl_runs r USING (run_id)
                             WHERE g.tbl = 'lcm_messages' AND g.hi >= x.id AND g.lo <= x.id)
                            = (SELECT command || char(31) || coalesce(source_path, '') FROM lcm_etl_runs
                               WHERE run_id = :run_id))))
  AND (SELECT r.command || char(31) || coalesce(r.source_path, '')
       FROM (SELECT w.run_id FROM lcm_etl_run_rows w
             WHERE w.tbl = 'lcm_compaction_events' AND w.key = json_array(e.id)
             UNION ALL
             SELECT g.run_id FROM lcm_etl_run_ranges g
             WHERE g.tbl = 'lcm_compaction_events' AND g.hi >= e.id AND g.lo <= e.id) p
       JOIN lcm_etl_runs r USING (run_id) ORDER BY r.rowid DESC LIMIT 1)
      = (SELECT command || char(31) || coalesce(source_path, '') FROM lcm_etl_runs WHERE run_id = :run_id);
