-- step: move_boundary
-- engine: sqlite (write, once per batch, before 90_write_boundary.sql; not on a new target: it has no event to move)
-- reads: _movable (88_movable_boundaries.sql), lcm_messages
-- produces: lcm_compaction_events — a session's last import boundary moved to the session's end (fired_at,
--           msg_before, tokens), in place of a new one
-- key: lcm_compaction_events.id
-- why: one import seam per stretch of one source's rows (docs/mapping.md, "Boundary events"): 88 decides which;
--      else 90_write_boundary.sql adds a new seam. The provenance trigger keeps the event as it was, for undo.
-- count: boundaries_moved
UPDATE lcm_compaction_events AS e   -- no WITH: Python 3.11 gives a statement that starts with one no row count
SET fired_at = :fired_at, msg_before = n.msg_before, tokens_before = n.tokens, tokens_after = n.tokens
FROM (SELECT t.session_id, max(t.turn_index) + 1 AS msg_before, sum(t.token_count) AS tokens
      FROM lcm_messages t WHERE t.session_id IN (SELECT session_id FROM _movable)
      GROUP BY t.session_id) n
WHERE e.id IN (SELECT id FROM _movable) AND e.session_id = n.session_id;
