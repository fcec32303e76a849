-- step: target_marks_after
-- engine: sqlite (the target, in the run's last transaction, before 95 or r95)
-- reads: plan.plan_target_marks (the marks planning read: 04's; none for reconcile), plan.plan_sessions, lcm_messages, lcm_summary_nodes, lcm_compaction_events
-- produces: TEMP TABLE target_marks(session_id, messages, max_message_id, summaries, boundary_events) — per target
--           session, the figures of 04_target_marks.sql
-- key: session_id
-- why: 95 (r95: reconcile's, every session it planned, none carried) stores the target's marks as this run leaves it. Only the sessions this run writes to can have
--      other figures than planning read (plan_sessions holds every session that gains messages, summaries
--      or a boundary event): those are read again through their session indexes, the others are carried.
--      04 over every session scans the whole message index (0.06 s on 200k messages), most of what a sync
--      re-run that wrote one session spends here. A session another writer changes between planning and
--      this transaction keeps the mark planning read, so a later run that reads the target's marks again
--      re-plans it. tests/test_delta.py checks that the marks stored are the ones 04 reads afterwards.
DROP TABLE IF EXISTS temp.target_marks;

CREATE TEMP TABLE target_marks AS
SELECT session_id, messages, max_message_id, summaries, boundary_events FROM plan.plan_target_marks
WHERE session_id NOT IN (SELECT session_id FROM plan.plan_sessions)
UNION ALL
SELECT session_id, sum(n_messages), max(hi), sum(n_summaries), sum(n_boundaries)
FROM (SELECT session_id, count(*) AS n_messages, max(id) AS hi, 0 AS n_summaries, 0 AS n_boundaries
      FROM lcm_messages WHERE session_id IN (SELECT session_id FROM plan.plan_sessions) GROUP BY session_id
      UNION ALL SELECT session_id, 0, 0, count(*), 0 FROM lcm_summary_nodes
      WHERE session_id IN (SELECT session_id FROM plan.plan_sessions) GROUP BY session_id
      UNION ALL SELECT session_id, 0, 0, 0, count(*) FROM lcm_compaction_events
      WHERE session_id IN (SELECT session_id FROM plan.plan_sessions) GROUP BY session_id)
GROUP BY session_id;
