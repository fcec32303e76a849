-- step: reconcile_write_parts (content blocks flattening)
-- engine: sqlite (write, once per batch)
-- reads: _new, plan.jsonl_parts (the run file's parts)
-- produces: lcm_message_parts rows
-- key: (target message id, ordinal)
-- why: each content block became one part when the transcript was read (kind text / reasoning /
--      tool_call / tool_result / file / the block's own type; payload = the whole block, image data
--      included), the same flattening as 74_part_rows.sql.
-- count: parts_inserted
INSERT INTO lcm_message_parts (message_id, ordinal, kind, payload, tool_name, file_path, created_at)
SELECT n.id, q.ordinal, q.kind, q.payload, q.tool_name, q.file_path, coalesce(q.created_at, n.created_iso)
FROM (SELECT q.rowid AS part_row, n.id, n.created_iso
      FROM _new n JOIN plan.jsonl_parts q ON q.message_id = n.src_message_id
      ORDER BY n.id, q.ordinal LIMIT -1) n   -- the keys are sorted, never a payload (a huge value)
CROSS JOIN plan.jsonl_parts q ON q.rowid = n.part_row;
