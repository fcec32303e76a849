-- step: assign_turns
-- engine: sqlite (write, once per batch; :lo/:hi bound the batch numbers) — shared by migrate and reconcile
-- reads: plan.plan_messages (message_id, session_id, new_rank, batch, write_order, created_iso, created_raw,
--        fixed_turn), lcm_messages
-- produces: _new(src_message_id, session_id, turn, id, ...) — the final turn_index and id of each new row;
--           _map(src_message_id → target id, turn), which later steps (parts, summary ranges) look rows up in
-- key: plan.plan_messages.message_id (the source's own message identity)
-- why: turn_index is fixed here, inside the write transaction: base = the session's maximum turn now
--      (a live Remnic may have appended since planning) + 1, plus the planned rank. Ids are given
--      explicitly (AUTOINCREMENT is honoured: max of sqlite_sequence and max(id)) so parts and FTS rows
--      can refer to them without reading them back. A row written beside the imported row of its identity
--      (20_turn_index.sql) takes that row's turn, fixed_turn, and has no rank. (A new target built from integer
--      source ids uses 69_new_target_turns.sql instead.)
DELETE FROM _new;

INSERT INTO _new (src_message_id, session_id, turn, id, created_iso, created_raw)
WITH b AS (
  SELECT q.session_id, min(q.new_rank) AS first_rank,
         (SELECT coalesce(max(t.turn_index), -1) + 1 FROM lcm_messages t WHERE t.session_id = q.session_id) AS base
  FROM plan.plan_messages q WHERE q.batch BETWEEN :lo AND :hi GROUP BY q.session_id
), id0 AS (
  SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'lcm_messages'), 0),
             coalesce((SELECT max(id) FROM lcm_messages), 0))
         - (SELECT min(write_order) FROM plan.plan_messages WHERE batch BETWEEN :lo AND :hi) + 1 AS v
)
SELECT p.message_id, p.session_id, coalesce(p.fixed_turn, b.base + p.new_rank - b.first_rank),
       (SELECT v FROM id0) + p.write_order,
       p.created_iso, p.created_raw
FROM plan.plan_messages p JOIN b USING (session_id)
WHERE p.batch BETWEEN :lo AND :hi;

INSERT OR REPLACE INTO _map (src_message_id, tid, turn, created_iso)
SELECT src_message_id, id, turn, created_iso FROM _new;
