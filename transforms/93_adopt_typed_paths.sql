-- step: adopt_typed_paths
-- engine: sqlite (write, once, in the run's last transaction, before 95 writes this run's provenance)
-- reads: lcm_etl_conversations, lcm_etl_large_files, lcm_etl_skipped, lcm_etl_conversation_marks,
--        lcm_etl_source_marks, lcm_etl_session_marks, lcm_etl_runs
-- produces: lcm_etl_conversations, lcm_etl_large_files, lcm_etl_skipped, lcm_etl_runs (and removes the typed
--           paths' marks); adopted — temp: each spelling's rank, the key first
-- key: source_path
-- why: one source, one key (lcm_etl/sync/identity.py). An older lcm-etl stored the source's path as typed, so
--      `--src s.db` and `--src /abs/s.db` kept two sets of rows for one file. :typed_paths lists those spellings
--      of this source, the most recent first; their rows move to :source_path, the most recent spelling's row
--      kept where two hold the same key (planning read them that way: 06_target_provenance.sql). Empty for a
--      target that never held a typed path: then nothing here matches.
CREATE TEMP TABLE IF NOT EXISTS adopted (path TEXT PRIMARY KEY, rank INTEGER NOT NULL);
DELETE FROM temp.adopted;
INSERT INTO temp.adopted SELECT :source_path, -1 UNION ALL SELECT value, key FROM json_each(:typed_paths);

-- per table: a typed path's row goes where a better-ranked spelling holds its key; the others move to the key.
-- Each DELETE starts from the typed paths' rows (none, for a target that never held one) and looks the
-- better-ranked spelling's row up by its primary key (CROSS JOIN keeps that order: SQLite does not reorder it).
-- Led by the table instead, it scanned the table for every row of it (7,000 conversations: 1.4 s of a 3.5 s
-- re-run).
DELETE FROM lcm_etl_conversations AS c WHERE c.source_path IN (SELECT value FROM json_each(:typed_paths))
  AND EXISTS (SELECT 1 FROM temp.adopted a CROSS JOIN temp.adopted b CROSS JOIN lcm_etl_conversations d
    ON d.source_path = b.path AND d.conversation_id = c.conversation_id
    WHERE a.path = c.source_path AND b.rank < a.rank);
UPDATE lcm_etl_conversations SET source_path = :source_path WHERE source_path IN (SELECT value FROM json_each(:typed_paths));
DELETE FROM lcm_etl_large_files AS c WHERE c.source_path IN (SELECT value FROM json_each(:typed_paths))
  AND EXISTS (SELECT 1 FROM temp.adopted a CROSS JOIN temp.adopted b CROSS JOIN lcm_etl_large_files d
    ON d.source_path = b.path AND d.file_id = c.file_id
    WHERE a.path = c.source_path AND b.rank < a.rank);
UPDATE lcm_etl_large_files SET source_path = :source_path WHERE source_path IN (SELECT value FROM json_each(:typed_paths));
DELETE FROM lcm_etl_skipped AS c WHERE c.source_path IN (SELECT value FROM json_each(:typed_paths))
  AND EXISTS (SELECT 1 FROM temp.adopted a CROSS JOIN temp.adopted b CROSS JOIN lcm_etl_skipped d
    ON d.source_path = b.path AND d.kind = c.kind AND d.source_id = c.source_id
    WHERE a.path = c.source_path AND b.rank < a.rank);
UPDATE lcm_etl_skipped SET source_path = :source_path WHERE source_path IN (SELECT value FROM json_each(:typed_paths));

-- marks: 95 stores this run's under the key when it planned the whole source; the typed spellings' are older
DELETE FROM lcm_etl_conversation_marks WHERE source_path IN (SELECT value FROM json_each(:typed_paths));
DELETE FROM lcm_etl_source_marks WHERE source_path IN (SELECT value FROM json_each(:typed_paths));
DELETE FROM lcm_etl_session_marks WHERE source_path IN (SELECT value FROM json_each(:typed_paths));
UPDATE lcm_etl_runs SET source_path = :source_path WHERE source_path IN (SELECT value FROM json_each(:typed_paths));
