-- step: message_parts
-- engine: duckdb (plan)
-- reads: src_parts, msg_plan, tgt_parts
-- produces: part_plan(message_id, ordinal, is_new) — the source parts the target lacks;
--           part_counts(in_selected, orphans) — the report's part counts (plan.py)
-- key: (target message, ordinal): a part's identity (docs/mapping.md, "The one dedup key")
-- why: parts of a new message are all new; a message already present keeps the parts it has and gains
--      only missing ordinals. The flattening itself (kind, payload) happens in 74_part_rows.sql, where
--      SQLite copies the bulky payloads without passing them through Python or DuckDB.
CREATE OR REPLACE TABLE part_plan AS
SELECT p.message_id, p.ordinal, m.is_new, m.session_id
FROM src_parts p
JOIN msg_plan m ON m.message_id = p.message_id
WHERE m.is_new
   OR NOT EXISTS (SELECT 1 FROM tgt_parts t WHERE t.message_id = m.tid_present AND t.ordinal = p.ordinal);

CREATE OR REPLACE TABLE part_counts AS
SELECT count(*) FILTER (WHERE m.message_id IS NOT NULL) AS in_selected,
       count(*) FILTER (WHERE a.message_id IS NULL) AS orphans
FROM src_parts p
LEFT JOIN msg_plan m ON m.message_id = p.message_id
LEFT JOIN src_msgs a ON a.message_id = p.message_id;
