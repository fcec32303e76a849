-- step: flatten_parts (message_parts flattening)
-- engine: sqlite (scratch: once per run, before the write transactions, on its own connection)
-- reads: flatten_owners (write.PLANNED_OWNERS: plan.plan_messages and plan.plan_present_parts; or, for a
--        new target, write.ALL_OWNERS: every source message, started before planning), src_parts
-- produces: scratch.parts(message_id, ordinal, kind, payload, tool_name, file_path, created_at, batch)
-- key: (source message id, ordinal)
-- why: SPEC §3.4. One target row per source part. kind: Remnic's name where one exists (a tool part is
--      tool_call, or tool_result when lossless-claw recorded a result block), else the source type.
--      payload: a JSON object of every non-null source column that has no target column (built by
--      sources.normalized_views, so it adapts to the schema generation). file_path from the file and
--      patch fields; created_at the part's own, else its message's (filled by 80_write_parts.sql when
--      the owner's time is not known yet). Building the JSON is the costliest work of a migration, so
--      it runs outside the target's write lock, in parallel with planning or with the message writes;
--      80_write_parts.sql then only copies rows. Rows come in the order of the source's (message_id,
--      ordinal) index, which SQLite then reads in one pass.
CREATE TABLE scratch.parts AS
SELECT owner.message_id, p.ordinal,
       CASE WHEN p.source_kind = 'tool' THEN
              CASE WHEN lower(coalesce(p.raw_type, ''))
                        IN ('tool_result', 'toolresult', 'tool_use_result', 'function_call_output')
                     OR (p.raw_type IS NULL AND p.has_output AND NOT p.has_input)
                   THEN 'tool_result' ELSE 'tool_call' END
            ELSE p.source_kind END AS kind,
       p.payload, p.tool_name, p.file_path,
       coalesce(strftime('%Y-%m-%dT%H:%M:%fZ', p.created_at), p.created_at, owner.created_iso) AS created_at,
       owner.batch
FROM flatten_owners owner
JOIN src_parts p ON p.message_id = owner.message_id
WHERE owner.only_ordinal IS NULL OR owner.only_ordinal = p.ordinal
ORDER BY p.message_id, p.ordinal;

CREATE INDEX scratch.parts_batch ON parts(batch);
