-- step: sessions
-- engine: duckdb (plan)
-- reads: src_conversations
-- produces: sessions(conversation_id, conv_key, conv_num, session_id, rule_session) — one row per source
--           conversation (rule_session: the rule's answer; session_id may be changed by 15_kept_sessions.sql)
-- key: conversation_id
-- why: Remnic has no conversations, only session ids (docs/mapping.md, "Sessions"): the trimmed session_id, or the
--      conversation_id as decimal text ("3", never "3.0") when it is blank; with --key-by session-key the
--      trimmed session_key first. conv_key is the text form used in metadata and in the dedup key.
CREATE OR REPLACE TABLE sessions AS
SELECT *, session_id AS rule_session
FROM (
SELECT conversation_id,
       CAST(conversation_id AS VARCHAR) AS conv_key,
       try_cast(conversation_id AS BIGINT) AS conv_num,
       CASE
         WHEN $key_by = 'session-key' AND trim(coalesce(session_key, ''), $ws) <> '' THEN trim(session_key, $ws)
         WHEN trim(coalesce(session_id, ''), $ws) <> '' THEN trim(session_id, $ws)
         ELSE CAST(conversation_id AS VARCHAR)
       END AS session_id
FROM src_conversations
);
