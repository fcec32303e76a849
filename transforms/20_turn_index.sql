-- step: turn_index
-- engine: duckdb (plan)
-- reads: src_messages, sessions, selected, tgt_messages, tgt_entries, tgt_max_turn
-- produces: src_msgs (every source message with its session and chronological position),
--           msg_plan (messages of the selected sessions: already present or new, with new_rank/plan_turn)
-- key: (session_id, conv_key, seq) — the source identity a target row carries in its metadata
-- why: turn_index is one running counter per session across all of its conversations (SPEC §3.2):
--      created_at parsed as a time (text order breaks on mixed formats), then conversation_id
--      numerically, then seq. Rows already in the target keep their turn; new rows are ranked in that
--      order and appended after the session's current maximum, at write time. A message `reconcile`
--      already brought in from the JSONL transcript is recognised by its transcript entry id, so the two
--      commands, in either order, leave each message in the target once.
CREATE OR REPLACE TABLE src_msgs AS
WITH timed AS (
  SELECT m.message_id, m.conversation_id, s.conv_key, s.conv_num, s.session_id, m.seq, m.token_count,
         m.transcript_entry_id, m.created_at AS created_raw, try_cast(m.created_at AS TIMESTAMPTZ) AS ts
  FROM src_messages m
  JOIN sessions s USING (conversation_id)
)
SELECT * EXCLUDE (conv_num),
       row_number() OVER (PARTITION BY session_id ORDER BY ts NULLS LAST, conv_num NULLS LAST, conv_key, seq)
         AS src_order
FROM timed;

CREATE OR REPLACE TABLE msg_plan AS
WITH keyed AS (
  SELECT m.*, coalesce(t.id, e.id) AS tid_present, coalesce(t.turn_index, e.turn_index) AS turn_present,
         coalesce(x.max_turn, -1) AS max_turn
  FROM src_msgs m
  LEFT JOIN tgt_messages t
         ON t.session_id = m.session_id AND t.conversation_id = m.conv_key AND t.source_seq = m.seq
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
SELECT *,
       coalesce(turn_present, max_turn + 1 + new_rank) AS plan_turn,
       coalesce(strftime(ts::TIMESTAMP, '%Y-%m-%dT%H:%M:%S.%gZ'), created_raw) AS created_iso
FROM ranked;
