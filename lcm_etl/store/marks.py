"""The marks a sync re-run compares (docs/design.md, "Sync"), as the target keeps them: one table of named
columns per kind of mark, each kind declared once here.

- per source conversation (`lcm_etl_conversation_marks`, 03_source_marks.sql): a digest of its own row, and for
  each source table that holds rows of it (lcm_etl/read/source_tables.py, `mark`) how many and a digest of
  them, and a digest of its messages' content (delta.content_marks);
- per source (`lcm_etl_source_marks`, 02_source_global.sql): the schema's signature and, for each table whose
  rows of no conversation count (`orphans`), how many there are;
- per target session (`lcm_etl_session_marks`, 04_target_marks.sql and 94): its messages, its highest message
  id, its summaries and its boundary events.

A mark is equal, figure for figure, exactly when what it digests is unchanged. The digests are DuckDB's
64-bit unsigned hashes, kept as the signed 64-bit integers SQLite holds (the same bits). Version 2 of
lcm-etl's tables kept every mark as one colon-joined string in `lcm_etl_marks`, its figures in the same order:
`upgrade` turns those rows into these, in the write transaction that upgrades the schema (ledger.ensure),
and until a target is upgraded `read` reads them the same way, so a sync re-run of a target an older lcm-etl
wrote still re-plans only what changed.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from lcm_etl.read.source_tables import SOURCE_TABLES

OLD_TABLE = "lcm_etl_marks"   # version 2: (source_path, kind, key, mark, run_id), mark = 'figure:figure:...'
_HALF = 1 << 63


@dataclass(frozen=True)
class MarkKind:
    kind: str                  # what it marks (lcm_etl_marks.kind in version 2)
    table: str                 # lcm-etl's table in the target that keeps this kind
    key: str | None            # the column naming what is marked; None: one mark per source
    figures: tuple[str, ...]   # in the order the steps compute them (and version 2's strings held them)
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

    def parse(self, old: str) -> tuple | None:
        """Version 2's string as the figures, or None when it is not one of this kind."""
        parts = old.split(":") if isinstance(old, str) else []
        if len(parts) != len(self.figures):
            return None
        out: list = []
        for name, value in zip(self.figures, parts):
            if name in self.text:
                out.append(value)
                continue
            try:
                n = int(value)
            except ValueError:
                return None
            if name.endswith("_hash"):   # an unsigned 64-bit digest, written out in decimal
                if not 0 <= n < 2 * _HALF:
                    return None
                n = n - 2 * _HALF if n >= _HALF else n
            elif not -_HALF <= n < _HALF:
                return None
            out.append(n)
        return tuple(out)


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


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def read(con: sqlite3.Connection, source_paths: Sequence[str], run_id: str) -> Marks | None:
    """The marks that run stored for the source (under any of its `source_paths`); None without the source's
    own (then nothing is proved)."""
    tables = _tables(con)
    rows: dict[str, list[tuple]] = {}
    where = f"source_path IN ({', '.join('?' * len(source_paths))}) AND run_id = ?"
    if CONVERSATION.table in tables:
        for k in KINDS:
            rows[k.kind] = con.execute(f"SELECT {', '.join(k.columns)} FROM {k.table} WHERE {where}",
                                       (*source_paths, run_id)).fetchall()
    elif OLD_TABLE in tables:   # not upgraded yet: a dry run, or planning before the run's first write
        rows = _old_rows(con.execute(f"SELECT kind, key, mark FROM {OLD_TABLE} WHERE {where}", (*source_paths, run_id)))
    source = rows.get(SOURCE.kind)
    if not source:
        return None
    return Marks(rows.get(CONVERSATION.kind, []), rows.get(SESSION.kind, []), source[0])


def source_paths(con: sqlite3.Connection) -> set[str]:
    """Every source the target holds marks of, in whichever layout it has them."""
    tables = _tables(con)
    held = [t for t in (*TABLES, OLD_TABLE) if t in tables]
    return {r[0] for t in held for r in con.execute(f"SELECT DISTINCT source_path FROM {t}")}


def _old_rows(rows) -> dict[str, list[tuple]]:
    """Version 2's (kind, key, mark) rows as each kind's columns; a string that is not a mark of its kind (a
    hand's edit) is left out, and what it marked counts as changed (or, the source's, nothing is proved)."""
    kinds = {k.kind: k for k in KINDS}
    out: dict[str, list[tuple]] = {}
    for kind, key, mark in rows:
        k = kinds.get(kind)
        figures = k.parse(mark) if k else None
        if k is not None and figures is not None:
            out.setdefault(kind, []).append(((str(key),) if k.key else ()) + figures)
    return out


def upgrade(con: sqlite3.Connection) -> int:
    """Version 2's marks into the named columns (the tables exist: SCHEMA), and lcm_etl_marks dropped. Runs in
    the caller's write transaction, so the target has either layout whole. Returns how many rows could not be
    read as marks and were left out."""
    if OLD_TABLE not in _tables(con):
        return 0
    old = con.execute(f"SELECT source_path, run_id, kind, key, mark FROM {OLD_TABLE}").fetchall()
    kept = 0
    for kind in KINDS:
        rows = [(source_path, run_id, *row) for source_path, run_id, k, key, mark in old if k == kind.kind
                for row in _old_rows([(k, key, mark)]).get(k, [])]
        con.executemany(f"INSERT OR REPLACE INTO {kind.table} VALUES ({', '.join('?' * (len(kind.columns) + 2))})",
                        rows)
        kept += len(rows)
    con.execute(f"DROP TABLE {OLD_TABLE}")
    return len(old) - kept
