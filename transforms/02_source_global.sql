-- step: source_global
-- engine: duckdb (plan; with 03, over the whole source)
-- reads: src_conversations, src_messages, src_parts, src_summaries, src_summary_messages, src_summary_parents
-- produces: source_global(schema_signature, orphan_messages, orphan_parts, orphan_summaries, orphan_summary_links,
--           orphan_summary_edges) — the schema, and the rows that belong to no conversation (lcm_etl/store/marks.py)
-- key: none (one row)
-- why: cost follows the change (docs/design.md, "Sync"), as 03. Rows of no known conversation are skipped by the plan; a
--      change among them still calls for a full plan, so their counts are part of the source's global mark.
--      A step of its own because a sync re-run whose changes were found page by page does not compute it:
--      such a run owns no changed row of no conversation (that sends it to a full plan), and carries the
--      recorded mark (09_carried_marks.sql).
CREATE OR REPLACE TABLE source_global AS
SELECT CAST($schema_sig AS VARCHAR) AS schema_signature,
       (SELECT count(*) FROM src_messages
        WHERE conversation_id NOT IN (SELECT conversation_id FROM src_conversations)) AS orphan_messages,
       (SELECT count(*) FROM src_parts WHERE message_id NOT IN (SELECT message_id FROM src_messages)) AS orphan_parts,
       (SELECT count(*) FROM src_summaries
        WHERE conversation_id NOT IN (SELECT conversation_id FROM src_conversations)) AS orphan_summaries,
       (SELECT count(*) FROM src_summary_messages
        WHERE summary_id NOT IN (SELECT summary_id FROM src_summaries)) AS orphan_summary_links,
       (SELECT count(*) FROM src_summary_parents WHERE summary_id NOT IN (SELECT summary_id FROM src_summaries)
          AND parent_summary_id NOT IN (SELECT summary_id FROM src_summaries)) AS orphan_summary_edges;
