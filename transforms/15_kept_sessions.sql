-- step: kept_sessions
-- engine: duckdb (plan)
-- reads: sessions, src_messages, src_conversations, tgt_ids, tgt_superseded
-- produces: src_timed(message_id, ..., ts, created_iso, id_tid, sup_tid, not_utf8) — every source message with its
--           parsed time, Remnic's created_at text, the target row holding it by identity (05_target_state.sql),
--           the imported row of its identity that holds other values (sup_*: it is written beside that row) and
--           whether a value its metadata is made of is not UTF-8 (not_utf8);
--           sessions.session_id rewritten for conversations already imported (rule_session keeps 10's)
-- key: conversation_id
-- why: a conversation stays in the Remnic session it was first imported into. lossless-claw rebinds a
--      conversation to a new session id in place (and a user may change --key-by): by the session rule alone its whole
--      history would look new under the new session and be imported a second time, and the summaries over
--      it would land in one session while their messages sit in another. New messages of such a
--      conversation follow its history. The session a conversation has now is kept in provenance
--      (lcm_etl_conversations.source_session_id).
--      not_utf8: SQLite keeps whatever bytes a text value is given and its JSON functions copy them as they are,
--      so the metadata 72_write_messages.sql and 87_apply_changes.sql build of a value that is not UTF-8 is made
--      valid by a Python function (sqlite_runtime.utf8_json), called for the rows found here (stage.plan_not_utf8)
--      and no other: nearly no row needs it, and calling it for every row cost 0.2 s per 200k messages. The
--      values are those metadata holds: the message's own (every release's extra columns, which the plan does
--      not read, count as not UTF-8: extra_columns is non-NULL when there are any), its conversation's title
--      and session key. DuckDB reads them anyway (03_source_marks.sql digests them) and checks them vectorised.
CREATE OR REPLACE TEMP MACRO not_utf8(v) AS v IS NOT NULL AND try(decode(encode(CAST(v AS VARCHAR)))) IS NULL;

CREATE OR REPLACE TABLE src_timed AS
WITH bad_conv AS (
  SELECT conversation_id FROM src_conversations
  WHERE not_utf8(conversation_id) OR not_utf8(title) OR not_utf8(session_key)
), t AS (
  SELECT m.message_id, m.conversation_id, m.seq, m.role, m.token_count, m.transcript_entry_id,
         m.created_at AS created_raw, try_cast(m.created_at AS TIMESTAMPTZ) AS ts,
         m.extra_columns IS NOT NULL OR not_utf8(m.message_id) OR not_utf8(m.identity_hash)
           OR not_utf8(m.transcript_entry_id) OR not_utf8(m.openclaw_sender_metadata) OR not_utf8(m.stable_event_key)
           OR not_utf8(m.large_content) OR not_utf8(m.created_at)
           OR m.conversation_id IN (SELECT conversation_id FROM bad_conv) AS not_utf8
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
