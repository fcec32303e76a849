-- step: write_parts (message_parts flattening)
-- engine: sqlite (write, once per batch)
-- reads: _new, plan.plan_present_parts, _map, src_parts
-- produces: lcm_message_parts rows
-- key: (target message id, ordinal)
-- why: SPEC §3.4. One target row per source part. kind: Remnic's name where one exists (a tool part is
--      tool_call, or tool_result when lossless-claw recorded a result block), else the source type.
--      payload: a JSON object of every non-null source column that has no target column (built by
--      sources.normalized_views, so it adapts to the schema generation). file_path from the file and
--      patch fields; created_at the part's own, else its message's.
-- count: parts_inserted
INSERT INTO lcm_message_parts (message_id, ordinal, kind, payload, tool_name, file_path, created_at)
SELECT owner.tid, p.ordinal,
       CASE WHEN p.source_kind = 'tool' THEN
              CASE WHEN lower(coalesce(p.raw_type, ''))
                        IN ('tool_result', 'toolresult', 'tool_use_result', 'function_call_output')
                     OR (p.raw_type IS NULL AND p.has_output AND NOT p.has_input)
                   THEN 'tool_result' ELSE 'tool_call' END
            ELSE p.source_kind END,
       p.payload, p.tool_name, p.file_path,
       coalesce(strftime('%Y-%m-%dT%H:%M:%fZ', p.created_at), p.created_at, owner.created_iso)
FROM (
  SELECT n.src_message_id, n.id AS tid, n.created_iso, NULL AS only_ordinal FROM _new n
  UNION ALL
  SELECT q.message_id, m.tid, q.created_iso, q.ordinal
  FROM plan.plan_present_parts q JOIN _map m ON m.src_message_id = q.message_id
  WHERE q.batch BETWEEN :lo AND :hi
) owner
JOIN src_parts p ON p.message_id = owner.src_message_id
WHERE owner.only_ordinal IS NULL OR owner.only_ordinal = p.ordinal
ORDER BY owner.tid, p.ordinal;
