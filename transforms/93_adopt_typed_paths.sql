-- step: adopt_typed_paths
-- engine: sqlite (write, once, in the run's last transaction, before 95 writes this run's provenance)
-- reads: lcm_etl_conversations, lcm_etl_large_files, lcm_etl_skipped, lcm_etl_marks, lcm_etl_runs
-- produces: lcm_etl_conversations, lcm_etl_large_files, lcm_etl_skipped, lcm_etl_runs (and removes the typed
--           paths' marks)
-- key: source_path
-- why: one source, one key (lcm_etl/sync/identity.py). An older lcm-etl stored the source's path as typed, so
--      `--src s.db` and `--src /abs/s.db` kept two sets of rows for one file. :typed_paths lists those spellings
--      of this source, the most recent first; their rows move to :source_path, the most recent spelling's row
--      kept where two hold the same key (planning read them that way: 06_target_provenance.sql). Empty for a
--      target that never held a typed path: then nothing here matches.
DELETE FROM lcm_etl_conversations AS c
WHERE c.source_path IN (SELECT value FROM json_each(:typed_paths)) AND EXISTS (
  SELECT 1 FROM lcm_etl_conversations d
  WHERE d.conversation_id = c.conversation_id AND d.source_path <> c.source_path
    AND (d.source_path = :source_path OR (SELECT key FROM json_each(:typed_paths) WHERE value = d.source_path)
                                          < (SELECT key FROM json_each(:typed_paths) WHERE value = c.source_path)));
UPDATE lcm_etl_conversations SET source_path = :source_path
WHERE source_path IN (SELECT value FROM json_each(:typed_paths));

DELETE FROM lcm_etl_large_files AS c
WHERE c.source_path IN (SELECT value FROM json_each(:typed_paths)) AND EXISTS (
  SELECT 1 FROM lcm_etl_large_files d
  WHERE d.file_id = c.file_id AND d.source_path <> c.source_path
    AND (d.source_path = :source_path OR (SELECT key FROM json_each(:typed_paths) WHERE value = d.source_path)
                                          < (SELECT key FROM json_each(:typed_paths) WHERE value = c.source_path)));
UPDATE lcm_etl_large_files SET source_path = :source_path
WHERE source_path IN (SELECT value FROM json_each(:typed_paths));

DELETE FROM lcm_etl_skipped AS c
WHERE c.source_path IN (SELECT value FROM json_each(:typed_paths)) AND EXISTS (
  SELECT 1 FROM lcm_etl_skipped d
  WHERE d.kind = c.kind AND d.source_id = c.source_id AND d.source_path <> c.source_path
    AND (d.source_path = :source_path OR (SELECT key FROM json_each(:typed_paths) WHERE value = d.source_path)
                                          < (SELECT key FROM json_each(:typed_paths) WHERE value = c.source_path)));
UPDATE lcm_etl_skipped SET source_path = :source_path
WHERE source_path IN (SELECT value FROM json_each(:typed_paths));

-- marks: 95 stores this run's under the key when it planned the whole source; the typed spellings' are older
DELETE FROM lcm_etl_marks WHERE source_path IN (SELECT value FROM json_each(:typed_paths));

UPDATE lcm_etl_runs SET source_path = :source_path
WHERE source_path IN (SELECT value FROM json_each(:typed_paths));
