-- step: summaries
-- engine: duckdb (plan)
-- reads: src_summaries, src_summary_messages, src_summary_parents, sessions, src_msgs, msg_plan, tgt_summaries
-- produces: sum_closure(top, sid)         every summary with itself and every summary below it
--           sum_beneath(summary_id, message_id) every message linked to a summary or any summary below it
--           sum_range(summary_id, ...)    per summary: own-session messages beneath, first/last of them
--           sum_plan(summary_id, status, reason, ...) one row per source summary
-- key: summary_id
-- why: SPEC §3.5. Leaves link messages through summary_messages; condensed summaries only link other
--      summaries through summary_parents (summary_id = the condensed C, parent_summary_id = a source S).
--      A summary's range is min/max target turn over the messages beneath it (any depth) that belong to
--      its own session; other sessions' messages do not count and are reported. lo_msg/hi_msg name the
--      source messages at both ends, so the writer reads their final turn_index at write time.
CREATE OR REPLACE TABLE sum_closure AS
WITH RECURSIVE down(top, sid) AS (
  SELECT summary_id, summary_id FROM src_summaries
  UNION
  SELECT d.top, p.parent_summary_id
  FROM down d JOIN src_summary_parents p ON p.summary_id = d.sid
)
SELECT top, sid FROM down;

CREATE OR REPLACE TABLE sum_beneath AS
SELECT DISTINCT c.top AS summary_id, l.message_id
FROM sum_closure c JOIN src_summary_messages l ON l.summary_id = c.sid;

CREATE OR REPLACE TABLE sum_range AS
WITH beneath AS (
  SELECT summary_id, message_id FROM sum_beneath
), sole_session AS (
  SELECT b.summary_id, CASE WHEN min(m.session_id) = max(m.session_id) THEN min(m.session_id) END AS session_id
  FROM beneath b JOIN src_msgs m ON m.message_id = b.message_id
  GROUP BY b.summary_id
), node AS (
  -- the session of the summary's conversation; a source without summaries.conversation_id (the peer
  -- importer's test shape) gives the one session all the messages beneath it share
  SELECT s.summary_id, coalesce(c.session_id, o.session_id) AS session_id
  FROM src_summaries s
  LEFT JOIN sessions c USING (conversation_id)
  LEFT JOIN sole_session o ON o.summary_id = s.summary_id
)
SELECT n.summary_id, n.session_id,
       count(m.message_id) FILTER (WHERE m.session_id = n.session_id) AS own_msgs,
       count(m.message_id) FILTER (WHERE m.session_id <> n.session_id) AS foreign_msgs,
       count(b.message_id) FILTER (WHERE b.message_id IS NOT NULL AND m.message_id IS NULL) AS dangling_msgs,
       arg_min(p.message_id, p.plan_turn) AS lo_msg,
       arg_max(p.message_id, p.plan_turn) AS hi_msg,
       min(p.plan_turn) AS lo_turn,
       max(p.plan_turn) AS hi_turn
FROM node n
LEFT JOIN beneath b ON b.summary_id = n.summary_id
LEFT JOIN src_msgs m ON m.message_id = b.message_id
LEFT JOIN msg_plan p ON p.message_id = m.message_id AND p.session_id = n.session_id
GROUP BY n.summary_id, n.session_id;

CREATE OR REPLACE TABLE sum_plan AS
SELECT s.summary_id, r.session_id, s.depth, s.kind, r.lo_msg, r.hi_msg, r.lo_turn, r.hi_turn,
       r.own_msgs, r.foreign_msgs, r.dangling_msgs,
       coalesce(strftime(try_cast(s.created_at AS TIMESTAMPTZ)::TIMESTAMP, '%Y-%m-%dT%H:%M:%S.%gZ'), s.created_at,
                strftime(try_cast(s.latest_at AS TIMESTAMPTZ)::TIMESTAMP, '%Y-%m-%dT%H:%M:%S.%gZ'),
                strftime(try_cast(s.earliest_at AS TIMESTAMPTZ)::TIMESTAMP, '%Y-%m-%dT%H:%M:%S.%gZ'))
         AS created_iso,
       CASE
         WHEN r.session_id IS NULL THEN 'skipped'
         WHEN r.session_id NOT IN (SELECT session_id FROM selected) THEN 'filtered'
         WHEN r.own_msgs = 0 THEN 'skipped'
         WHEN s.summary_id IN (SELECT id FROM tgt_summaries) THEN 'present'
         ELSE 'new'
       END AS status,
       CASE
         WHEN r.session_id IS NULL THEN 'its conversation is not in the source'
         WHEN r.own_msgs > 0 THEN NULL
         WHEN r.foreign_msgs > 0 THEN 'every message beneath it belongs to another session'
         WHEN r.dangling_msgs > 0 THEN 'the messages it links are missing from the source'
         WHEN s.kind = 'condensed' THEN 'no leaf with linked messages beneath it'
         ELSE 'no linked messages (no summary_messages rows)'
       END AS reason
FROM src_summaries s
JOIN sum_range r USING (summary_id);
