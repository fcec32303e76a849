-- step: in_place_changes
-- engine: duckdb (plan)
-- reads: msg_plan, src_messages, src_conversations, tgt_ids, sum_plan, src_summaries, sum_parent, sum_level,
--        tgt_summaries, tgt_conversations, sessions
-- produces: message_refresh(message_id, tid, session_id, changed) — imported messages whose source attributes
--                        kept in metadata have changed since (the rollover-split repair's move, entry ids and
--                        sender metadata filled in later, identity_hash backfills, a session key or title set)
--           summary_refresh(summary_id, session_id) — imported summaries whose text or token_count changed
--                        (lossless-claw's doctor, lcm-tui repair/rewrite)
--           parent_updates(summary_id, session_id, parent_id, candidates) — imported summaries whose parent
--                        (50_parent_collapse.sql) is now another summary (lossless-claw condensed them after they were imported)
--           conversation_same(conversation_id) — conversations whose provenance row for this source path is
--                        as the source has it now (archiving, rebinds and lifecycle stamps change the others)
-- key: target message id / summary id / (source path, conversation id)
-- why: a re-run converges on what the mapping (docs/mapping.md) gives for the source as it is now, and the target's rows
--      follow what lossless-claw changes in place (docs/mapping.md, "When the source changes"). Nothing is
--      ever removed here: a parent is only set or moved to the summary that covers a node now, never
--      cleared (a covering summary the source deleted stays in the archive), and content is not compared
--      for messages: lossless-claw never rewrites a message's role, content, token_count or created_at.
CREATE OR REPLACE TABLE message_refresh AS
SELECT m.message_id, m.tid_present AS tid, m.session_id,
       concat_ws(', ',
         CASE WHEN t.conversation_id IS DISTINCT FROM m.conv_key OR t.source_seq IS DISTINCT FROM m.seq
              THEN 'moved' END,
         CASE WHEN t.transcript_entry_id IS DISTINCT FROM s.transcript_entry_id THEN 'transcript_entry_id' END,
         CASE WHEN t.sender_metadata IS DISTINCT FROM s.openclaw_sender_metadata THEN 'sender metadata' END,
         CASE WHEN t.identity_hash IS DISTINCT FROM s.identity_hash THEN 'identity_hash' END,
         CASE WHEN t.session_key IS DISTINCT FROM c.session_key OR t.title IS DISTINCT FROM c.title
              THEN 'conversation' END) AS changed
FROM msg_plan m
JOIN tgt_ids t ON t.id = m.tid_present
JOIN src_messages s ON s.message_id = m.message_id
JOIN src_conversations c ON c.conversation_id = s.conversation_id
WHERE NOT m.is_new
  AND (t.conversation_id IS DISTINCT FROM m.conv_key OR t.source_seq IS DISTINCT FROM m.seq
       OR t.transcript_entry_id IS DISTINCT FROM s.transcript_entry_id
       OR t.sender_metadata IS DISTINCT FROM s.openclaw_sender_metadata
       OR t.identity_hash IS DISTINCT FROM s.identity_hash
       OR t.session_key IS DISTINCT FROM c.session_key OR t.title IS DISTINCT FROM c.title);

CREATE OR REPLACE TABLE summary_refresh AS
SELECT p.summary_id, p.session_id
FROM sum_plan p
JOIN src_summaries s USING (summary_id)
JOIN tgt_summaries t ON t.id = p.summary_id
WHERE p.status = 'present'
  AND (t.text_md5 IS DISTINCT FROM md5(s.content) OR t.token_count IS DISTINCT FROM s.token_count);

-- sum_level holds only summaries on a chain that reaches a root, so an update never closes a cycle
CREATE OR REPLACE TABLE parent_updates AS
SELECT p.summary_id, p.session_id, sp.parent_id, sp.candidates
FROM sum_plan p
JOIN sum_parent sp ON sp.source_id = p.summary_id
JOIN sum_level l ON l.summary_id = p.summary_id
JOIN tgt_summaries t ON t.id = p.summary_id
WHERE p.status = 'present' AND sp.parent_id IS NOT NULL AND t.parent_id IS DISTINCT FROM sp.parent_id;

CREATE OR REPLACE TABLE conversation_same AS
SELECT c.conversation_id
FROM src_conversations c
JOIN sessions s USING (conversation_id)
JOIN tgt_conversations t ON t.source_path = $source_path AND t.conv_key = s.conv_key
WHERE t.session_id = s.session_id
  AND t.source_session_id IS NOT DISTINCT FROM c.session_id AND t.session_key IS NOT DISTINCT FROM c.session_key
  AND t.title IS NOT DISTINCT FROM c.title AND t.active IS NOT DISTINCT FROM CAST(c.active AS VARCHAR)
  AND t.archived_at IS NOT DISTINCT FROM c.archived_at AND t.archive_cause IS NOT DISTINCT FROM c.archive_cause
  AND t.bootstrapped_at IS NOT DISTINCT FROM c.bootstrapped_at AND t.created_at IS NOT DISTINCT FROM c.created_at
  AND t.updated_at IS NOT DISTINCT FROM c.updated_at;
