-- step: source_marks
-- engine: duckdb (plan; over the whole source, or over a sync re-run's scope before 09)
-- reads: src_conversations, src_messages, src_parts, src_summaries, src_summary_messages, src_summary_parents,
--        src_large_files, content_marks (lcm_etl/planning/delta.py: its messages' content, digested by SQLite)
-- produces: source_marks(conversation_id, conversation_hash, messages, messages_hash, parts, parts_hash, summaries,
--           summaries_hash, summary_links, summary_links_hash, summary_edges, summary_edges_hash, large_files,
--           large_files_hash, content_digest) — one mark per source conversation, its figures named in
--           lcm_etl/store/marks.py (per source table: how many rows, a digest of them)
-- key: conversation_id
-- why: cost follows the change (docs/design.md, "Sync"). A mark digests every value of a conversation the plan reads or
--      that lossless-claw can change in place (docs/mapping.md, "When the source changes"): its row, its
--      messages' identities and drifting attributes, its parts' keys, its summaries (text by md5), their
--      links and edges, its large files. The run stores the marks (95_write_provenance.sql); the next run
--      re-plans only conversations whose mark differs (08_sync_scope.sql): an unchanged conversation is
--      proved unchanged by value, never assumed. No path of the plugin edits message content, but a row
--      edited by hand is another message (04_superseded_rows.sql): its content is in the mark too, digested
--      by SQLite (content_marks), since the plan never reads content. The digests are DuckDB's unsigned 64-bit
--      hashes; SQLite's integers are signed, so they are kept as the same 64 bits read signed (signed64).
CREATE OR REPLACE TEMP MACRO signed64(h) AS
  CAST(CAST(h AS HUGEINT) - CASE WHEN h >= 9223372036854775808 THEN 18446744073709551616 ELSE 0 END AS BIGINT);

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
SELECT CAST(c.conversation_id AS VARCHAR) AS conversation_id, signed64(c.h) AS conversation_hash,
       coalesce(msg.n, 0) AS messages, signed64(coalesce(msg.h, 0)) AS messages_hash,
       coalesce(part.n, 0) AS parts, signed64(coalesce(part.h, 0)) AS parts_hash,
       coalesce(summ.n, 0) AS summaries, signed64(coalesce(summ.h, 0)) AS summaries_hash,
       coalesce(link.n, 0) AS summary_links, signed64(coalesce(link.h, 0)) AS summary_links_hash,
       coalesce(edge.n, 0) AS summary_edges, signed64(coalesce(edge.h, 0)) AS summary_edges_hash,
       coalesce(files.n, 0) AS large_files, signed64(coalesce(files.h, 0)) AS large_files_hash,
       CAST(coalesce(cm.digest, '0') AS VARCHAR) AS content_digest
FROM conv c
LEFT JOIN msg USING (conversation_id) LEFT JOIN part USING (conversation_id) LEFT JOIN summ USING (conversation_id)
LEFT JOIN link USING (conversation_id) LEFT JOIN edge USING (conversation_id) LEFT JOIN files USING (conversation_id)
LEFT JOIN content_marks cm ON cm.conversation_id = CAST(c.conversation_id AS VARCHAR);
