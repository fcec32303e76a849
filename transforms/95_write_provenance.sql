-- step: write_provenance
-- engine: sqlite (write, once, in the run's last transaction)
-- reads: src_conversations, src_large_files, plan.plan_conversations, plan.plan_skipped, plan.plan_source_marks,
--        plan.plan_source_global, target_marks (94)
-- produces: lcm_etl_conversations, lcm_etl_large_files, lcm_etl_skipped, lcm_etl_conversation_marks,
--           lcm_etl_source_marks, lcm_etl_session_marks
-- key: (source_path, conversation_id) / (source_path, file_id) / (source_path, kind, source_id) /
--      (source_path, kind, key)
-- why: Remnic has no conversations and no large-file registry; keeping them (and every summary the
--      run could not import, with the reason) lets `audit` account for every source fact.
--      Conversations and large files are replaced with what the source says now: lossless-claw archives
--      conversations, rebinds their session id and moves large files in place; session_id stays
--      the Remnic session the conversation's rows are in (15_kept_sessions.sql).
-- count: conversations_refreshed
INSERT OR REPLACE INTO lcm_etl_conversations (source_path, conversation_id, session_id, source_session_id,
       session_key, title, active, archived_at, archive_cause, bootstrapped_at, created_at, updated_at)
SELECT :source_path, c.conversation_id, p.session_id, c.session_id, c.session_key, c.title, c.active,
       c.archived_at, c.archive_cause, c.bootstrapped_at, c.created_at, c.updated_at
FROM src_conversations c JOIN plan.plan_conversations p ON p.conversation_id = c.conversation_id
WHERE p.changed;

INSERT OR REPLACE INTO lcm_etl_large_files (source_path, file_id, conversation_id, file_name, mime_type, byte_size,
       line_count, storage_uri, exploration_summary, created_at)
SELECT :source_path, f.file_id, f.conversation_id, f.file_name, f.mime_type, f.byte_size, f.line_count,
       f.storage_uri, f.exploration_summary, f.created_at
FROM src_large_files f JOIN plan.plan_conversations p ON p.conversation_id = f.conversation_id;

INSERT OR REPLACE INTO lcm_etl_skipped (source_path, kind, source_id, session_id, reason, detail)
SELECT :source_path, 'summary', summary_id, session_id, reason,
       json_object('kind', kind, 'depth', depth, 'foreign_messages', foreign_msgs)
FROM plan.plan_skipped;

-- marks (02, 03, 04_target_marks.sql): the next run re-plans only what differs from them. The session figures
-- are the target's after this run (94 has just run on this connection); written only by a run that planned the
-- whole source (plan.plan_source_global is empty under --session-filter). Each table's columns are source_path,
-- run_id, then the step's columns in order (lcm_etl/store/marks.py declares both).
DELETE FROM lcm_etl_conversation_marks
WHERE source_path = :source_path AND EXISTS (SELECT 1 FROM plan.plan_source_global);

DELETE FROM lcm_etl_source_marks WHERE source_path = :source_path AND EXISTS (SELECT 1 FROM plan.plan_source_global);

DELETE FROM lcm_etl_session_marks WHERE source_path = :source_path AND EXISTS (SELECT 1 FROM plan.plan_source_global);

INSERT INTO lcm_etl_conversation_marks SELECT :source_path, :run_id, * FROM plan.plan_source_marks;

INSERT INTO lcm_etl_source_marks SELECT :source_path, :run_id, * FROM plan.plan_source_global;

INSERT INTO lcm_etl_session_marks SELECT :source_path, :run_id, * FROM temp.target_marks
WHERE EXISTS (SELECT 1 FROM plan.plan_source_global);
