-- step: write_messages
-- engine: sqlite (write, once per batch; :lo/:hi bound the batch numbers)
-- reads: plan.plan_messages, src_messages, src_conversations, lcm_messages (current max turn and id)
-- produces: lcm_messages rows, their lcm_messages_fts rows, and _map(src_message_id → target id, turn)
-- key: (session_id, metadata.conversation_id, metadata.source_seq) — decided in 20_turn_index.sql
-- why: turn_index is fixed here, inside the write transaction: base = the session's maximum turn now
--      (a live Remnic may have appended since planning) + 1, plus the planned rank. Ids are given
--      explicitly (AUTOINCREMENT is honoured: max of sqlite_sequence and max(id)) so parts and FTS rows
--      can refer to them without reading them back. metadata carries the source identity (SPEC §3.3).
DELETE FROM _new;

INSERT INTO _new (src_message_id, session_id, turn, id, created_iso, created_raw)
WITH b AS (
  SELECT q.session_id, min(q.new_rank) AS first_rank,
         (SELECT coalesce(max(t.turn_index), -1) + 1 FROM lcm_messages t WHERE t.session_id = q.session_id) AS base
  FROM plan.plan_messages q WHERE q.batch BETWEEN :lo AND :hi GROUP BY q.session_id
), id0 AS (
  SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'lcm_messages'), 0),
             coalesce((SELECT max(id) FROM lcm_messages), 0)) AS v
)
SELECT p.message_id, p.session_id, b.base + p.new_rank - b.first_rank,
       (SELECT v FROM id0) + row_number() OVER (ORDER BY p.batch, p.session_id, p.new_rank),
       p.created_iso, p.created_raw
FROM plan.plan_messages p JOIN b USING (session_id)
WHERE p.batch BETWEEN :lo AND :hi;

-- count: messages_inserted
INSERT INTO lcm_messages (id, session_id, turn_index, role, content, token_count, created_at, metadata)
SELECT n.id, n.session_id, n.turn, m.role, m.content, m.token_count, n.created_iso,
       json_patch(
         json_object('conversation_id', m.conversation_id, 'identity_hash', m.identity_hash,
                     'source', 'lossless-claw', 'source_seq', m.seq, 'title', c.title),
         json_object('session_key', c.session_key, 'source_message_id', m.message_id,
                     'source_created_at', n.created_raw, 'transcript_entry_id', m.transcript_entry_id,
                     'openclaw_sender_metadata', m.openclaw_sender_metadata,
                     'stable_event_key', m.stable_event_key, 'large_content', m.large_content))
FROM _new n
JOIN src_messages m ON m.message_id = n.src_message_id
JOIN src_conversations c ON c.conversation_id = m.conversation_id
ORDER BY n.id;

INSERT INTO lcm_messages_fts (rowid, content)
SELECT t.id, t.content FROM _new n JOIN lcm_messages t ON t.id = n.id ORDER BY t.id;

INSERT OR REPLACE INTO _map (src_message_id, tid, turn, created_iso)
SELECT src_message_id, id, turn, created_iso FROM _new;
