-- step: superseded_rows
-- engine: sqlite (a read-only connection to the target file 05_target_state.sql reads — the whole target, or a
--         sync re-run's scope of it — with the source snapshot attached as src; plan.py hands the rows to DuckDB)
-- reads: lcm_messages, src_messages
-- produces: TEMP TABLE superseded_rows(id, differs) — the imported lossless-claw rows whose source message (the
--           one with their source message id) holds another role, content or token_count now, and which of them
-- key: target message id
-- why: one policy for migrate and audit (docs/mapping.md, "When the source changes"): lossless-claw never
--      rewrites a message's role, content or token_count, so a source row with an imported row's id and instant
--      but other values is another message — a restored backup's id issued again within the same second, or a
--      row edited by hand. It is imported beside the imported row, which keeps its values and identity (the
--      target is the archive); the imported row no longer holds the source message (05_target_state.sql).
--      Values are compared here, byte for byte, by SQLite: DuckDB never reads a content column, and each row
--      is found through the source's primary key.
DROP TABLE IF EXISTS temp.superseded_rows;

CREATE TEMP TABLE superseded_rows AS
SELECT t.id, substr(CASE WHEN s.role IS NOT t.role THEN ', role' ELSE '' END
                    || CASE WHEN s.content IS NOT t.content THEN ', content' ELSE '' END
                    || CASE WHEN s.token_count IS NOT t.token_count THEN ', token_count' ELSE '' END, 3) AS differs
FROM (SELECT id, role, content, token_count, json_extract(metadata, '$.source_message_id') AS source_message_id
      FROM lcm_messages
      WHERE metadata LIKE '%lossless-claw%' AND json_valid(metadata)
        AND json_extract(metadata, '$.source') = 'lossless-claw') t
JOIN src_messages s ON s.message_id = t.source_message_id
WHERE s.role IS NOT t.role OR s.content IS NOT t.content OR s.token_count IS NOT t.token_count;
