-- step: reconcile_write_messages (openclaw-jsonl rows)
-- engine: sqlite (write, once per batch)
-- reads: _new, plan.plan_messages, plan.jsonl_content (the run file's content and metadata)
-- produces: lcm_messages rows
-- key: metadata.transcript_entry_id within the session (decided in r20_match.sql)
-- why: content, token_count (lossless-claw's estimator, so both sources agree) and metadata
--      (source "openclaw-jsonl", file, header id, entry id, identity_hash, every message field
--      without a column) were computed when the transcript was read.
-- count: messages_inserted
INSERT INTO lcm_messages (id, session_id, turn_index, role, content, token_count, created_at, metadata)
SELECT n.id, n.session_id, n.turn, p.role, c.content, p.token_count, n.created_iso,
       -- a message without an entry id keeps its occurrence (r65_stage.sql), the metadata's last key
       CASE WHEN p.occurrence IS NULL THEN c.metadata
            ELSE substr(c.metadata, 1, length(c.metadata) - 1) || ',"identity_occurrence":' || p.occurrence || '}' END
FROM (SELECT * FROM _new ORDER BY id LIMIT -1) n   -- keys sorted, content looked up in that order
CROSS JOIN plan.plan_messages p ON p.message_id = n.src_message_id
CROSS JOIN plan.jsonl_content c ON c.message_id = n.src_message_id;
