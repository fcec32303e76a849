-- step: turn_index
-- engine: duckdb (plan)
-- reads: src_timed, sessions, selected, tgt_legacy, tgt_entries, tgt_max_turn
-- produces: src_msgs (every source message with its session and chronological position),
--           msg_plan (messages of the selected sessions: already present or new, with new_rank/plan_turn)
-- key: the message identity of 05_target_state.sql; (session_id, conv_key, seq) for rows older writers
--      wrote without a source message id; the transcript entry id for rows `reconcile` wrote
-- why: turn_index is one running counter per session across all of its conversations (SPEC §3.2):
--      created_at parsed as a time (text order breaks on mixed formats), then conversation_id
--      numerically, then seq. Rows already in the target keep their turn; new rows are ranked in that
--      order and appended after the session's current maximum, at write time. A message `reconcile`
--      already brought in from the JSONL transcript is recognised by its transcript entry id, so the two
--      commands, in either order, leave each message in the target once.
CREATE OR REPLACE TABLE src_msgs AS
SELECT m.* EXCLUDE (conversation_id), m.conversation_id, s.conv_key, s.session_id,
       row_number() OVER (PARTITION BY s.session_id ORDER BY m.ts NULLS LAST, s.conv_num NULLS LAST, s.conv_key, m.seq)
         AS src_order
FROM src_timed m
JOIN sessions s USING (conversation_id);

CREATE OR REPLACE TABLE msg_plan AS
WITH keyed AS (
  SELECT m.*, coalesce(m.id_tid, l.id, e.id) AS tid_present,
         coalesce(m.id_turn, l.turn_index, e.turn_index) AS turn_present,
         coalesce(x.max_turn, -1) AS max_turn
  FROM src_msgs m
  LEFT JOIN tgt_legacy l
         ON m.id_tid IS NULL AND l.session_id = m.session_id AND l.conversation_id = m.conv_key AND l.source_seq = m.seq
  LEFT JOIN tgt_entries e
         ON e.session_id = m.session_id AND e.entry_id = trim(m.transcript_entry_id)
  LEFT JOIN tgt_max_turn x ON x.session_id = m.session_id
  WHERE m.session_id IN (SELECT session_id FROM selected)
), ranked AS (
  SELECT *, tid_present IS NULL AS is_new,
         CASE WHEN tid_present IS NULL
              THEN row_number() OVER (PARTITION BY session_id, tid_present IS NULL ORDER BY src_order) - 1
         END AS new_rank
  FROM keyed
)
SELECT *, coalesce(turn_present, max_turn + 1 + new_rank) AS plan_turn
FROM ranked;
