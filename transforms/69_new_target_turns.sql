-- step: new_target_turns
-- engine: sqlite (write, once, on the planning thread's scratch file; a new target built from integer
--         source ids, in place of 70_assign_turns.sql — lcm_etl/load/fresh.py)
-- reads: plan.plan_messages
-- produces: TEMP VIEWs _new and _map, with the columns 70_assign_turns.sql gives those tables
-- key: source message id = target message id
-- why: nothing else writes to a target that is being built: each session's base turn is 0 and its first
--      planned rank is 0, so a message's turn_index is its planned rank, and its id is its source id
--      (which lets the builder write parts and FTS rows before the plan exists). Views over the
--      stage cost nothing where filling the two tables costs about 0.7 s per 200k messages.
CREATE TEMP VIEW _new AS
SELECT message_id AS src_message_id, session_id, new_rank AS turn, message_id AS id, created_iso, created_raw
FROM plan.plan_messages;

CREATE TEMP VIEW _map AS
SELECT message_id AS src_message_id, message_id AS tid, new_rank AS turn, created_iso
FROM plan.plan_messages;
