-- step: reconcile_stage
-- engine: duckdb (stage: plan tables → the stage file)
-- reads: write_messages, jsonl_messages, session_work, off_path
-- produces: stage.plan_messages, stage.plan_sessions, stage.plan_present (empty: nothing to resolve),
--           stage.plan_off_path (the marks that change: r90_mark_off_path.sql);
--           the stage already holds jsonl_content and plan_parts, written by lcm_etl/read/transcript_rows.py
-- key: batch
-- why: the write steps (70_assign_turns, r72, 75_index_messages, r80, 90_write_boundary) read these.
--      Content, metadata and payloads (a transcript has no database to copy them from) went from
--      Python into the stage directly: DuckDB plans identities and never holds a value of any size.
CREATE TABLE stage.plan_messages AS
SELECT w.message_id, w.session_id, w.new_rank, w.batch,
       row_number() OVER (ORDER BY w.batch, w.session_id, w.new_rank) AS write_order,
       m.created_iso, CAST(NULL AS VARCHAR) AS created_raw, CAST(NULL AS BIGINT) AS fixed_turn,
       m.role, m.token_count
FROM write_messages w JOIN jsonl_messages m USING (message_id)
ORDER BY w.batch, w.session_id, w.new_rank;

CREATE TABLE stage.plan_sessions AS
SELECT session_id, batch, CAST(gains_data AS INTEGER) AS gains_data, 1 AS needs_boundary FROM session_work;

CREATE TABLE stage.plan_present AS
SELECT CAST(NULL AS BIGINT) AS message_id, CAST(NULL AS BIGINT) AS tid_present, CAST(NULL AS BIGINT) AS turn_present
WHERE false;

CREATE TABLE stage.plan_off_path AS
SELECT tid, off FROM off_path WHERE off <> marked ORDER BY tid;
