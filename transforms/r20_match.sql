-- step: reconcile_match
-- engine: duckdb (plan)
-- reads: jsonl_messages (active-path messages of every transcript, from lcm_etl/read/transcript/transcripts.py),
--        jsonl_appended (sessions whose files were read from the offset a previous run recorded),
--        jsonl_abandoned (entry id, role, inner timestamp of messages off the path), held_lcm (lcm.db rows, when --src is given), held_tgt (target rows), selected
-- produces: jsonl_plan(message_id, session_id, matched_by, rewritten, rewrite_of, is_new, new_rank, plan_turn, ...);
--           held(held_id, session_id, entry_id, identity_hash, ...) — the rows lcm.db and the target hold of these
--           transcripts (transcript_decision.settle read a session whole when one of them has no entry id)
-- key: transcript entry id per session; else lossless-claw's identity (role + canonical content) with
--      occurrence counting; or a rewrite: same role and inner timestamp as a held entry that the file
--      keeps on an abandoned branch
-- why: reconcile imports only what neither lcm.db nor the target holds yet. A held row is
--      matched by its transcript entry id where one is stored. The held rows no path entry claims
--      (older lossless-claw rows without entry ids, or rows whose ids a copy-on-write rewrite
--      re-issued) are matched first as rewrites (a copy-on-write rewrite keeps the inner timestamp and
--      leaves the original on an abandoned branch: the held original is kept, the copy is not
--      imported again), then by identity: the k-th occurrence of an identity on the path is held
--      when at least k such rows without an entry id are. A row with an entry id is never the same message
--      as a path entry with another id (after a branch, the new branch's "continue" is not the abandoned
--      one's): it holds by identity only a path message without an entry id. A target row that came from
--      lcm.db is the same message as its lcm.db row and is counted once. New messages keep path order and
--      append after the session.
--      A session read from recorded offsets (lcm_etl/read/sessions/transcript_decision.py) holds only appended entries here:
--      its held rows with entry ids belong to the path already read, so none is "unclaimed" (settle
--      read a session whole when it has held rows without entry ids, which only the whole path can count:
--      transcript_decision.BY_IDENTITY).
CREATE OR REPLACE TABLE held AS
SELECT row_number() OVER () AS held_id, * FROM (
SELECT l.session_id, l.entry_id, l.identity_hash
FROM held_lcm l
WHERE l.session_id IN (SELECT session_id FROM jsonl_messages)
UNION ALL
SELECT t.session_id, t.entry_id, t.identity_hash
FROM held_tgt t
WHERE t.session_id IN (SELECT session_id FROM jsonl_messages)
  AND NOT (t.source = 'lossless-claw'
           AND EXISTS (SELECT 1 FROM held_lcm l
                       WHERE l.session_id = t.session_id AND l.conv_key = t.conversation_id AND l.seq = t.source_seq))
);

CREATE OR REPLACE TABLE jsonl_plan AS
WITH repeated AS (
  -- the same entry in two files (a live file and a named archive) is one message: its first copy in read order
  -- (message_id orders as file_order, path_index). An aggregate keeps the repeated entries only, where a window
  -- over every message sorted them all (a store's 3M messages: tens of seconds of sorting spilled to disk)
  SELECT session_id, entry_id, min(message_id) AS first_id
  FROM jsonl_messages WHERE entry_id IS NOT NULL
  GROUP BY session_id, entry_id HAVING count(*) > 1
), first_copy AS (
  SELECT j.*, r.first_id IS NULL OR r.first_id = j.message_id AS first
  FROM jsonl_messages j LEFT JOIN repeated r ON r.session_id = j.session_id AND r.entry_id = j.entry_id
), by_id AS (
  -- held under its entry id; `changed`: with other content (OpenClaw rewrote the entry in place: its doctor's
  -- label rewrite keeps seq and id). One join and an aggregate: a correlated NOT EXISTS here made DuckDB cache
  -- every message in a delim join that its memory budget could not spill (out of memory at 3M messages)
  SELECT j.message_id,
         NOT bool_or(coalesce(h.identity_hash = j.identity_hash, false) OR h.identity_hash IS NULL) AS changed
  FROM first_copy j JOIN held h ON h.session_id = j.session_id AND h.entry_id = j.entry_id
  GROUP BY j.message_id
), unclaimed AS (
  SELECT h.* FROM held h
  WHERE h.entry_id IS NULL
     OR (NOT EXISTS (SELECT 1 FROM jsonl_messages p WHERE p.session_id = h.session_id AND p.entry_id = h.entry_id)
         AND h.session_id NOT IN (SELECT session_id FROM jsonl_appended))
), rewrites AS (
  SELECT j.message_id, min(u.held_id) AS held_id
  FROM first_copy j
  JOIN jsonl_abandoned a ON a.session_id = j.session_id AND a.role = j.role AND a.inner_ts = j.inner_ts
  JOIN unclaimed u ON u.session_id = a.session_id AND u.entry_id = a.entry_id
  WHERE j.first AND j.message_id NOT IN (SELECT message_id FROM by_id)
  GROUP BY j.message_id
), spare AS (
  -- `bare`: the unclaimed rows without an entry id; `named`: those with one (an entry the path no longer holds)
  SELECT u.session_id, u.identity_hash, count(*) FILTER (WHERE u.entry_id IS NULL) AS bare,
         count(*) FILTER (WHERE u.entry_id IS NOT NULL) AS named
  FROM unclaimed u
  WHERE u.identity_hash IS NOT NULL AND u.held_id NOT IN (SELECT held_id FROM rewrites)
  GROUP BY u.session_id, u.identity_hash
), by_bare AS (
  -- the k-th occurrence of an identity on the path is held when at least k unclaimed rows without an entry id
  -- hold it: counted only where such rows are (a first run has none)
  SELECT j.message_id,
         row_number() OVER (PARTITION BY j.session_id, j.identity_hash ORDER BY j.file_order, j.path_index) <= s.bare
           AS held
  FROM first_copy j JOIN spare s ON s.session_id = j.session_id AND s.identity_hash = j.identity_hash
  WHERE j.first AND s.bare > 0 AND j.message_id NOT IN (SELECT message_id FROM by_id)
    AND j.message_id NOT IN (SELECT message_id FROM rewrites)
), by_named AS (
  -- a held row with an entry id never stands in for a path entry with another id: after a branch, "continue"
  -- or a text-less tool call on the new branch has the identity of one on the abandoned branch, imported
  -- already, and is another message. Such rows count only for path messages without an entry id (an id-less
  -- copy of the transcript) that rows without ids did not hold, the k-th of them held when k such rows are
  SELECT j.message_id,
         row_number() OVER (PARTITION BY j.session_id, j.identity_hash ORDER BY j.file_order, j.path_index) <= s.named
           AS held
  FROM first_copy j JOIN spare s ON s.session_id = j.session_id AND s.identity_hash = j.identity_hash
  WHERE j.first AND j.entry_id IS NULL AND s.named > 0 AND j.message_id NOT IN (SELECT message_id FROM by_id)
    AND j.message_id NOT IN (SELECT message_id FROM rewrites)
    AND j.message_id NOT IN (SELECT message_id FROM by_bare WHERE held)
), by_identity AS (
  SELECT message_id FROM by_bare WHERE held
  UNION ALL
  SELECT message_id FROM by_named WHERE held
), matched AS (
  SELECT j.message_id, j.session_id, j.file_order, j.path_index, j.first,
         CASE WHEN NOT j.first THEN 'same entry in an earlier file'
              WHEN b.message_id IS NOT NULL THEN 'entry id'
              WHEN w.message_id IS NOT NULL THEN 'rewrite'
              WHEN i.message_id IS NOT NULL THEN 'identity'
         END AS matched_by,
         -- held under its entry id with other content: the held row keeps the text it was imported with,
         -- counted, never re-imported
         j.first AND coalesce(b.changed, false) AS rewritten,
         -- the held original a rewrite stands for: on the path in its copy's place (r25_off_path.sql)
         hw.entry_id AS rewrite_of
  FROM first_copy j
  LEFT JOIN by_id b ON b.message_id = j.message_id
  LEFT JOIN rewrites w ON w.message_id = j.message_id
  LEFT JOIN held hw ON hw.held_id = w.held_id
  LEFT JOIN by_identity i ON i.message_id = j.message_id
  WHERE j.session_id IN (SELECT session_id FROM selected)
), ranked AS (
  SELECT *, matched_by IS NULL AS is_new,
         CASE WHEN matched_by IS NULL
              THEN row_number() OVER (PARTITION BY session_id, matched_by IS NULL ORDER BY file_order, path_index) - 1
         END AS new_rank
  FROM matched
)
SELECT r.*, CASE WHEN r.is_new THEN coalesce(x.max_turn, -1) + 1 + r.new_rank END AS plan_turn
FROM ranked r LEFT JOIN tgt_max_turn x ON x.session_id = r.session_id;
