-- step: carried_marks
-- engine: duckdb (plan; a sync re-run whose changes were found page by page, after 03 ran over the scope)
-- reads: source_marks (03, over the scope's rows), recorded_source_marks, recorded_source_global, scope_convs (08)
-- produces: source_marks — every conversation's mark; source_global — the recorded one
-- key: conversation_id
-- why: the marks are stored for a later run that may lack the previous snapshot (lcm_etl/read/snapshot/snapcache.py)
--      and must compare them over the whole source. A conversation outside the scope owns no row on a
--      changed page, so its mark is the one recorded; the rows of no conversation are unchanged too (a
--      changed one sends the run to a full plan), and so is the schema (compared in lcm_etl/planning/delta.py).
INSERT INTO source_marks
SELECT * FROM recorded_source_marks WHERE conversation_id NOT IN (SELECT conv_key FROM scope_convs);

CREATE OR REPLACE TABLE source_global AS
SELECT * FROM recorded_source_global;
