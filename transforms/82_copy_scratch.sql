-- step: copy_scratch (a new target's messages and summaries)
-- engine: sqlite (write: once, on the new target's private file, after the builder finished)
-- reads: msgs.* (the planning thread's scratch file, created with the target's own schema: 72, 73, 85)
-- produces: lcm_messages, lcm_summary_nodes, lcm_etl_summaries, lcm_etl_summary_edges rows, with their indexes
-- key: target message id = source message id; summary id
-- why: those rows were written beside the builder while it filled this file with parts and FTS rows
--      (SQLite allows one writer per file). Same DDL and indexes, empty destinations, foreign keys off while
--      a new target is built: SQLite moves the records and index entries as they are (its transfer
--      optimisation) instead of inserting row by row, and rowids stay as written. Were it not taken,
--      these would still be correct, slower inserts.
INSERT INTO lcm_messages SELECT * FROM msgs.lcm_messages;
INSERT INTO lcm_summary_nodes SELECT * FROM msgs.lcm_summary_nodes;
INSERT INTO lcm_etl_summaries SELECT * FROM msgs.lcm_etl_summaries;
INSERT INTO lcm_etl_summary_edges SELECT * FROM msgs.lcm_etl_summary_edges;
