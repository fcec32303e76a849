-- step: part_rows (message_parts in Remnic's terms)
-- engine: sqlite (view: on the connections that flatten parts — 78 for an existing target, 76 for a new
--         one — and on a new target's final connection, for 84_part_times.sql)
-- reads: src_parts (source_schema.normalized_views: adapts to the schema generation)
-- produces: TEMP VIEW part_rows(message_id, ordinal, kind, payload, tool_name, file_path, created_at)
-- key: (source message id, ordinal)
-- why: said once for both ways of writing parts (docs/mapping.md, `message_parts`). One target row per source part. kind:
--      Remnic's name where one exists (a tool part is tool_call, or tool_result when lossless-claw
--      recorded a result block), else the source type. payload: a JSON object of every non-null source
--      column that has no target column. file_path from the file and patch fields. created_at the
--      part's own in Remnic's ISO form (NULL when the part has none: its message's time is used).
CREATE TEMP VIEW part_rows AS
SELECT p.message_id, p.ordinal, p.src_rowid,
       CASE WHEN p.source_kind = 'tool' THEN
              CASE WHEN lower(coalesce(p.raw_type, ''))
                        IN ('tool_result', 'toolresult', 'tool_use_result', 'function_call_output')
                     OR (p.raw_type IS NULL AND p.has_output AND NOT p.has_input)
                   THEN 'tool_result' ELSE 'tool_call' END
            ELSE p.source_kind END AS kind,
       p.payload, p.tool_name, p.file_path,
       coalesce(strftime('%Y-%m-%dT%H:%M:%fZ', p.created_at), p.created_at) AS created_at
FROM src_parts p;
