-- step: target_provenance
-- engine: duckdb (plan; lcm-etl's own tables of the target attached read-only as `prov` — an empty set of them
--         when the target has none yet, e.g. one Remnic created)
-- reads: prov.lcm_etl_conversations
-- produces: tgt_conversations — what the target's provenance says of each source conversation it has seen
-- key: (source_path, conversation_id)
-- why: lossless-claw archives conversations, rebinds their session id and stamps them in place;
--      52_in_place_changes.sql compares this with the source to refresh and count what changed.
CREATE OR REPLACE TABLE tgt_conversations AS
SELECT source_path, CAST(conversation_id AS VARCHAR) AS conv_key, session_id, source_session_id, session_key, title,
       CAST(active AS VARCHAR) AS active, archived_at, archive_cause, bootstrapped_at, created_at, updated_at
FROM prov.lcm_etl_conversations;
