-- step: part_time_fixes (a new target's messages whose time the two engines read differently)
-- engine: sqlite (write: once, on the planning thread's scratch file, after 72_write_messages.sql)
-- reads: fresh_owners (lcm_etl/load/fresh.py), lcm_messages (the scratch's)
-- produces: part_time_fixes(message_id, created_at), applied by 84_part_times.sql
-- key: target message id = source message id
-- why: 76_fresh_parts.sql gives a part without a time of its own its message's time as SQLite reads it,
--      before the plan exists; the message row holds the time as DuckDB read it (20_turn_index.sql).
--      They agree for every time both engines understand alike; the few that differ (a format only
--      one of them parses) are listed here, while the builder still works, so that the correction
--      costs the final transaction nothing when there is none.
CREATE TABLE part_time_fixes AS
SELECT t.id AS message_id, t.created_at
FROM fresh_owners o JOIN lcm_messages t ON t.id = o.message_id
WHERE t.created_at IS NOT o.created_iso;
