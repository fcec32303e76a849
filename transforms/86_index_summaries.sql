-- step: index_summaries
-- engine: sqlite (write, once per batch, after 85_write_summaries.sql; a new target's once its summaries
--         were copied in, 82_copy_scratch.sql)
-- reads: plan.plan_summaries, lcm_summary_nodes
-- produces: lcm_summaries_fts rows for the new summaries
-- key: summary node rowid (= FTS rowid)
-- why: Remnic's FTS tables are external-content with no triggers: every writer inserts the FTS row
--      itself, in the same transaction as the base row. A step of its own because a new target writes
--      its summaries on a scratch file and must index them where they land.
INSERT INTO lcm_summaries_fts (rowid, summary_text)
SELECT n.rowid, n.summary_text
FROM plan.plan_summaries p JOIN lcm_summary_nodes n ON n.id = p.summary_id
WHERE p.batch BETWEEN :lo AND :hi;
