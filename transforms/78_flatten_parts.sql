-- step: flatten_parts (message_parts flattening, an existing target)
-- engine: sqlite (scratch: once per run, before the write transactions, on its own connection)
-- reads: flatten_owners (flatten.PLANNED_OWNERS: plan.plan_messages and plan.plan_present_parts; or, for a
--        new target from TEXT ids, flatten.ALL_OWNERS: every source message, started before planning),
--        part_rows (74_part_rows.sql)
-- produces: scratch.parts(message_id, ordinal, kind, payload, tool_name, file_path, created_at, batch)
-- key: (source message id, ordinal)
-- why: building the JSON is the costliest work of a migration, so it runs outside the target's write
--      lock, in parallel with planning or with the message writes; 80_write_parts.sql then only copies
--      rows (created_at falls back to the message's time there when the owner's is not known yet).
--      Rows come in the order of the source's (message_id, ordinal) index, which SQLite then reads in
--      one pass.
CREATE TABLE scratch.parts AS
SELECT p.message_id, p.ordinal, p.kind, p.payload, p.tool_name, p.file_path,
       coalesce(p.created_at, k.created_iso) AS created_at, k.batch
FROM (SELECT p.src_rowid, owner.created_iso, owner.batch
      FROM flatten_owners owner JOIN src_parts p ON p.message_id = owner.message_id
      WHERE owner.only_ordinal IS NULL OR owner.only_ordinal = p.ordinal
      ORDER BY p.message_id, p.ordinal LIMIT -1) k   -- the keys are sorted, never a payload (a huge value)
CROSS JOIN part_rows p ON p.src_rowid = k.src_rowid;

CREATE INDEX scratch.parts_batch ON parts(batch);
