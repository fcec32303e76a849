-- step: turn_index
-- engine: duckdb (plan)
-- reads: src_timed, sessions, selected, tgt_legacy, tgt_entries, tgt_transcript_rows, tgt_max_turn, src_messages
-- produces: src_msgs (every source message with its session and chronological position),
--           msg_plan (messages of the selected sessions: already present or new, with new_rank/plan_turn; a new
--           one written beside the imported row of its identity has fixed_turn, that row's turn, and no new_rank)
-- key: the message identity of 05_target_state.sql; (session_id, conv_key, seq) for rows older writers
--      wrote without a source message id; the transcript entry id for rows `reconcile` wrote; for those
--      without one (v1 transcripts), (lossless-claw's identity_hash, its occurrence in the session, the second)
-- why: turn_index is one running counter per session across all of its conversations:
--      created_at parsed as a time (text order breaks on mixed formats), then conversation_id
--      numerically, then seq. Rows already in the target keep their turn; new rows are ranked in that
--      order and appended after the session's current maximum, at write time. A message `reconcile`
--      already brought in from the JSONL transcript is recognised by its transcript entry id, so the two
--      commands, in either order, leave each message in the target once. A transcript row without an entry
--      id (a v1 file) is the source message with the same identity_hash, the same occurrence of that identity
--      in the session (reconcile records which occurrence on the path it is; here it is counted in turn
--      order over every source message of the session) and the same second (lossless-claw stores a
--      transcript message's time truncated to the second), when nothing else holds it. Occurrence and
--      second both matter: lcm.db may hold only a prefix of the transcript, and a delivery mirror repeats
--      the reply before it in the same second; a wrong match would lose a message, a missed one is a copy
--      that audit names.
CREATE OR REPLACE TABLE src_msgs AS
SELECT m.* EXCLUDE (conversation_id), m.conversation_id, s.conv_key, s.session_id,
       row_number() OVER (PARTITION BY s.session_id ORDER BY m.ts NULLS LAST, s.conv_num NULLS LAST, s.conv_key, m.seq)
         AS src_order
FROM src_timed m
JOIN sessions s USING (conversation_id);

CREATE OR REPLACE TABLE msg_plan AS
WITH keyed_by_id AS (
  SELECT m.*, coalesce(m.id_tid, l.id, e.id) AS tid_keyed,
         coalesce(m.id_turn, l.turn_index, e.turn_index) AS turn_keyed,
         coalesce(x.max_turn, -1) AS max_turn
  FROM src_msgs m
  LEFT JOIN tgt_legacy l
         ON m.id_tid IS NULL AND l.session_id = m.session_id AND l.conversation_id = m.conv_key AND l.source_seq = m.seq
  LEFT JOIN tgt_entries e
         ON e.session_id = m.session_id AND e.entry_id = trim(m.transcript_entry_id)
  LEFT JOIN tgt_max_turn x ON x.session_id = m.session_id
  WHERE m.session_id IN (SELECT session_id FROM selected)
), unclaimed_rows AS (
  SELECT t.id, t.turn_index, t.session_id, t.identity_hash, t.occurrence, date_trunc('second', t.ts) AS sec
  FROM tgt_transcript_rows t
  WHERE t.entry_id IS NULL AND t.identity_hash IS NOT NULL AND t.occurrence IS NOT NULL AND t.ts IS NOT NULL
), source_occurrence AS (
  SELECT k.message_id, k.session_id, k.tid_keyed, s.identity_hash, date_trunc('second', k.ts) AS sec,
         row_number() OVER (PARTITION BY k.session_id, s.identity_hash ORDER BY k.src_order) AS occurrence
  FROM keyed_by_id k JOIN src_messages s USING (message_id)
  WHERE s.identity_hash IS NOT NULL
), by_identity AS (
  SELECT o.message_id, min(r.id) AS id, arg_min(r.turn_index, r.id) AS turn_index
  FROM source_occurrence o JOIN unclaimed_rows r USING (session_id, identity_hash, occurrence, sec)
  WHERE o.tid_keyed IS NULL
  GROUP BY o.message_id
), keyed AS (
  SELECT k.* EXCLUDE (tid_keyed, turn_keyed), coalesce(k.tid_keyed, i.id) AS tid_present,
         coalesce(k.turn_keyed, i.turn_index) AS turn_present
  FROM keyed_by_id k LEFT JOIN by_identity i USING (message_id)
), beside AS (
  -- a message whose identity an imported row holds with other values (15_kept_sessions.sql) is written at that
  -- row's turn, beside it: a summary over it keeps its range, the session its order
  SELECT *, CASE WHEN tid_present IS NULL AND sup_session = session_id THEN sup_turn END AS fixed_turn FROM keyed
), ranked AS (
  SELECT *, tid_present IS NULL AS is_new,
         CASE WHEN tid_present IS NULL AND fixed_turn IS NULL
              THEN row_number() OVER (PARTITION BY session_id, tid_present IS NULL AND fixed_turn IS NULL
                                      ORDER BY src_order) - 1
         END AS new_rank
  FROM beside
)
SELECT *, coalesce(turn_present, fixed_turn, max_turn + 1 + new_rank) AS plan_turn
FROM ranked;
