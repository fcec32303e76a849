-- step: index_messages
-- engine: sqlite (write, once per batch) — shared by migrate and reconcile
-- reads: _new, lcm_messages
-- produces: lcm_messages_fts rows for the new messages
-- key: target message id (= FTS rowid)
-- why: Remnic's FTS tables are external-content with no triggers: every writer inserts the FTS row
--      itself, in the same transaction as the base row.
INSERT INTO lcm_messages_fts (rowid, content)
SELECT t.id, t.content FROM (SELECT id FROM _new ORDER BY id LIMIT -1) n CROSS JOIN lcm_messages t ON t.id = n.id;
