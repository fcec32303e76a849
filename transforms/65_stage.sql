-- step: stage
-- engine: duckdb (stage: plan tables → the stage file)
-- reads: write_messages, write_present, part_plan, session_work, write_summaries, sum_edges, sum_plan,
--        message_refresh, summary_refresh, parent_updates, conversation_same, source_marks, source_global,
--        target_marks
-- produces: the narrow plan tables in the stage file (a private SQLite file), read by the write steps:
--           stage.plan_messages, stage.plan_present, stage.plan_present_parts, stage.plan_sessions,
--           stage.plan_summaries, stage.plan_edges, stage.plan_message_refresh, stage.plan_summary_refresh,
--           stage.plan_parent_updates, stage.plan_skipped, stage.plan_conversations, stage.plan_source_marks,
--           stage.plan_source_global, stage.plan_target_marks
-- key: batch
-- why: the write steps run inside SQLite, next to the target, so content and payloads are copied by
--      SQLite straight from the source snapshot; only ids, turn ranks and batches cross from DuckDB.
CREATE TABLE stage.plan_messages AS
SELECT w.message_id, w.session_id, w.new_rank, w.batch,
       row_number() OVER (ORDER BY w.batch, w.session_id, w.new_rank) AS write_order, m.created_iso,
       CASE WHEN m.created_iso IS DISTINCT FROM m.created_raw THEN m.created_raw END AS created_raw, m.fixed_turn
FROM write_messages w JOIN msg_plan m USING (message_id) ORDER BY w.batch, w.session_id, w.new_rank;

CREATE TABLE stage.plan_present AS
SELECT message_id, tid_present, turn_present FROM write_present;

CREATE TABLE stage.plan_present_parts AS
SELECT p.message_id, p.ordinal, w.batch, m.created_iso
FROM part_plan p JOIN session_work w USING (session_id) JOIN msg_plan m USING (message_id)
WHERE NOT p.is_new;

CREATE TABLE stage.plan_sessions AS
SELECT session_id, batch, CAST(gains_data AS INTEGER) AS gains_data,
       CAST(needs_boundary AS INTEGER) AS needs_boundary FROM session_work;

CREATE TABLE stage.plan_summaries AS
SELECT summary_id, session_id, depth, parent_id, lo_msg, hi_msg, created_iso, batch, candidates, lvl
FROM write_summaries ORDER BY batch, lvl, summary_id;

-- the edges of every summary this run writes or re-parents: their provenance follows the parent chosen
CREATE TABLE stage.plan_edges AS
SELECT e.cover_id, e.source_id, e.ordinal, CAST(e.kept AS INTEGER) AS kept, e.reason, s.session_id, w.batch
FROM sum_edges e
JOIN (SELECT summary_id, session_id FROM write_summaries UNION ALL SELECT summary_id, session_id FROM parent_updates) s
  ON s.summary_id = e.source_id
JOIN session_work w ON w.session_id = s.session_id;

CREATE TABLE stage.plan_message_refresh AS
SELECT r.message_id, r.tid, r.changed, w.batch FROM message_refresh r JOIN session_work w USING (session_id);

CREATE TABLE stage.plan_summary_refresh AS
SELECT r.summary_id, w.batch FROM summary_refresh r JOIN session_work w USING (session_id);

CREATE TABLE stage.plan_parent_updates AS
SELECT u.summary_id, u.parent_id, u.candidates, w.batch FROM parent_updates u JOIN session_work w USING (session_id);

CREATE TABLE stage.plan_skipped AS
SELECT summary_id, session_id, kind, depth, reason, foreign_msgs
FROM sum_plan WHERE status = 'skipped';

CREATE TABLE stage.plan_conversations AS
SELECT s.conversation_id, s.session_id,
       CAST(s.conversation_id NOT IN (SELECT conversation_id FROM conversation_same) AS INTEGER) AS changed
FROM sessions s WHERE s.session_id IN (SELECT session_id FROM selected);

-- the source's marks (03_source_marks.sql), stored by 95 for the next run; a run over part of the sessions
-- (--session-filter) stores none
CREATE TABLE stage.plan_source_marks AS
SELECT * FROM source_marks WHERE $record_marks;

CREATE TABLE stage.plan_source_global AS
SELECT * FROM source_global WHERE $record_marks;

-- the target's marks as planning read them (04_target_marks.sql), carried by 94 for the sessions this run
-- does not write
CREATE TABLE stage.plan_target_marks AS
SELECT * FROM target_marks WHERE $record_marks;
