-- step: write_boundary
-- engine: sqlite (write, once per batch, last)
-- reads: plan.plan_sessions, lcm_messages, lcm_compaction_events, lcm_etl_run_rows
-- produces: lcm_compaction_events — one import-boundary row per session finished in this batch
-- key: session_id (one per session per run that changed it)
-- why: one marker per session a run adds to, unless 89_move_boundary.sql moved the session's last one there.
--      Remnic treats tokens_before == tokens_after as "nothing was compacted here": the marker tells it where imported history ends. Totals are read from the target at write time, so
--      they include native rows and earlier imports. A session that gained nothing gets no event (one
--      that only changed in place neither), unless its imported rows have none yet (a run killed before
--      its last batch).
-- count: boundary_events
INSERT INTO lcm_compaction_events (session_id, fired_at, msg_before, tokens_before, tokens_after)
SELECT t.session_id, :fired_at, max(t.turn_index) + 1, sum(t.token_count), sum(t.token_count)
FROM lcm_messages t
WHERE t.session_id IN (SELECT session_id FROM plan.plan_sessions
                       WHERE batch BETWEEN :lo AND :hi AND needs_boundary)
  AND t.session_id NOT IN (SELECT session_id FROM lcm_compaction_events WHERE id IN (   -- moved by 89_move_boundary.sql
        SELECT json_extract(key, '$[0]') FROM lcm_etl_run_rows WHERE run_id = :run_id AND tbl = 'lcm_compaction_events'))
GROUP BY t.session_id
ORDER BY t.session_id;
