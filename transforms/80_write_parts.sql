-- step: write_parts
-- engine: sqlite (write, once per batch)
-- reads: scratch.parts (78_flatten_parts.sql), _map
-- produces: lcm_message_parts rows
-- key: (target message id, ordinal)
-- why: the parts of this batch's messages, attached to their target rows (created_at: the part's, else
--      its message's); in target id order so the (message_id, ordinal) index grows at its end.
-- count: parts_inserted
INSERT INTO lcm_message_parts (message_id, ordinal, kind, payload, tool_name, file_path, created_at)
SELECT k.tid, s.ordinal, s.kind, s.payload, s.tool_name, s.file_path, coalesce(s.created_at, k.created_iso)
FROM (SELECT s.rowid AS part_row, m.tid, m.created_iso
      FROM scratch.parts s JOIN _map m ON m.src_message_id = s.message_id
      WHERE s.batch BETWEEN :lo AND :hi
      ORDER BY m.tid, s.ordinal LIMIT -1) k   -- the keys are sorted, never a payload (a huge value)
CROSS JOIN scratch.parts s ON s.rowid = k.part_row;
