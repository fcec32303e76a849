-- step: target_state
-- engine: duckdb (plan; the target attached read-only as `tgt` — an empty Remnic schema when there is none)
-- reads: tgt.lcm_messages, tgt.lcm_message_parts, tgt.lcm_summary_nodes, tgt.lcm_compaction_events, superseded_rows
-- produces: tgt_lc       one row per target message imported from lossless-claw, with the source facts its
--                        metadata carries (identity and the attributes lossless-claw may change in place)
--           tgt_ids      the same, one row per message identity (source message id, created_at), of the rows
--                        that hold their source message still (not superseded: 04_superseded_rows.sql)
--           tgt_superseded the rows whose source message holds other values now, one per identity: where the
--                        source's row is written beside them (15_kept_sessions.sql, 20_turn_index.sql)
--           tgt_legacy   rows written without a source message id (older writers), keyed as they were:
--                        (session, conversation_id, source_seq)
--           tgt_entries  rows `reconcile` brought in from transcripts, by entry id
--           tgt_max_turn, tgt_parts, tgt_summaries, tgt_boundaries
-- key: message identity = (metadata.source_message_id, created_at), holding the source row's role, content and
--      token_count (compared in SQLite, 04_superseded_rows.sql)
-- why: lossless-claw's message_id survives every change it makes to a row (rebinds, the rollover-split
--      repair's move and renumbering, entry-id adoption; docs/mapping.md, "When the source changes"),
--      while (conversation_id, seq) does not: seq is reused after a heartbeat prune and renumbered by the
--      repair. created_at is never changed in place, so it tells a message from another file's (or a
--      restored backup's) message that happens to carry the same id. Only identities and the small
--      attributes that can drift are read here: content never passes through the plan. A sync re-run
--      (lcm_etl/planning/delta.py) reads only the sessions it re-plans: `tgt` is then a copy of just their rows
--      (lcm_etl/read/lcmdb/subset.py), so no step filters on the scope (a filter joining scope_sessions made DuckDB
--      carry the whole metadata column and run out of its 96 MB on a 310k-message target).
CREATE OR REPLACE TABLE tgt_lc AS
SELECT id, session_id, turn_index, role, created_at,
       v[2] AS conversation_id, try_cast(v[3] AS BIGINT) AS source_seq, v[4] AS source_message_id,
       v[5] AS transcript_entry_id, v[6] AS identity_hash, v[7] AS sender_metadata, v[8] AS session_key,
       v[9] AS title
FROM (SELECT id, session_id, turn_index, role, created_at,
             json_extract_string(metadata, ['$.source', '$.conversation_id', '$.source_seq', '$.source_message_id',
                                            '$.transcript_entry_id', '$.identity_hash', '$.openclaw_sender_metadata',
                                            '$.session_key', '$.title']) AS v
      FROM tgt.lcm_messages
      WHERE metadata LIKE '%lossless-claw%' AND json_valid(metadata))
WHERE v[1] = 'lossless-claw';

CREATE OR REPLACE TABLE tgt_ids AS
WITH g AS (
  SELECT source_message_id, created_at, min(id) AS id, count(*) AS copies,
         CAST(min(id) AS VARCHAR) || CASE WHEN count(*) > 1 THEN ',' || CAST(max(id) AS VARCHAR) ELSE '' END AS ids
  FROM tgt_lc WHERE source_message_id IS NOT NULL AND CAST(id AS VARCHAR) NOT IN (SELECT id FROM superseded_rows)
  GROUP BY source_message_id, created_at
)
SELECT t.*, g.copies, g.ids FROM g JOIN tgt_lc t USING (id);

CREATE OR REPLACE TABLE tgt_superseded AS
SELECT t.source_message_id, t.created_at, min(t.id) AS id, arg_min(t.turn_index, t.id) AS turn_index,
       arg_min(t.session_id, t.id) AS session_id, arg_min(r.differs, t.id) AS differs
FROM tgt_lc t JOIN superseded_rows r ON r.id = CAST(t.id AS VARCHAR)
WHERE t.source_message_id IS NOT NULL
GROUP BY t.source_message_id, t.created_at;

CREATE OR REPLACE TABLE tgt_legacy AS
SELECT session_id, conversation_id, source_seq, min(id) AS id, arg_min(turn_index, id) AS turn_index,
       count(*) AS copies, CAST(min(id) AS VARCHAR) || CASE WHEN count(*) > 1
                                THEN ',' || CAST(max(id) AS VARCHAR) ELSE '' END AS ids
FROM tgt_lc WHERE source_message_id IS NULL
GROUP BY session_id, conversation_id, source_seq;

CREATE OR REPLACE TABLE tgt_entries AS
SELECT session_id, entry_id, min(id) AS id, arg_min(turn_index, id) AS turn_index
FROM (SELECT id, session_id, turn_index, json_extract_string(metadata, '$.transcript_entry_id') AS entry_id
      FROM tgt.lcm_messages
      WHERE metadata LIKE '%openclaw-jsonl%' AND json_valid(metadata)
        AND json_extract_string(metadata, '$.source') = 'openclaw-jsonl')
WHERE entry_id IS NOT NULL
GROUP BY session_id, entry_id;

CREATE OR REPLACE TABLE tgt_max_turn AS
SELECT session_id, max(turn_index) AS max_turn FROM tgt.lcm_messages GROUP BY session_id;

CREATE OR REPLACE TABLE tgt_parts AS
SELECT p.message_id, p.ordinal FROM tgt.lcm_message_parts p
WHERE p.message_id IN (SELECT id FROM tgt_lc UNION ALL SELECT id FROM tgt_entries);

-- summaries: text compared by hash (summaries are short; lossless-claw's doctor rewrites them in place)
CREATE OR REPLACE TABLE tgt_summaries AS
SELECT id, session_id, parent_id, md5(summary_text) AS text_md5, token_count FROM tgt.lcm_summary_nodes;

CREATE OR REPLACE TABLE tgt_boundaries AS
SELECT DISTINCT session_id FROM tgt.lcm_compaction_events WHERE tokens_before = tokens_after;

