-- step: reconcile_off_path
-- engine: duckdb (plan)
-- reads: held_tgt, jsonl_abandoned, jsonl_messages, jsonl_plan, run_sessions
-- produces: off_path(tid, session_id, marked, off) — the target's rows off the active path now (`off`), and the
--           rows marked so that are back on it; `marked`: the row's mark before this run
-- key: target message id; a row by its transcript entry id within the session
-- why: reconcile imports the active path only, and the target is the archive: a row imported before a branch (or
--      a `leaf` control) left it is kept, never removed, but says so — metadata.off_path, set by
--      r90_mark_off_path.sql — so that a target reconciled after every write (--watch) and one reconciled once
--      from the same final state hold the same rows on the path, and every other row is marked
--      (docs/mapping.md, "Branches"). A row is judged only where this run sees its entry: off the path when the
--      transcripts read hold the entry on an abandoned branch and no path holds it (by its id, or as the
--      original a copy-on-write rewrite stands for: that row is the path's message); back on the path when a
--      path holds it again (a later branch back). A marked row whose entry this run does not see (a session read
--      from its record: only a plain append, which never brings one back; a transcript not named) keeps its mark.
--      Rows without an entry id (lcm.db's, an id-less transcript's) are never judged: nothing names their place.
--      Only the few rows the abandoned entries or a mark name are looked up on the path.
CREATE OR REPLACE TABLE off_path AS
WITH abandoned AS (
  SELECT DISTINCT session_id, entry_id FROM jsonl_abandoned
  WHERE entry_id IS NOT NULL AND session_id IN (SELECT session_id FROM run_sessions)
), candidates AS (
  SELECT t.tid, t.session_id, t.entry_id, t.off_path AS marked, a.entry_id IS NOT NULL AS abandoned
  FROM held_tgt t LEFT JOIN abandoned a ON a.session_id = t.session_id AND a.entry_id = t.entry_id
  WHERE t.entry_id IS NOT NULL AND t.session_id IN (SELECT session_id FROM run_sessions)
    AND (a.entry_id IS NOT NULL OR t.off_path)
)
-- NOT EXISTS, not a join: DuckDB pushes a join's filter into the scan of the transcripts' Arrow tables, which
-- PyArrow refuses (BLOOM_FILTER); the few candidates are looked up, the path is not held
SELECT c.tid, c.session_id, c.marked,
       (c.abandoned OR c.marked)
       AND NOT EXISTS (SELECT 1 FROM jsonl_messages p WHERE p.session_id = c.session_id AND p.entry_id = c.entry_id)
       AND NOT EXISTS (SELECT 1 FROM jsonl_plan j WHERE j.session_id = c.session_id AND j.rewrite_of = c.entry_id)
         AS off
FROM candidates c;
