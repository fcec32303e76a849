-- step: write_messages (lossless-claw rows)
-- engine: sqlite (write, once per batch)
-- reads: _new, src_messages, src_conversations
-- produces: lcm_messages rows
-- key: (session_id, metadata.conversation_id, metadata.source_seq) — decided in 20_turn_index.sql
-- why: role, content and token_count verbatim; created_at in Remnic's ISO form (the source text kept
--      as metadata.source_created_at when it differs). metadata carries the source identity and every
--      source column that has no target column (docs/mapping.md, `messages`), a newer release's own columns too
--      (extra_columns, source_schema.extra_message_columns: NULL when the source has none, and no json_patch is
--      paid for it), made valid UTF-8 (lcm_etl_utf8_json: a source text whose bytes are not UTF-8 would
--      otherwise reach the JSON as they are).
-- count: messages_inserted
INSERT INTO lcm_messages (id, session_id, turn_index, role, content, token_count, created_at, metadata)
SELECT id, session_id, turn, role, content, token_count, created_iso,
       CAST(lcm_etl_utf8_json(CAST(CASE WHEN extra_columns IS NULL THEN meta ELSE json_patch(meta, extra_columns) END
                                   AS BLOB)) AS TEXT)
FROM (
  SELECT n.id, n.session_id, n.turn, m.role, m.content, m.token_count, n.created_iso, m.extra_columns,
         json_patch(
           json_object('conversation_id', m.conversation_id, 'identity_hash', m.identity_hash,
                       'source', 'lossless-claw', 'source_seq', m.seq, 'title', c.title),
           json_object('session_key', c.session_key, 'source_message_id', m.message_id,
                       'source_created_at', n.created_raw, 'transcript_entry_id', m.transcript_entry_id,
                       'openclaw_sender_metadata', m.openclaw_sender_metadata,
                       'stable_event_key', m.stable_event_key, 'large_content', m.large_content)) AS meta
  FROM (SELECT * FROM _new ORDER BY id LIMIT -1) n   -- keys sorted, content looked up in that order
  CROSS JOIN src_messages m ON m.message_id = n.src_message_id
  CROSS JOIN src_conversations c ON c.conversation_id = m.conversation_id
);
