-- step: apply_changes
-- engine: sqlite (write, once per batch, after the batch's new summaries and before its boundary event)
-- reads: plan.plan_message_refresh, plan.plan_summary_refresh, plan.plan_parent_updates,
--        src_messages, src_conversations, src_summaries
-- produces: lcm_messages.metadata refreshed, lcm_summary_nodes text/token_count and their lcm_summaries_fts
--           rows, lcm_summary_nodes.parent_id updated, lcm_etl_summaries.parent_candidates in step (the
--           re-parented summaries' edges are in plan.plan_edges, which 85_write_summaries.sql records)
-- key: target message id / summary id (decided in 52_in_place_changes.sql)
-- why: a re-run converges (52_in_place_changes.sql). The rows change in the same transaction as the rest of their session's batch. The summary
--      FTS index has external content, so the old text is taken out of it before the row changes and the
--      new text put in after (the same 'delete' command Remnic's own triggers-free writes use).
--      Metadata keys that 72_write_messages.sql always writes are set (title, identity_hash, conversation_id, source_seq);
--      the optional ones are patched, so a value that became NULL drops its key as a first write would.
-- count: messages_updated
UPDATE lcm_messages
SET metadata = CAST(lcm_etl_utf8_json(CAST(json_patch(   -- valid UTF-8, as 72_write_messages.sql writes it
      json_set(metadata, '$.conversation_id', m.conversation_id, '$.identity_hash', m.identity_hash,
               '$.source_seq', m.seq, '$.title', c.title),
      json_object('session_key', c.session_key, 'transcript_entry_id', m.transcript_entry_id,
                  'openclaw_sender_metadata', m.openclaw_sender_metadata)) AS BLOB)) AS TEXT)
FROM plan.plan_message_refresh r
JOIN src_messages m ON m.message_id = r.message_id
JOIN src_conversations c ON c.conversation_id = m.conversation_id
WHERE lcm_messages.id = r.tid AND r.batch BETWEEN :lo AND :hi;

INSERT INTO lcm_summaries_fts (lcm_summaries_fts, rowid, summary_text)
SELECT 'delete', n.rowid, n.summary_text
FROM plan.plan_summary_refresh r JOIN lcm_summary_nodes n ON n.id = r.summary_id
WHERE r.batch BETWEEN :lo AND :hi;

-- count: summaries_updated
UPDATE lcm_summary_nodes SET summary_text = s.content, token_count = s.token_count
FROM plan.plan_summary_refresh r JOIN src_summaries s ON s.summary_id = r.summary_id
WHERE lcm_summary_nodes.id = r.summary_id AND r.batch BETWEEN :lo AND :hi;

INSERT INTO lcm_summaries_fts (rowid, summary_text)
SELECT n.rowid, n.summary_text
FROM plan.plan_summary_refresh r JOIN lcm_summary_nodes n ON n.id = r.summary_id
WHERE r.batch BETWEEN :lo AND :hi;

-- count: parents_updated
UPDATE lcm_summary_nodes SET parent_id = u.parent_id
FROM plan.plan_parent_updates u
WHERE lcm_summary_nodes.id = u.summary_id AND u.batch BETWEEN :lo AND :hi;

UPDATE lcm_etl_summaries SET parent_candidates = u.candidates
FROM plan.plan_parent_updates u
WHERE lcm_etl_summaries.summary_id = u.summary_id AND u.batch BETWEEN :lo AND :hi;
