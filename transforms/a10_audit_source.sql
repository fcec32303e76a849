-- step: audit (lossless-claw source against the target)
-- engine: duckdb (audit; runs after the plan steps 10-60, on read-only copies of source and target)
-- reads: msg_plan, src_messages, tgt_ids, tgt_legacy, tgt_lc, tgt_transcript_rows, tgt_detail,
--        message_refresh, part_plan,
--        src_parts, tgt_part_keys, sum_plan, sum_parent, tgt_summary_detail, tgt_provenance_summaries,
--        tgt_skipped, session_work, tgt_boundaries, selected, src_message_hashes, src_summary_hashes (hashes
--        computed in SQLite by lcm_etl/commands/audit.py, so no content passes through DuckDB)
-- produces: audit_findings(kind, problem, session_id, source_id, detail) — one row per offending fact
--           audit_archive(kind, n) — imported rows the source no longer holds (kept: the target is the archive)
-- key: (kind, source_id)
-- why: CI needs proof that the target holds every source fact or accounts for it (docs/cli.md, audit).
--      The comparison is against the sources, never against the ledger; content is compared by hash.
--      Every query below returns offending rows only: an empty table means exit 0. Times are compared in
--      lossless-claw's unit (whole seconds) where the target row came from a transcript (milliseconds).
CREATE OR REPLACE TABLE audit_findings (kind VARCHAR, problem VARCHAR, session_id VARCHAR, source_id VARCHAR,
                                             detail VARCHAR);

-- messages the target lacks (what migrate would insert); one whose identity an imported row holds with other
-- values (04_superseded_rows.sql: edited in the source or in the target, an id a restored backup issued again)
-- is named with what differs: migrate writes the source's row beside that row, which it keeps
INSERT INTO audit_findings
SELECT 'message', CASE WHEN sup_tid IS NULL THEN 'missing in target' ELSE 'differs: ' || sup_differs END,
       session_id, conv_key || ':' || seq,
       CASE WHEN sup_tid IS NULL THEN 'source message_id ' || message_id
            ELSE 'target id ' || sup_tid || '; a migrate writes the source''s row beside it' END
FROM msg_plan WHERE is_new;

-- messages present under their source identity whose values differ (a row a transcript gave carries the
-- transcript's millisecond time, lossless-claw's row the same time in whole seconds: compared in seconds)
INSERT INTO audit_findings
WITH present AS (
  SELECT m.message_id, m.session_id, m.conv_key, m.seq, m.tid_present,
         CASE WHEN tr.id IS NULL THEN m.ts ELSE date_trunc('second', m.ts) END AS src_ts,
         CASE WHEN tr.id IS NULL THEN d.ts ELSE date_trunc('second', d.ts) END AS tgt_ts,
         d.role, d.content_hash, d.token_count
  FROM msg_plan m
  JOIN tgt_detail d ON d.id = m.tid_present
  LEFT JOIN tgt_transcript_rows tr ON tr.id = m.tid_present
  WHERE NOT m.is_new
)
SELECT 'message', 'differs: ' || concat_ws(', ',
         CASE WHEN p.role IS DISTINCT FROM s.role THEN 'role' END,
         CASE WHEN p.content_hash IS DISTINCT FROM h.content_hash THEN 'content' END,
         CASE WHEN p.token_count IS DISTINCT FROM s.token_count THEN 'token_count' END,
         CASE WHEN p.tgt_ts IS DISTINCT FROM p.src_ts THEN 'created_at' END),
       p.session_id, p.conv_key || ':' || p.seq, 'target id ' || p.tid_present
FROM present p
JOIN src_messages s ON s.message_id = p.message_id
LEFT JOIN src_message_hashes h ON h.message_key = CAST(p.message_id AS VARCHAR)
WHERE p.role IS DISTINCT FROM s.role OR p.content_hash IS DISTINCT FROM h.content_hash
   OR p.token_count IS DISTINCT FROM s.token_count OR p.tgt_ts IS DISTINCT FROM p.src_ts;

-- target rows claiming one source message twice (its identity, or the key of rows without a message id)
INSERT INTO audit_findings
SELECT 'message', 'duplicated in target (' || copies || ' rows)', session_id, conversation_id || ':' || source_seq,
       'target ids ' || ids
FROM (SELECT session_id, conversation_id, source_seq, copies, ids FROM tgt_ids
      UNION ALL SELECT session_id, conversation_id, source_seq, copies, ids FROM tgt_legacy)
WHERE copies > 1 AND session_id IN (SELECT session_id FROM selected);

-- a source message held both by its lossless-claw row and by a row a transcript gave (an earlier lcm-etl's
-- reconcile, then a migrate that did not see the transcript row), or by two transcript rows. A transcript row
-- holds a message by its entry id or, without one (v1 files), by the key 20_turn_index.sql matches on:
-- identity, its occurrence in the session, and the second.
INSERT INTO audit_findings
WITH src AS (
  SELECT m.message_id, m.session_id, m.conv_key, m.seq, m.tid_present, date_trunc('second', m.ts) AS sec,
         trim(m.transcript_entry_id) AS entry_id, s.identity_hash,
         row_number() OVER (PARTITION BY m.session_id, s.identity_hash ORDER BY m.src_order) AS occurrence
  FROM msg_plan m JOIN src_messages s USING (message_id)
  -- only a session holding transcript rows can hold a message twice this way; numbering the others' messages
  -- would cost the memory of the whole source (a 200k-message audit ran out of its budget)
  WHERE m.session_id IN (SELECT session_id FROM tgt_transcript_rows)
), holders AS (
  SELECT message_id, tid_present AS id FROM src WHERE tid_present IS NOT NULL
  UNION
  SELECT s.message_id, t.id FROM src s JOIN tgt_transcript_rows t ON t.session_id = s.session_id AND t.entry_id = s.entry_id
  UNION
  SELECT s.message_id, t.id FROM src s
  JOIN tgt_transcript_rows t ON t.entry_id IS NULL AND t.session_id = s.session_id
                            AND t.identity_hash = s.identity_hash AND t.occurrence = s.occurrence
                            AND date_trunc('second', t.ts) = s.sec
)
SELECT 'message', 'duplicated in target (' || count(*) || ' rows)', s.session_id, s.conv_key || ':' || s.seq,
       'target ids ' || string_agg(CAST(h.id AS VARCHAR), ',' ORDER BY h.id)
