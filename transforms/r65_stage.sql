-- step: reconcile_stage
-- engine: duckdb (stage: plan tables → the stage file)
-- reads: write_messages, jsonl_messages, jsonl_parts, session_work
-- produces: stage.plan_messages (with content and metadata: a transcript has no database to copy
--           from), stage.plan_parts, stage.plan_sessions, stage.plan_present (empty: nothing to resolve)
-- key: batch
-- why: the write steps (70_assign_turns, r72, 75_index_messages, r80, 90_write_boundary) read these.
CREATE TABLE stage.plan_messages AS
SELECT w.message_id, w.session_id, w.new_rank, w.batch,
       row_number() OVER (ORDER BY w.batch, w.session_id, w.new_rank) AS write_order,
       m.created_iso, CAST(NULL AS VARCHAR) AS created_raw,
       m.role, m.content, m.token_count, m.metadata
FROM write_messages w JOIN jsonl_messages m USING (message_id)
ORDER BY w.batch, w.session_id, w.new_rank;

CREATE TABLE stage.plan_parts AS
SELECT p.message_id, p.ordinal, p.kind, p.payload, p.tool_name, p.file_path, p.created_at
FROM jsonl_parts p WHERE p.message_id IN (SELECT message_id FROM write_messages);

CREATE TABLE stage.plan_sessions AS
SELECT session_id, batch, CAST(gains_data AS INTEGER) AS gains_data, 1 AS needs_boundary FROM session_work;

CREATE TABLE stage.plan_present AS
SELECT CAST(NULL AS BIGINT) AS message_id, CAST(NULL AS BIGINT) AS tid_present, CAST(NULL AS BIGINT) AS turn_present
WHERE false;
