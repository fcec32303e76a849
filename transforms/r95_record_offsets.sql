-- step: reconcile_record_offsets
-- engine: sqlite (the target, in the run's last transaction, with the ledger row)
-- reads: plan.transcripts (the run file: what was read of each transcript, lcm_etl/read/sessions/run_file.py),
--        plan.plan_sessions (r65_stage.sql: every session planned), target_marks (94)
-- produces: lcm_etl_transcript_files (one row per transcript of the sessions this run planned: a file, a store's
--           window or archive row), lcm_etl_session_marks (per planned session, under source_path '': 94's figures)
-- key: path (the record key, lcm_etl/file_identity.real_path: a file's real path, `<store's real path>#<id>`)
-- why: cost follows the change: a re-run reads each transcript from where this run stopped, once its record is proved
--      (a file's prefix hashes the same, a window's watermark is the same: the columns of transcripts.Mark; lcm_etl/read/sessions/transcript_decision.py). Written only when the run completes, in the same
--      transaction as its ledger row: a dry run, a failed or a killed run records nothing, and a record
--      names its run, so an undone run's record is not used.
-- count: transcript_files_recorded
INSERT OR REPLACE INTO lcm_etl_transcript_files (path, lines, messages, parts, tip, size, sha256, seq, watermark,
                                                 header_id, version, session_id, key_by, held_by, run_id)
SELECT record_key, lines, messages, parts, tip, size, sha256, seq, watermark, header_id, version, session_id, :key_by,
       :held_by, :run_id
FROM plan.transcripts
WHERE lines IS NOT NULL AND session_id IN (SELECT session_id FROM plan.plan_sessions)   -- a pending input has none
ORDER BY file_order;

-- A record says what the target held when it was made: its session's mark (94_target_marks_after.sql, the figures
--      migrate's marks hold, under source_path '': reconcile's). The next run checks the target still holds the
--      session's messages as marked (their count and highest id, one query: transcript_decision.settle) before it
--      reads only what is new. A row deleted (Remnic's cleanup, a hand fix, a partial restore) makes its session
--      read whole, and it lands again. A planned session the target holds no row of (a header-only transcript, or
--      one whose rows were deleted) has no figures in 94: its earlier mark goes, or it would be read whole every run.
DELETE FROM lcm_etl_session_marks WHERE source_path = '' AND session_id IN (SELECT session_id FROM plan.plan_sessions);
INSERT OR REPLACE INTO lcm_etl_session_marks SELECT '', :run_id, * FROM temp.target_marks;
