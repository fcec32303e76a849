-- step: source_marks
-- engine: duckdb (plan; over the whole source, or over a sync re-run's scope before 09)
-- reads: src_conversations, src_messages, src_parts, src_summaries, src_summary_messages, src_summary_parents,
--        src_large_files, content_marks (lcm_etl/planning/delta.py: its messages' content, digested by SQLite)
-- produces: source_marks(conversation_id, mark) — one digest per source conversation
-- key: conversation_id
-- why: cost follows the change (docs/design.md, "Sync"). A mark digests every value of a conversation the plan reads or
--      that lossless-claw can change in place (docs/mapping.md, "When the source changes"): its row, its
--      messages' identities and drifting attributes, its parts' keys, its summaries (text by md5), their
--      links and edges, its large files. The run stores the marks (95_write_provenance.sql); the next run
--      re-plans only conversations whose mark differs (08_sync_scope.sql): an unchanged conversation is
--      proved unchanged by value, never assumed. No path of the plugin edits message content, but a row
--      edited by hand is another message (04_superseded_rows.sql): its content is in the mark too, digested
--      by SQLite (content_marks), since the plan never reads content.
CREATE OR REPLACE TABLE source_marks AS
WITH conv AS (
  SELECT conversation_id, hash(conversation_id, session_id, session_key, title, active, archived_at, archive_cause,
                              bootstrapped_at, created_at, updated_at) AS h
  FROM src_conversations
), msg AS (
  SELECT conversation_id, count(*) AS n,
         bit_xor(hash(message_id, seq, role, token_count, identity_hash, transcript_entry_id,
                      openclaw_sender_metadata, stable_event_key, created_at)) AS h
  FROM src_messages GROUP BY conversation_id
), part AS (
  SELECT m.conversation_id, count(*) AS n,
         bit_xor(hash(p.message_id, p.ordinal, p.source_kind, p.tool_name, p.created_at, p.has_input, p.has_output)) AS h
  FROM src_parts p JOIN src_messages m USING (message_id) GROUP BY m.conversation_id
), summ AS (
  SELECT conversation_id, count(*) AS n,
         bit_xor(hash(summary_id, kind, depth, md5(content), token_count, earliest_at, latest_at, descendant_count,
                      descendant_token_count, source_message_token_count, created_at, file_ids, model)) AS h
  FROM src_summaries GROUP BY conversation_id
), link AS (
  SELECT s.conversation_id, count(*) AS n, bit_xor(hash(l.summary_id, l.message_id, l.ordinal)) AS h
  FROM src_summary_messages l JOIN src_summaries s USING (summary_id) GROUP BY s.conversation_id
), edge AS (   -- an edge counts for the conversations of both its ends
  SELECT conversation_id, count(*) AS n, bit_xor(h) AS h
  FROM (SELECT s.conversation_id, hash(e.summary_id, e.parent_summary_id, e.ordinal) AS h
        FROM src_summary_parents e JOIN src_summaries s ON s.summary_id = e.summary_id
        UNION ALL
        SELECT s.conversation_id, hash(e.summary_id, e.parent_summary_id, e.ordinal, 'parent') AS h
        FROM src_summary_parents e JOIN src_summaries s ON s.summary_id = e.parent_summary_id)
  GROUP BY conversation_id
), files AS (
  SELECT conversation_id, count(*) AS n,
         bit_xor(hash(file_id, file_name, mime_type, byte_size, line_count, storage_uri, exploration_summary,
                      created_at)) AS h
  FROM src_large_files GROUP BY conversation_id
)
SELECT CAST(c.conversation_id AS VARCHAR) AS conversation_id,
       concat_ws(':', c.h, coalesce(msg.n, 0), coalesce(msg.h, 0), coalesce(part.n, 0), coalesce(part.h, 0),
                 coalesce(summ.n, 0), coalesce(summ.h, 0), coalesce(link.n, 0), coalesce(link.h, 0),
                 coalesce(edge.n, 0), coalesce(edge.h, 0), coalesce(files.n, 0), coalesce(files.h, 0),
                 coalesce(cm.digest, '0')) AS mark
FROM conv c
LEFT JOIN msg USING (conversation_id) LEFT JOIN part USING (conversation_id) LEFT JOIN summ USING (conversation_id)
LEFT JOIN link USING (conversation_id) LEFT JOIN edge USING (conversation_id) LEFT JOIN files USING (conversation_id)
LEFT JOIN content_marks cm ON cm.conversation_id = CAST(c.conversation_id AS VARCHAR);
