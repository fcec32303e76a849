-- step: fresh_parts (a new target's parts, in their final form)
-- engine: sqlite (build: on the builder's connection, in the new target's private file, while DuckDB
--         plans; new targets built from integer source ids — lcm_etl/load/fresh.py)
-- reads: fresh_owners (fresh.SOURCE_OWNERS: every source message of a known conversation, its time as
--        SQLite formats it; with a session filter fresh.PLANNED_OWNERS: the plan's messages and times),
--        part_rows (74_part_rows.sql)
-- produces: lcm_message_parts rows (Remnic's indexes are built once the rows are in)
-- key: (target message id = source message id, ordinal)
-- why: a new target keeps the source message ids, so a part needs nothing from the plan but its
--      message's time, and it is written once, where it stays. Parts of messages the plan does not
--      write cannot appear: the owners are exactly the planned messages (the foreign-key check before
--      the link would catch one), and a message time the plan reads differently is put right by
--      73_part_time_fixes.sql and 84_part_times.sql.
-- count: parts_inserted
INSERT INTO lcm_message_parts (message_id, ordinal, kind, payload, tool_name, file_path, created_at)
SELECT p.message_id, p.ordinal, p.kind, p.payload, p.tool_name, p.file_path,
       coalesce(p.created_at, k.created_iso)
FROM (SELECT p.src_rowid, o.created_iso FROM fresh_owners o JOIN src_parts p ON p.message_id = o.message_id
      ORDER BY p.message_id, p.ordinal LIMIT -1) k   -- the keys are sorted, never a payload (a huge value)
CROSS JOIN part_rows p ON p.src_rowid = k.src_rowid;
