-- step: audit (lossless-claw source against the target)
-- engine: duckdb (audit; runs after the plan steps 10-60, on read-only copies of source and target)
-- reads: msg_plan, src_msgs, src_messages, tgt_ids, tgt_legacy, tgt_lc, tgt_detail, message_refresh, part_plan,
--        src_parts, tgt_part_keys, sum_plan, sum_parent, tgt_summary_detail, tgt_provenance_summaries,
--        tgt_skipped, session_work, tgt_boundaries, selected, src_message_hashes, src_summary_hashes (hashes
--        computed in SQLite by lcm_etl/audit.py, so no content passes through DuckDB)
-- produces: audit_findings(kind, problem, session_id, source_id, detail) — one row per offending fact
--           audit_archive(kind, n) — imported rows the source no longer holds (kept: the target is the archive)
-- key: (kind, source_id)
-- why: CI needs proof that the target holds every source fact or accounts for it (SPEC §1 audit, §5).
--      The comparison is against the sources, never against the ledger; content is compared by hash.
--      Every query below returns offending rows only: an empty table means exit 0.
CREATE OR REPLACE TABLE audit_findings (kind VARCHAR, problem VARCHAR, session_id VARCHAR, source_id VARCHAR,
                                             detail VARCHAR);

-- messages the target lacks (what migrate would insert)
INSERT INTO audit_findings
SELECT 'message', 'missing in target', session_id, conv_key || ':' || seq, 'source message_id ' || message_id
FROM msg_plan WHERE is_new;

-- messages present under their source identity whose values differ
INSERT INTO audit_findings
SELECT 'message', 'differs: ' || concat_ws(', ',
         CASE WHEN d.role IS DISTINCT FROM s.role THEN 'role' END,
         CASE WHEN d.content_hash IS DISTINCT FROM h.content_hash THEN 'content' END,
         CASE WHEN d.token_count IS DISTINCT FROM s.token_count THEN 'token_count' END,
         CASE WHEN d.ts IS DISTINCT FROM m.ts THEN 'created_at' END),
       m.session_id, m.conv_key || ':' || m.seq, 'target id ' || m.tid_present
FROM msg_plan m
JOIN src_messages s ON s.message_id = m.message_id
JOIN tgt_detail d ON d.id = m.tid_present
LEFT JOIN src_message_hashes h ON h.message_key = CAST(m.message_id AS VARCHAR)
WHERE NOT m.is_new
  AND (d.role IS DISTINCT FROM s.role OR d.content_hash IS DISTINCT FROM h.content_hash
       OR d.token_count IS DISTINCT FROM s.token_count OR d.ts IS DISTINCT FROM m.ts);

-- target rows claiming one source message twice (its identity, or the key of rows without a message id)
INSERT INTO audit_findings
SELECT 'message', 'duplicated in target (' || copies || ' rows)', session_id, conversation_id || ':' || source_seq,
       'target ids ' || ids
FROM (SELECT session_id, conversation_id, source_seq, copies, ids FROM tgt_ids
      UNION ALL SELECT session_id, conversation_id, source_seq, copies, ids FROM tgt_legacy)
WHERE copies > 1 AND session_id IN (SELECT session_id FROM selected);

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
-- the archive and keeps them (SPEC §8), so they are counted, not findings. A summary's session and a parent
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
