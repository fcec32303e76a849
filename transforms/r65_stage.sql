-- step: reconcile_stage
-- engine: duckdb (stage: plan tables → the stage file)
-- reads: write_messages, jsonl_messages, session_work, off_path, selected
-- produces: stage.plan_messages (with each id-less message's occurrence), stage.plan_sessions (every session
--           planned), stage.plan_present (empty: nothing to resolve), stage.plan_off_path (the marks that change:
--           r90_mark_off_path.sql), stage.plan_target_marks (empty); write_occurrence (the occurrences
--           counted, a temp table);
--           the stage is the run file: it holds the messages' content and parts already (lcm_etl/read/sessions/run_file.py)
-- key: batch
-- why: the write steps (70_assign_turns, r72, 75_index_messages, r80, 90_write_boundary) read these.
--      Content, metadata and payloads (a transcript has no database to copy them from) went from
--      Python into the run file as it was read: DuckDB plans identities and never holds a value of any size.
--      occurrence: a message without an entry id (v1 files) is the k-th of its identity on its session's path
--      (files in the order read), kept in its metadata by r72: lossless-claw's backfill of the same file stores the
--      same messages in the same order, so `migrate` can tell the k-th copy of a repeated message from the others
--      (transforms/20_turn_index.sql). Counted only where a row without an entry id is (a store's rows all have
--      one), into a table first: one query joining every message into the sort ran out of its budget at 3M.
CREATE TEMP TABLE write_occurrence AS
SELECT w.message_id, o.occurrence FROM write_messages w JOIN (
    SELECT j.message_id, j.entry_id, row_number() OVER (PARTITION BY j.session_id, j.identity_hash
                                                        ORDER BY j.file_order, j.path_index) AS occurrence
    FROM jsonl_messages j
    JOIN (SELECT DISTINCT session_id, identity_hash FROM jsonl_messages WHERE entry_id IS NULL) k
      ON k.session_id = j.session_id AND k.identity_hash IS NOT DISTINCT FROM j.identity_hash) o
  ON o.message_id = w.message_id
WHERE o.entry_id IS NULL;

CREATE TABLE stage.plan_messages AS
SELECT w.message_id, w.session_id, w.new_rank, w.batch,
       row_number() OVER (ORDER BY w.batch, w.session_id, w.new_rank) AS write_order,
       m.created_iso, CAST(NULL AS VARCHAR) AS created_raw, CAST(NULL AS BIGINT) AS fixed_turn,
       m.role, m.token_count, o.occurrence
FROM write_messages w JOIN jsonl_messages m USING (message_id) LEFT JOIN write_occurrence o USING (message_id)
ORDER BY w.batch, w.session_id, w.new_rank;

-- every session the run planned, written or not (batch NULL): r95 records their transcripts, and 94 their marks
CREATE TABLE stage.plan_sessions AS
SELECT session_id, batch, CAST(gains_data AS INTEGER) AS gains_data, 1 AS needs_boundary FROM session_work
UNION ALL SELECT session_id, NULL, 0, 0 FROM selected WHERE session_id NOT IN (SELECT session_id FROM session_work);

-- no marks carried: 94 reads every planned session's again
CREATE TABLE stage.plan_target_marks AS
SELECT CAST(NULL AS VARCHAR) AS session_id, CAST(NULL AS BIGINT) AS messages, CAST(NULL AS BIGINT) AS max_message_id,
       CAST(NULL AS BIGINT) AS summaries, CAST(NULL AS BIGINT) AS boundary_events WHERE false;

CREATE TABLE stage.plan_present AS
SELECT CAST(NULL AS BIGINT) AS message_id, CAST(NULL AS BIGINT) AS tid_present, CAST(NULL AS BIGINT) AS turn_present
WHERE false;

CREATE TABLE stage.plan_off_path AS
SELECT tid, off FROM off_path WHERE off <> marked ORDER BY tid;
