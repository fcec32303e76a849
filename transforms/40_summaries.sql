-- step: summaries
-- engine: duckdb (plan)
-- reads: src_summaries, src_summary_messages, src_summary_parents, sessions, src_msgs, msg_plan, tgt_summaries
-- produces: sum_closure(top, sid)         every summary with itself and every summary below it
--           sum_beneath(summary_id, message_id) every message linked to a summary or any summary below it
--           session_no, sum_msg                  the same with each message's session number and planned turn
--           sum_range(summary_id, ...)    per summary: own-session messages beneath, first/last of them
--           sum_plan(summary_id, status, reason, ...) one row per source summary
--           sum_node(summary_id, sess_no), sum_counted(summary_id, ...) on the way: each summary's session, and
--                                        its messages beneath counted by session (own, foreign, dangling)
-- key: summary_id
-- why: every summary, leaf or condensed, in its conversation's session. Leaves link messages through summary_messages; condensed summaries only link other
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

-- every (summary, message beneath it), with the message's session as a small number and its planned
-- turn: the big joins below then carry integers, not session-id strings, and stay within the budget
CREATE OR REPLACE TABLE session_no AS
SELECT session_id, row_number() OVER (ORDER BY session_id) AS sess_no
FROM (SELECT DISTINCT session_id FROM sessions);

CREATE OR REPLACE TABLE sum_msg AS
SELECT b.summary_id, b.message_id, m.message_id IS NOT NULL AS in_source, n.sess_no, p.plan_turn
FROM sum_beneath b
LEFT JOIN src_msgs m ON m.message_id = b.message_id
LEFT JOIN session_no n ON n.session_id = m.session_id
LEFT JOIN msg_plan p ON p.message_id = b.message_id;

-- the session of the summary's conversation; a source without summaries.conversation_id (the peer
-- importer's test shape) gives the one session all the messages beneath it share
CREATE OR REPLACE TABLE sum_node AS
WITH spread AS (
  SELECT summary_id, min(sess_no) AS lo_sess, max(sess_no) AS hi_sess FROM sum_msg GROUP BY summary_id
)
SELECT s.summary_id, coalesce(cn.sess_no, CASE WHEN sp.lo_sess = sp.hi_sess THEN sp.lo_sess END) AS sess_no
FROM src_summaries s
LEFT JOIN sessions c USING (conversation_id)
LEFT JOIN session_no cn ON cn.session_id = c.session_id
LEFT JOIN spread sp ON sp.summary_id = s.summary_id;

CREATE OR REPLACE TABLE sum_counted AS
SELECT m.summary_id,
       count(*) FILTER (WHERE m.sess_no = n.sess_no) AS own_msgs,
       count(*) FILTER (WHERE m.in_source AND (m.sess_no <> n.sess_no OR n.sess_no IS NULL)) AS foreign_msgs,
       count(*) FILTER (WHERE NOT m.in_source) AS dangling_msgs,
       arg_min(m.message_id, m.plan_turn) FILTER (WHERE m.sess_no = n.sess_no) AS lo_msg,
       arg_max(m.message_id, m.plan_turn) FILTER (WHERE m.sess_no = n.sess_no) AS hi_msg,
       min(m.plan_turn) FILTER (WHERE m.sess_no = n.sess_no) AS lo_turn,
       max(m.plan_turn) FILTER (WHERE m.sess_no = n.sess_no) AS hi_turn
FROM sum_msg m JOIN sum_node n USING (summary_id)
GROUP BY m.summary_id;

CREATE OR REPLACE TABLE sum_range AS
SELECT n.summary_id, sn.session_id, coalesce(c.own_msgs, 0) AS own_msgs, coalesce(c.foreign_msgs, 0) AS foreign_msgs,
       coalesce(c.dangling_msgs, 0) AS dangling_msgs, c.lo_msg, c.hi_msg, c.lo_turn, c.hi_turn
FROM sum_node n
LEFT JOIN session_no sn ON sn.sess_no = n.sess_no
LEFT JOIN sum_counted c ON c.summary_id = n.summary_id;

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
