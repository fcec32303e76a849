-- step: fresh_fts (a new target's message FTS rows)
-- engine: sqlite (build: on the builder's connection, after 76_fresh_parts.sql)
-- reads: fresh_owners (see 76_fresh_parts.sql), src_messages
-- produces: lcm_messages_fts rows
-- key: target message id = source message id (= FTS rowid)
-- why: the FTS table is external-content: it indexes the text it is given, so it can be built from the
--      source before lcm_messages holds the rows (72_write_messages.sql copies content verbatim from the
--      same view). The writer checks that it indexed as many messages as 72 wrote.
-- count: messages_indexed
INSERT INTO lcm_messages_fts (rowid, content)
SELECT m.message_id, m.content
FROM (SELECT message_id FROM fresh_owners ORDER BY message_id LIMIT -1) o   -- keys sorted, not content
CROSS JOIN src_messages m ON m.message_id = o.message_id;
