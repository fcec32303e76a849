-- step: final_parts (a new target's parts, in their final form)
-- engine: sqlite (scratch: once, on the flattener's connection, as soon as the stage exists; new targets
--         built from integer source ids only)
-- reads: scratch.parts (78_flatten_parts.sql), plan.plan_messages
-- produces: scratch.lcm_message_parts — created beforehand with Remnic's own DDL (target.table_ddl),
--           indexed afterwards with Remnic's own index DDL
-- key: (target message id = source message id, ordinal)
-- why: a new target gives each message its source id (69_new_target_turns.sql), so the parts
--      can take their final form here, beside the writer and outside its work: created_at falls back to
--      the message's time as the plan wrote it, and parts of messages the plan does not write (orphans)
--      drop out with the join. 81_copy_parts.sql then moves the table and its indexes into the
--      target as a page copy instead of re-inserting every row.
INSERT INTO scratch.lcm_message_parts (message_id, ordinal, kind, payload, tool_name, file_path, created_at)
SELECT s.message_id, s.ordinal, s.kind, s.payload, s.tool_name, s.file_path, coalesce(s.created_at, q.created_iso)
FROM scratch.parts s
JOIN plan.plan_messages q ON q.message_id = s.message_id
ORDER BY s.rowid;
