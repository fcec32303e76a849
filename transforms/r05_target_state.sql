-- step: reconcile_target_state
-- engine: duckdb (plan; the target attached read-only as tgt — an empty Remnic schema when there is none)
-- reads: tgt.lcm_messages, tgt.lcm_compaction_events, jsonl_sessions, jsonl_messages, jsonl_appended, run_sessions
-- produces: held_tgt (what the target holds of the transcripts' sessions), tgt_max_turn, tgt_boundaries
-- key: session_id; a held row by its transcript entry id, else by identity hash
-- why: reconcile needs of the target only what the transcripts' sessions hold (to match by entry id or
--      identity: r20_match.sql), their last turn (new rows append after it) and their boundary events
--      (r60_batches.sql) — not migrate's target state (05, 07: lossless-claw identities, parts, summaries,
--      marks), which read the metadata column three more times. Each row's metadata is read once, and the
--      session filter applied to what that read keeps (a filter joining jsonl_sessions before it made DuckDB
--      carry the whole column). A session read from its recorded offsets (jsonl_appended) is matched by entry
--      id alone: of its rows only those whose entry id the new messages bring, and those without an entry id
--      (none now: transcript_decision.settle read such a session whole), are held. Only those sessions' messages feed that match:
--      every message's entry id in its hash table cost a first run of a 5,000,000-event store 70 MB at the peak.
--      The rows marked off the active path (metadata.off_path) of every session of which the run read a line
--      (run_sessions) are held too, new messages or none, for r25_off_path.sql to count (`tid`, `off_path`): they
--      are few, and the same read finds them. A sync that read a few sessions reads their rows only: the target
--      attached as tgt is then a copy of those sessions' rows with the target's indexes (reconcile_plan.target_rows),
--      so tgt_max_turn reads the session index, as it does of a whole target, not every row a second time.
CREATE OR REPLACE TABLE held_tgt AS
SELECT t.* FROM (
  SELECT session_id, v[1] AS source, v[2] AS conversation_id, try_cast(v[3] AS BIGINT) AS source_seq,
         v[4] AS entry_id, v[5] AS identity_hash, tid, coalesce(v[6] = 'true', false) AS off_path
  FROM (SELECT session_id, id AS tid,
               json_extract_string(metadata, ['$.source', '$.conversation_id', '$.source_seq',
                                              '$.transcript_entry_id', '$.identity_hash', '$.off_path']) AS v
        FROM tgt.lcm_messages WHERE json_valid(metadata))
) t
WHERE (t.session_id IN (SELECT session_id FROM jsonl_sessions)
       AND (t.session_id NOT IN (SELECT session_id FROM jsonl_appended) OR t.entry_id IS NULL
            OR t.entry_id IN (SELECT entry_id FROM jsonl_messages WHERE entry_id IS NOT NULL
                              AND session_id IN (SELECT session_id FROM jsonl_appended))))
   OR (t.off_path AND t.session_id IN (SELECT session_id FROM run_sessions));

CREATE OR REPLACE TABLE tgt_max_turn AS
SELECT session_id, max_turn FROM (SELECT session_id, max(turn_index) AS max_turn FROM tgt.lcm_messages GROUP BY 1)
WHERE session_id IN (SELECT session_id FROM jsonl_sessions);

CREATE OR REPLACE TABLE tgt_boundaries AS
SELECT DISTINCT session_id FROM tgt.lcm_compaction_events
WHERE tokens_before = tokens_after AND session_id IN (SELECT session_id FROM jsonl_sessions);
