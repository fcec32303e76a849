-- step: target_transcript_rows
-- engine: duckdb (plan; the target attached read-only as `tgt`, right after 05_target_state)
-- reads: tgt.lcm_messages, tgt.lcm_message_parts, tgt_parts
-- produces: tgt_transcript_rows(id, session_id, turn_index, entry_id, identity_hash, occurrence, ts) — every row
--           `reconcile` brought in from a transcript, with lossless-claw's identity, which occurrence of it on
--           the session's path the message is (recorded for rows without an entry id) and the transcript's time;
--           tgt_parts gains the parts of those without an entry id
-- key: target message id
-- why: a transcript without entry ids (a v1 file) gives rows that only lossless-claw's identity
--      ties to the lcm.db rows lossless-claw's backfill made of the same file. migrate matches them by
--      identity, occurrence and second (20_turn_index.sql), as reconcile matches lcm.db rows (r20_match.sql),
--      so either order leaves each message once; audit names a message held twice (a10_audit_source.sql).
--      The parts of such a row are what the target holds of that message (30_message_parts.sql).
CREATE OR REPLACE TABLE tgt_transcript_rows AS
SELECT id, session_id, turn_index, nullif(trim(v[2]), '') AS entry_id, v[3] AS identity_hash,
       try_cast(v[4] AS BIGINT) AS occurrence, try_cast(created_at AS TIMESTAMPTZ) AS ts
FROM (SELECT id, session_id, turn_index, created_at,
             json_extract_string(metadata, ['$.source', '$.transcript_entry_id', '$.identity_hash',
                                            '$.identity_occurrence']) AS v
      FROM tgt.lcm_messages
      WHERE metadata LIKE '%openclaw-jsonl%' AND json_valid(metadata))
WHERE v[1] = 'openclaw-jsonl';

INSERT INTO tgt_parts
SELECT p.message_id, p.ordinal FROM tgt.lcm_message_parts p
WHERE p.message_id IN (SELECT id FROM tgt_transcript_rows WHERE entry_id IS NULL);
