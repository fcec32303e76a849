-- step: index_messages
-- engine: sqlite (write, once per batch) — shared by migrate and reconcile
-- reads: _new, lcm_messages
-- produces: lcm_messages_fts rows for the new messages; _map(src_message_id → target id, turn)
-- key: target message id (= FTS rowid)
-- why: Remnic's FTS tables are external-content with no triggers: every writer inserts the FTS row
--      itself, in the same transaction as the base row. _map lets later steps (parts, summary ranges)
--      find the target row of a source message.
INSERT INTO lcm_messages_fts (rowid, content)
SELECT t.id, t.content FROM _new n JOIN lcm_messages t ON t.id = n.id ORDER BY t.id;

INSERT OR REPLACE INTO _map (src_message_id, tid, turn, created_iso)
SELECT src_message_id, id, turn, created_iso FROM _new;
