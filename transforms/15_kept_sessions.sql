-- step: kept_sessions
-- engine: duckdb (plan)
-- reads: sessions, src_messages, tgt_ids, tgt_superseded
-- produces: src_timed(message_id, ..., ts, created_iso, id_tid, sup_tid) — every source message with its parsed
--           time, Remnic's created_at text, the target row holding it by identity (05_target_state.sql) and
--           the imported row of its identity that holds other values (sup_*: it is written beside that row);
--           sessions.session_id rewritten for conversations already imported (rule_session keeps 10's)
-- key: conversation_id
-- why: a conversation stays in the Remnic session it was first imported into. lossless-claw rebinds a
--      conversation to a new session id in place (and a user may change --key-by): by the session rule alone its whole
--      history would look new under the new session and be imported a second time, and the summaries over
--      it would land in one session while their messages sit in another. New messages of such a
--      conversation follow its history. The session a conversation has now is kept in provenance
--      (lcm_etl_conversations.source_session_id).
CREATE OR REPLACE TABLE src_timed AS
WITH t AS (
  SELECT m.message_id, m.conversation_id, m.seq, m.role, m.token_count, m.transcript_entry_id,
         m.created_at AS created_raw, try_cast(m.created_at AS TIMESTAMPTZ) AS ts
  FROM src_messages m
), c AS (
  SELECT *, coalesce(strftime(ts::TIMESTAMP, '%Y-%m-%dT%H:%M:%S.%gZ'), created_raw) AS created_iso FROM t
)
SELECT c.*, i.id AS id_tid, i.turn_index AS id_turn, i.session_id AS id_session,
       CASE WHEN i.id IS NULL THEN x.id END AS sup_tid, CASE WHEN i.id IS NULL THEN x.turn_index END AS sup_turn,
       CASE WHEN i.id IS NULL THEN x.session_id END AS sup_session,
       CASE WHEN i.id IS NULL THEN x.differs END AS sup_differs
FROM c
LEFT JOIN tgt_ids i
       ON i.source_message_id = CAST(c.message_id AS VARCHAR) AND i.created_at = c.created_iso
LEFT JOIN tgt_superseded x
       ON x.source_message_id = CAST(c.message_id AS VARCHAR) AND x.created_at = c.created_iso;

-- a row the source's message is written beside was imported into that session too
UPDATE sessions SET session_id = k.kept
FROM (SELECT conversation_id, arg_min(coalesce(id_session, sup_session), coalesce(id_tid, sup_tid)) AS kept
      FROM src_timed WHERE coalesce(id_tid, sup_tid) IS NOT NULL GROUP BY conversation_id) k
WHERE sessions.conversation_id = k.conversation_id AND sessions.session_id <> k.kept;
