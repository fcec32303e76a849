-- step: write_summaries
-- engine: sqlite (write, once per batch; a new target's on the planning thread's scratch file, fresh.py)
-- reads: plan.plan_summaries, plan.plan_edges, src_summaries, _map
-- produces: lcm_summary_nodes rows (their FTS rows: 86_index_summaries.sql), lcm_etl_summaries provenance,
--           lcm_etl_summary_edges (every summary_parents edge of an imported summary, kept or dropped)
-- key: summary id
-- why: msg_start/msg_end are the final turn_index of the first/last own-session message beneath the
--      summary (chosen in 40_summaries.sql). Rows go roots first (50_parent_collapse.sql's level), so a
--      parent_id always names a row that exists. What Remnic has no column for
--      (kind, earliest/latest, descendant counts, model, file_ids) is kept in provenance.
-- count: summaries_inserted
INSERT INTO lcm_summary_nodes (id, session_id, depth, parent_id, summary_text, token_count, msg_start, msg_end,
                               escalation, created_at)
SELECT p.summary_id, p.session_id, s.depth, p.parent_id, s.content, s.token_count, lo.turn, hi.turn, 0,
       coalesce(p.created_iso, :fired_at)
FROM plan.plan_summaries p
JOIN src_summaries s ON s.summary_id = p.summary_id
JOIN _map lo ON lo.src_message_id = p.lo_msg
JOIN _map hi ON hi.src_message_id = p.hi_msg
WHERE p.batch BETWEEN :lo AND :hi
ORDER BY p.lvl, p.summary_id;

INSERT OR REPLACE INTO lcm_etl_summaries (summary_id, session_id, source_conversation_id, kind, depth,
       earliest_at, latest_at, descendant_count, descendant_token_count, source_message_token_count, model,
       file_ids, source_created_at, parent_candidates)
SELECT p.summary_id, p.session_id, s.conversation_id, s.kind, s.depth, s.earliest_at, s.latest_at,
       s.descendant_count, s.descendant_token_count, s.source_message_token_count, s.model, s.file_ids,
       s.created_at, p.candidates
FROM plan.plan_summaries p JOIN src_summaries s ON s.summary_id = p.summary_id
WHERE p.batch BETWEEN :lo AND :hi;

INSERT OR REPLACE INTO lcm_etl_summary_edges (summary_id, covering_summary_id, ordinal, kept, reason)
SELECT source_id, cover_id, ordinal, kept, reason FROM plan.plan_edges WHERE batch BETWEEN :lo AND :hi;