FROM holders h JOIN src s USING (message_id)
WHERE s.session_id IN (SELECT session_id FROM selected)
GROUP BY s.message_id, s.session_id, s.conv_key, s.seq
HAVING count(*) > 1 AND count(*) FILTER (WHERE h.id IN (SELECT id FROM tgt_transcript_rows)) > 0;

-- imported messages whose source row changed in place since (what a migrate would update)
INSERT INTO audit_findings
SELECT 'message', 'changed in the source: ' || r.changed, r.session_id, m.conv_key || ':' || m.seq,
       'target id ' || r.tid
FROM message_refresh r JOIN msg_plan m USING (message_id);

-- parts
INSERT INTO audit_findings
SELECT 'part', 'missing in target', p.session_id, m.conv_key || ':' || m.seq || '#' || p.ordinal, NULL
FROM part_plan p JOIN msg_plan m USING (message_id) WHERE NOT p.is_new;

INSERT INTO audit_findings
SELECT 'part', 'in target but not in source', m.session_id, m.conv_key || ':' || m.seq || '#' || k.ordinal,
       'target message id ' || k.message_id
FROM tgt_part_keys k JOIN msg_plan m ON m.tid_present = k.message_id
WHERE NOT EXISTS (SELECT 1 FROM src_parts p WHERE p.message_id = m.message_id AND p.ordinal = k.ordinal);

-- summaries
INSERT INTO audit_findings
SELECT 'summary', 'missing in target', session_id, summary_id, kind || ' depth ' || depth
FROM sum_plan WHERE status = 'new';

INSERT INTO audit_findings
SELECT 'summary', 'differs: ' || concat_ws(', ',
         CASE WHEN d.text_hash IS DISTINCT FROM h.text_hash THEN 'summary_text' END,
         CASE WHEN d.token_count IS DISTINCT FROM s.token_count THEN 'token_count' END,
         CASE WHEN d.depth IS DISTINCT FROM s.depth THEN 'depth' END,
         CASE WHEN d.msg_start IS DISTINCT FROM p.lo_turn OR d.msg_end IS DISTINCT FROM p.hi_turn THEN 'range' END,
         CASE WHEN sp.parent_id IS NOT NULL AND d.parent_id IS DISTINCT FROM sp.parent_id THEN 'parent_id' END),
       p.session_id, p.summary_id, NULL
FROM sum_plan p
JOIN src_summaries s USING (summary_id)
JOIN tgt_summary_detail d ON d.id = p.summary_id
LEFT JOIN sum_parent sp ON sp.source_id = p.summary_id
LEFT JOIN src_summary_hashes h ON h.summary_key = CAST(p.summary_id AS VARCHAR)
WHERE p.status = 'present'
  AND (d.text_hash IS DISTINCT FROM h.text_hash OR d.token_count IS DISTINCT FROM s.token_count
       OR d.depth IS DISTINCT FROM s.depth
       OR d.msg_start IS DISTINCT FROM p.lo_turn OR d.msg_end IS DISTINCT FROM p.hi_turn
       OR (sp.parent_id IS NOT NULL AND d.parent_id IS DISTINCT FROM sp.parent_id));

INSERT INTO audit_findings
SELECT 'summary', 'skipped and not accounted for in provenance', session_id, summary_id, reason
FROM sum_plan
WHERE status = 'skipped' AND (session_id IS NULL OR session_id IN (SELECT session_id FROM selected))
  AND summary_id NOT IN (SELECT source_id FROM tgt_skipped);

-- rows the source deleted since they were imported (heartbeat prunes, doctor clean, dissolve): the target is
-- the archive and keeps them (docs/mapping.md, "When the source changes"), so they are counted, not findings. A summary's session and a parent
-- that no longer covers it are kept the same way.
CREATE OR REPLACE TABLE audit_archive AS
SELECT 'messages' AS kind, count(*) AS n FROM tgt_lc t
WHERE t.session_id IN (SELECT session_id FROM selected)
  AND t.id NOT IN (SELECT tid_present FROM msg_plan WHERE tid_present IS NOT NULL)
UNION ALL
SELECT 'summaries', count(*) FROM tgt_provenance_summaries v
WHERE v.session_id IN (SELECT session_id FROM selected)
  AND v.summary_id NOT IN (SELECT summary_id FROM src_summaries);

-- sessions whose imported rows have no import-boundary event
INSERT INTO audit_findings
SELECT 'boundary', 'missing in target', w.session_id, w.session_id, NULL
FROM session_work w WHERE w.session_id NOT IN (SELECT session_id FROM tgt_boundaries);
