"""The rows a sync re-run plans, copied out of the source and the target into small SQLite files.

DuckDB's sqlite_scanner reads a table whole: a filter on a column is applied after the scan. Narrowing the
plan to a few sessions by filtering the attached 200k-message source and target costs as much as reading
them. SQLite finds the same rows through its indexes in milliseconds, so a re-run copies them into files
with the same tables (the same CREATE statements, so the scanner sees the same types) and attaches those
in place of the whole files; the plan's SQL does not change.
"""
from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

# source tables the plan reads (source_schema.normalized_views), and which of their rows belong to the scope
_SOURCE_ROWS = (
    ("conversations", "conversation_id IN (SELECT conv FROM temp.scope)"),
    ("messages", "conversation_id IN (SELECT conv FROM temp.scope)"),
    ("message_parts", "message_id IN (SELECT message_id FROM main.messages)"),
    ("summaries", "conversation_id IN (SELECT conv FROM temp.scope)"),
    ("summary_messages", "summary_id IN (SELECT summary_id FROM main.summaries)"),
    ("summary_parents", "summary_id IN (SELECT summary_id FROM main.summaries) "
                        "OR parent_summary_id IN (SELECT summary_id FROM main.summaries)"),
    ("large_files", "conversation_id IN (SELECT conv FROM temp.scope)"),
)

# target tables 05_target_state.sql reads, and which of their rows belong to the scope
_TARGET_ROWS = (
    ("lcm_messages", "session_id IN (SELECT session_id FROM temp.scope)"),
    ("lcm_message_parts", "message_id IN (SELECT id FROM main.lcm_messages)"),
    ("lcm_summary_nodes", "session_id IN (SELECT session_id FROM temp.scope)"),
    ("lcm_compaction_events", "session_id IN (SELECT session_id FROM temp.scope)"),
)


def source_subset(snapshot: Path, out: Path, conversations: list[str]) -> Path:
    """The scope's conversations and every row of theirs the plan reads. Keys arrive as text
    (CAST(conversation_id AS VARCHAR)); integer ids are compared as integers so the index is used."""
    keys = [(int(k),) if k.lstrip("-").isdigit() else (k,) for k in conversations]
    return _copy(snapshot, out, _SOURCE_ROWS, "CREATE TEMP TABLE scope (conv PRIMARY KEY)", keys)


def target_subset(target: Path, out: Path, sessions: list[str]) -> Path:
    """The scope's sessions as the target holds them."""
    return _copy(target, out, _TARGET_ROWS, "CREATE TEMP TABLE scope (session_id TEXT PRIMARY KEY)",
                 [(s,) for s in sessions])


def _copy(db: Path, out: Path, tables, scope_ddl: str, keys: list[tuple]) -> Path:
    out.unlink(missing_ok=True)
    with closing(sqlite3.connect(f"file:{out}", uri=True, isolation_level=None)) as con:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("ATTACH ? AS whole", (f"file:{db}?mode=ro",))
        con.execute(scope_ddl)
        con.executemany("INSERT OR IGNORE INTO temp.scope VALUES (?)", keys)
        ddl = dict(con.execute("SELECT name, sql FROM whole.sqlite_master WHERE type = 'table'").fetchall())
        con.execute("BEGIN")
        for table, rows in tables:
            if table in ddl:
                con.execute(ddl[table])
                con.execute(f'INSERT INTO main."{table}" SELECT * FROM whole."{table}" WHERE {rows}')
        con.execute("COMMIT")
    return out
