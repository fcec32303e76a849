"""The lossless-claw tables lcm-etl reads, each said once: what the other modules know of a source table is
read from here.

For each table: its identity, the normalised view over it and the columns that view maps
(lcm_etl/read/lcmdb/source_schema.py), the one or two conversations that own a row of it (lcm_etl/read/snapshot/page_owners.py
places a changed page by them), which of its rows a sync re-run's scope holds (lcm_etl/read/lcmdb/subset.py copies
them), and the figures it adds to a conversation's mark and to the source's global mark
(lcm_etl/store/marks.py names them; 02_source_global.sql and 03_source_marks.sql compute them, and
tests/test_source_tables.py checks that those steps read every view listed here and compute every figure).
LEFT_OUT names the lossless-claw tables lcm-etl knows and deliberately does not read.
"""
from __future__ import annotations

from dataclasses import dataclass

# FROM ... LEFT JOIN: the conversation of a row that has a conversation_id (aliased c; NULL: of no conversation)
_CONV = "LEFT JOIN conversations c ON c.conversation_id = {}.conversation_id"
_C = "c.conversation_id, c.conversation_id"
_IN_SCOPE = "conversation_id IN (SELECT conv FROM temp.scope)"


@dataclass(frozen=True)
class SourceTable:
    name: str                         # lossless-claw's table
    key: tuple[str, ...]              # what identifies a row to the plan
    view: str                         # the normalised view over it (source_schema.normalized_views)
    # the columns the view maps, NULL where a generation lacks one; None: every column goes into the row's
    # payload (message_parts, source_schema._parts_view)
    columns: tuple[str, ...] | None
    required: bool                    # every lossless-claw release creates it (else it reads as empty)
    # the one or two conversations owning a row, as two SQL columns over `joins` (the table aliased `alias`);
    # NULL when the owner does not exist: a row of no conversation
    alias: str
    owners: str
    joins: str
    # its rows in a sync re-run's scope: a condition over temp.scope(conv) and the tables copied before it
    scope_rows: str
    # its figures in its conversation's mark, `NAME` (how many rows) and `NAME_hash` (a digest of them);
    # None: the conversation's own row (its mark's conversation_hash)
    mark: str | None
    # its rows of no conversation are counted in the source's global mark (`orphan_NAME`)
    orphans: bool = False


SOURCE_TABLES = (
    SourceTable("conversations", ("conversation_id",), "src_conversations",
                ("conversation_id", "session_id", "session_key", "title", "active", "archived_at", "archive_cause",
                 "bootstrapped_at", "created_at", "updated_at"), True,
                "t", "t.conversation_id, t.conversation_id", "FROM conversations t", _IN_SCOPE, None),
    SourceTable("messages", ("message_id",), "src_messages",
                ("message_id", "conversation_id", "seq", "role", "content", "token_count", "identity_hash",
                 "transcript_entry_id", "openclaw_sender_metadata", "stable_event_key", "large_content",
                 "created_at"), True,
                "m", _C, "FROM messages m " + _CONV.format("m"), _IN_SCOPE, "messages", orphans=True),
    SourceTable("message_parts", ("message_id", "ordinal"), "src_parts", None, False,
                "p", _C, "FROM message_parts p LEFT JOIN messages m ON m.message_id = p.message_id "
                + _CONV.format("m"), "message_id IN (SELECT message_id FROM main.messages)", "parts", orphans=True),
    SourceTable("summaries", ("summary_id",), "src_summaries",
                ("summary_id", "conversation_id", "kind", "depth", "content", "token_count", "earliest_at",
                 "latest_at", "descendant_count", "descendant_token_count", "source_message_token_count",
                 "created_at", "file_ids", "model"), True,
                "s", _C, "FROM summaries s " + _CONV.format("s"), _IN_SCOPE, "summaries", orphans=True),
    SourceTable("summary_messages", ("summary_id", "message_id"), "src_summary_messages",
                ("summary_id", "message_id", "ordinal"), True,
                "l", _C, "FROM summary_messages l LEFT JOIN summaries s ON s.summary_id = l.summary_id "
                + _CONV.format("s"), "summary_id IN (SELECT summary_id FROM main.summaries)", "summary_links",
                orphans=True),
    # an edge belongs to the conversations of both its ends (03_source_marks.sql counts it for each); of no
    # end: an orphan
    SourceTable("summary_parents", ("summary_id", "parent_summary_id"), "src_summary_parents",
                ("summary_id", "parent_summary_id", "ordinal"), True,
                "e", "coalesce(c.conversation_id, pc.conversation_id), coalesce(pc.conversation_id, c.conversation_id)",
                "FROM summary_parents e LEFT JOIN summaries s ON s.summary_id = e.summary_id " + _CONV.format("s")
                + " LEFT JOIN summaries p ON p.summary_id = e.parent_summary_id "
                "LEFT JOIN conversations pc ON pc.conversation_id = p.conversation_id",
                "summary_id IN (SELECT summary_id FROM main.summaries) "
                "OR parent_summary_id IN (SELECT summary_id FROM main.summaries)", "summary_edges", orphans=True),
    SourceTable("large_files", ("file_id",), "src_large_files",
                ("file_id", "conversation_id", "file_name", "mime_type", "byte_size", "line_count", "storage_uri",
                 "exploration_summary", "created_at"), False,
                "f", _C, "FROM large_files f " + _CONV.format("f"), _IN_SCOPE, "large_files"),
)
BY_NAME = {t.name: t for t in SOURCE_TABLES}

# Every other table a lossless-claw release creates, left out on purpose (docs/mapping.md, "Other lossless-claw
# tables"), with SQLite's own; an FTS table's shadow tables are named after it (source_schema.unknown).
LEFT_OUT = ("context_items", "messages_fts", "summaries_fts", "summaries_fts_cjk", "conversation_bootstrap_state",
            "conversation_transcript_epochs", "message_transcript_anchor_trust", "conversation_compaction_telemetry",
            "conversation_compaction_maintenance", "pending_compaction_batches", "pending_summary_nodes",
            "pending_summary_node_children", "pending_summary_node_messages", "turn_advancements", "focus_briefs",
            "focus_brief_sources", "lcm_migration_state", "sqlite_sequence")
