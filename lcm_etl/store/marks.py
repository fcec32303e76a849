"""The marks a sync re-run compares (docs/design.md, "Sync"), as the target keeps them: one table of named
columns per kind of mark, each kind declared once here.

- per source conversation (`lcm_etl_conversation_marks`, 03_source_marks.sql): a digest of its own row, and for
  each source table that holds rows of it (lcm_etl/read/lcmdb/source_tables.py, `mark`) how many and a digest of
  them, and a digest of its messages' content (delta.content_marks);
- per source (`lcm_etl_source_marks`, 02_source_global.sql): the schema's signature and, for each table whose
  rows of no conversation count (`orphans`), how many there are;
- per target session (`lcm_etl_session_marks`, 04_target_marks.sql and 94): its messages, its highest message
  id, its summaries and its boundary events.

A mark is equal, figure for figure, exactly when what it digests is unchanged. The digests are DuckDB's
64-bit unsigned hashes, kept as the signed 64-bit integers SQLite holds (the same bits).
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from dataclasses import dataclass

from lcm_etl.read.lcmdb.source_tables import SOURCE_TABLES


@dataclass(frozen=True)
class MarkKind:
    kind: str                  # what it marks
    table: str                 # lcm-etl's table in the target that keeps this kind
    key: str | None            # the column naming what is marked; None: one mark per source
    figures: tuple[str, ...]   # in the order the steps compute them
    text: frozenset[str] = frozenset()   # text figures; the others are 64-bit integers, `*_hash` a digest

    @property
    def columns(self) -> tuple[str, ...]:
        """What the steps' tables hold, in this order: the key (if any), then the figures."""
        return ((self.key,) if self.key else ()) + self.figures

    def duck_types(self) -> dict[str, str]:
        return {c: "VARCHAR" if c == self.key or c in self.text else "BIGINT" for c in self.columns}

    def ddl(self) -> str:
        """The table: source_path and run_id, then `columns` (95_write_provenance.sql inserts them in this order)."""
        cols = [f"{c} {'TEXT' if c in self.text else 'INTEGER'}" for c in self.figures]
        key = [f"{self.key} TEXT NOT NULL"] if self.key else []
        pk = ", ".join(["source_path"] + ([self.key] if self.key else []))
        return (f"CREATE TABLE IF NOT EXISTS {self.table} (source_path TEXT NOT NULL, run_id TEXT NOT NULL, "
                f"{', '.join(key + cols)}, PRIMARY KEY ({pk}));\n")


CONVERSATION = MarkKind(
    "conversation", "lcm_etl_conversation_marks", "conversation_id",
    ("conversation_hash", *(f for t in SOURCE_TABLES if t.mark for f in (t.mark, f"{t.mark}_hash")), "content_digest"),
    frozenset({"content_digest"}))
SOURCE = MarkKind(
    "global", "lcm_etl_source_marks", None,
    ("schema_signature", *(f"orphan_{t.mark}" for t in SOURCE_TABLES if t.orphans)), frozenset({"schema_signature"}))
SESSION = MarkKind("session", "lcm_etl_session_marks", "session_id",
                   ("messages", "max_message_id", "summaries", "boundary_events"))
KINDS = (CONVERSATION, SOURCE, SESSION)
TABLES = tuple(k.table for k in KINDS)   # every table of marks, each keyed by source_path
SCHEMA = "".join(k.ddl() for k in KINDS)


@dataclass
class Marks:
    """One run's marks of one source: rows of each kind's `columns`."""
    conversations: list[tuple]
    sessions: list[tuple]
    source: tuple   # SOURCE.figures


def read(con: sqlite3.Connection, source_path: str, run_id: str) -> Marks | None:
    """The marks that run stored for the source; None without the source's own (then nothing is proved)."""
    rows = {k.kind: con.execute(f"SELECT {', '.join(k.columns)} FROM {k.table} WHERE source_path = ? AND run_id = ?",
                                (source_path, run_id)).fetchall() for k in KINDS}
    if not rows[SOURCE.kind]:
        return None
    return Marks(rows[CONVERSATION.kind], rows[SESSION.kind], rows[SOURCE.kind][0])
