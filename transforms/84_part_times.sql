-- step: part_times (a new target's part times that the plan read differently)
-- engine: sqlite (write: once, on the new target's private file, after 82_copy_scratch.sql)
-- reads: msgs.part_time_fixes (73_part_time_fixes.sql), part_rows (74_part_rows.sql)
-- produces: lcm_message_parts.created_at, corrected
-- key: (target message id, ordinal)
-- why: a part without a time of its own takes its message's row value, as on an existing target
--      (80_write_parts.sql); parts with their own time keep it.
-- count: part_times_fixed
UPDATE lcm_message_parts
SET created_at = (SELECT f.created_at FROM msgs.part_time_fixes f WHERE f.message_id = lcm_message_parts.message_id)
WHERE message_id IN (SELECT message_id FROM msgs.part_time_fixes)
  AND NOT EXISTS (SELECT 1 FROM part_rows p
                  WHERE p.message_id = lcm_message_parts.message_id AND p.ordinal = lcm_message_parts.ordinal
                    AND p.created_at IS NOT NULL);
