-- step: sync_scope
-- engine: duckdb (plan; a re-run whose previous run stored marks — lcm_etl/planning/delta.py)
-- reads: source_marks (03), target_marks (04), recorded_source_marks, recorded_target_marks (the marks the
--        previous run stored, lcm_etl/store/marks.py),
--        page_changed_convs (the owners of changed pages, lcm_etl/read/snapshot/snapcache.py), sessions (10),
--        tgt_conversations (06)
-- produces: changed_convs(conv_key), changed_sessions(session_id), scope_sessions(session_id),
--           scope_convs(conv_key) — what this run re-plans; conv_sessions(conv_key, session_id) — the links the
--           scope is closed over
-- key: conversation_id / session_id
-- why: a conversation whose mark differs changed in the source, and so did one owning a row on a page
--      that differs from the previous run's snapshot (then 03 has not run: source_marks is empty until
--      09_carried_marks.sql); a session whose mark differs changed in
--      the target. Planning a session needs every conversation whose rows are or will be in it (its rule's
--      session and the one it was first imported into), and planning a conversation needs every such
--      session: the scope is closed over both links. Everything outside it is proved unchanged since the
--      previous run and is not read again. A mark differs when any of its figures does: the rows of one
--      side that the other lacks (EXCEPT compares whole rows, the recorded ones with the same columns).
CREATE OR REPLACE TABLE conv_sessions AS
SELECT CAST(conversation_id AS VARCHAR) AS conv_key, session_id FROM sessions
UNION
SELECT conv_key, session_id FROM tgt_conversations WHERE source_path = $source_path;

CREATE OR REPLACE TABLE changed_convs AS
SELECT conversation_id AS conv_key FROM (SELECT * FROM source_marks EXCEPT SELECT * FROM recorded_source_marks)
UNION
SELECT conv_key FROM page_changed_convs;

CREATE OR REPLACE TABLE changed_sessions AS
SELECT session_id FROM (SELECT * FROM target_marks EXCEPT SELECT * FROM recorded_target_marks)
UNION
SELECT session_id FROM (SELECT * FROM recorded_target_marks EXCEPT SELECT * FROM target_marks);

CREATE OR REPLACE TABLE scope_sessions AS
WITH RECURSIVE reach(session_id) AS (
  SELECT session_id FROM (SELECT session_id FROM conv_sessions WHERE conv_key IN (SELECT conv_key FROM changed_convs)
                          UNION SELECT session_id FROM changed_sessions)
  UNION
  SELECT b.session_id FROM reach r
  JOIN conv_sessions a ON a.session_id = r.session_id JOIN conv_sessions b ON b.conv_key = a.conv_key
)
SELECT DISTINCT session_id FROM reach;

CREATE OR REPLACE TABLE scope_convs AS
SELECT conv_key FROM conv_sessions WHERE session_id IN (SELECT session_id FROM scope_sessions)
UNION
SELECT conv_key FROM changed_convs;
