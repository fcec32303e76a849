"""The stage file's content rows (`jsonl_content`, `plan_parts`: what r72 and r80 write), and the spool that
writes a store window's rows there as soon as the window is read.

A store window is parsed once: its plan rows go to the Parquet spool (transcript_rows.IdentitySpool), its
content, metadata and parts straight into the stage file (ContentSpool), and the parse is dropped. Before, the
first 16 MiB of windows were held parsed and every later window was parsed a second time when staged, and a
re-run held every window's appended messages parsed until it staged them: 16 MiB of lines held parsed is about
85 MB, and a re-run after 1 % appended to a 5,000,000-event store held 50,000 events parsed (docs/benchmarks.md,
2026-11-26). Now what Python holds while reading is one window, whatever the store's size or the share of it
that is new.

The stage may hold rows the plan does not write (a message already held, a session left out): r72 and r80 join
the messages to write (`_new`) with these tables by message id, so the others are only never read.
"""
from __future__ import annotations

import json
from array import array
import sqlite3
from pathlib import Path
from typing import Iterable

import orjson

from lcm_etl.read.openclaw.openclaw_store import StoreWindow
from lcm_etl.read.transcript.transcript_blocks import js_stringify
from lcm_etl.read.transcript.transcripts import Transcript, TranscriptMessage
from lcm_etl.sqlite_runtime import private_file

SCHEMA = ("CREATE TABLE IF NOT EXISTS jsonl_content (message_id INTEGER PRIMARY KEY, content TEXT NOT NULL, "
          "metadata TEXT)",
          "CREATE TABLE IF NOT EXISTS plan_parts (message_id INTEGER, ordinal INTEGER, kind TEXT, payload TEXT, "
          "tool_name TEXT, file_path TEXT, created_at TEXT)")
CACHE_KIB = 2048   # the writer only appends: SQLite's page cache need not hold more than the pages being filled


def open_stage(path: Path) -> sqlite3.Connection:
    """The stage file (created with its content tables if new), private to the run, in a transaction."""
    con = sqlite3.connect(path, isolation_level=None)
    private_file(con, cache_kib=CACHE_KIB)
    for stmt in SCHEMA:
        con.execute(stmt)
    con.execute("BEGIN")
    return con


def write_message(con: sqlite3.Connection, t: Transcript, m: TranscriptMessage, mid: int, session_key: str | None,
                  counted: bool = False, occurrence: int | None = None) -> None:
    """One message's content row and part rows. `counted`: the plan counted `occurrence`, kept in the metadata
    of a row without an entry id (transcript_rows.IDENTITY_OCCURRENCE); a row spooled as read is not counted yet
    (add_occurrences)."""
    meta = _metadata(t, m, session_key)
    if counted and m.entry_id is None:
        meta["identity_occurrence"] = occurrence
    con.execute("INSERT INTO jsonl_content VALUES (?, ?, ?)", (mid, m.content, dumps(meta)))
    con.executemany("INSERT INTO plan_parts VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(mid, p["ordinal"], p["kind"], dumps(p["payload"]), p["tool_name"], p["file_path"],
                      p["created_at"]) for p in m.parts])


def add_occurrences(con: sqlite3.Connection, rows: Iterable[tuple[int, int]]) -> None:
    """Set identity_occurrence in the metadata of spooled rows without an entry id. A store's rows all have one,
    so this is almost never more than a look; the key is appended last, as write_message puts it (both writers
    write compact JSON, so the text is the same as if it had been there when the row was written)."""
    for mid, occurrence in rows:
        row = con.execute("SELECT metadata FROM jsonl_content WHERE message_id = ?", (mid,)).fetchone()
        if row is None or row[0] is None or "transcript_entry_id" in json.loads(row[0]):
            continue
        con.execute("UPDATE jsonl_content SET metadata = ? WHERE message_id = ?",
                    (f'{row[0][:-1]},"identity_occurrence":{int(occurrence)}}}', mid))


class ContentSpool:
    """The stage file, filled with store windows' content rows as they are read (reconcile stages the rest into
    the same file: transcript_rows.stage_content)."""

    def __init__(self, path: Path):
        self.path = path
        self._con: sqlite3.Connection | None = open_stage(path)
        # file order -> its plan_parts rowids (first, last; 0 when none): two machine integers a window, not a dict
        # entry and a tuple (about 120 bytes a window held through the run)
        self._first, self._last = array("q"), array("q")

    def add(self, t: Transcript, order: int, session_key: str | None) -> None:
        """The transcript's messages, as message ids order << 32 | index (transcript_rows); a transcript read
        again (whole, after a read past its record) replaces the rows it was spooled with."""
        assert self._con is not None
        self.drop(order)
        before = self._con.execute("SELECT max(rowid) FROM plan_parts").fetchone()[0] or 0
        for i, m in enumerate(t.messages):
            write_message(self._con, t, m, (order << 32) | i, session_key)
        after = self._con.execute("SELECT max(rowid) FROM plan_parts").fetchone()[0] or 0
        if after > before:
            grow = order + 1 - len(self._first)
            if grow > 0:
                self._first.extend([0] * grow)
                self._last.extend([0] * grow)
            self._first[order], self._last[order] = before + 1, after
        t.staged = True

    def drop(self, order: int) -> None:
        assert self._con is not None
        self._con.execute("DELETE FROM jsonl_content WHERE message_id BETWEEN ? AND ?",
                          (order << 32, (order << 32) | 0xFFFFFFFF))
        if order < len(self._first) and self._first[order]:
            self._con.execute("DELETE FROM plan_parts WHERE rowid BETWEEN ? AND ?", (self._first[order], self._last[order]))
            self._first[order] = self._last[order] = 0

    def finish(self) -> Path:
        """Commit and close; the stage file's path (reconcile stages the other transcripts into it)."""
        if self._con is not None:
            self._con.execute("COMMIT")
            self._con.close()
            self._con = None
        return self.path

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def _metadata(t: Transcript, m: TranscriptMessage, session_key: str | None) -> dict:
    # a store window's row: its seq and the window's facts (lineage, title, channel) instead of a file and line
    where = ({"seq": m.line_no, **t.origin.metadata()} if isinstance(t.origin, StoreWindow)
             else {"file": str(t.path), "line": m.line_no, **(t.origin.metadata() if t.origin is not None else {})})
    meta = {"source": "openclaw-jsonl", **where, "header_id": t.header_id,
            "transcript_entry_id": m.entry_id, "parent_entry_id": m.parent_id,
            "identity_hash": m.identity_hash, "session_key": session_key,
            "source_created_at": m.created_at_lc, "inner_timestamp": m.inner_timestamp,
            "sender_metadata": m.sender_metadata, **m.metadata}
    return {k: v for k, v in meta.items() if v is not None}


def dumps(value) -> str:
    """orjson when it can (fast); the JS-compatible writer for what orjson refuses (lone surrogates,
    integers beyond 64 bits), which it writes as JSON.stringify would."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:   # orjson.JSONEncodeError is a TypeError
        return js_stringify(value)
