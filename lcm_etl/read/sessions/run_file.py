"""The run file: everything a reconcile (or an audit) knows of the transcripts it read, in one SQLite file in the
run's private folder, written as each transcript is read (docs/design.md, "Reconcile: transcripts, read from where
the last run stopped").

- `transcripts`: one row per transcript, by read order (`file_order`): its record key, kind, where it was read
  from and how to read it again, the read (whole or appended, and why), the record it was read from (`rec_*`, a
  hint checked under the lock: transcript_decision.settle), what was read (the mark's `lines` ... `lines_read`, the record the
  next run continues from), what its read found (`report`), and the session it lands in.
- `jsonl_messages`: one row per message read, message_id = file_order << 32 | path_index, its identity columns
  (what the plan reads); `jsonl_content`: its content and metadata, by message id (what r72 writes). Apart: a
  DuckDB scan of a table holding the content reads the content's pages too (0.31 s against 0.18 s a scan of
  310,000 messages, and the plan scans them about eight times).
- `jsonl_parts`: one row per part (content block); `jsonl_abandoned`: the entries off the active path.

DuckDB plans over this file (lcm_etl/planning/reconcile_plan.py), r72/r80 write its content, r95 records its
`transcripts`, and the report is a query over it: no transcript outlives its read in Python. One writer
(`RunFile`) buffers rows and writes them every FLUSH_BYTES. Content is written only for the sessions the run may
write (--session-filter), and none by a dry run (audit's comparison reads it).
"""
from __future__ import annotations

import json
from lcm_etl.sqlite_runtime import sqlite3
from dataclasses import asdict, astuple
from pathlib import Path
from typing import Any

import orjson

from lcm_etl import sqlite_runtime
from lcm_etl.read.openclaw.openclaw_state import legacy_session_keys
from lcm_etl.read.transcript.transcript_files import load_session_keys
from lcm_etl.read.transcript.transcript_blocks import js_stringify
from lcm_etl.read.sessions.transcript_decision import RECORD_COLUMNS, FileRecord, transcript_key
from lcm_etl.read.transcript.transcripts import MARK_COLUMNS, Transcript, TranscriptMessage
from lcm_etl.sqlite_runtime import private_file

SCHEMA = (
    """CREATE TABLE transcripts (file_order INTEGER PRIMARY KEY, record_key TEXT, path TEXT, kind TEXT,
        where_kind TEXT, store TEXT, again TEXT, header_id TEXT, version INTEGER, origin TEXT, read TEXT, why TEXT,
        """ + ", ".join([f"rec_{c}" for c in RECORD_COLUMNS] + list(MARK_COLUMNS)) + """, read_from INTEGER,
        lines_read INTEGER, read_count INTEGER, report TEXT, session_id TEXT, session_key TEXT)""",
    """CREATE TABLE jsonl_messages (message_id INTEGER PRIMARY KEY, file_order INTEGER, path_index INTEGER,
        session_id TEXT, entry_id TEXT, role TEXT, token_count INTEGER, identity_hash TEXT, created_iso TEXT,
        inner_ts TEXT)""",
    "CREATE TABLE jsonl_content (message_id INTEGER PRIMARY KEY, content TEXT, metadata TEXT)",
    """CREATE TABLE jsonl_parts (message_id INTEGER, ordinal INTEGER, kind TEXT, payload TEXT, tool_name TEXT,
        file_path TEXT, created_at TEXT)""",
    "CREATE TABLE jsonl_abandoned (file_order INTEGER, session_id TEXT, entry_id TEXT, role TEXT, inner_ts TEXT)")
TABLES = ("transcripts", "jsonl_messages", "jsonl_content", "jsonl_parts", "jsonl_abandoned")
FLUSH_BYTES = 4 << 20   # rows buffered in Python before they are written (content counted by its length)
_ROW = 200              # what a row costs besides its text


class RunFile:
    """The run file's one writer: rows gathered in Python, written every FLUSH_BYTES with one executemany a table."""

    def __init__(self, path: Path, content: bool = True, session_filter: frozenset[str] = frozenset()):
        self.path, self.content, self.session_filter = path, content, session_filter
        self.con = sqlite_runtime.connect(path, "", isolation_level=None, check_same_thread=False)
        private_file(self.con, cache_kib=2048)   # written in order: the cache need not hold the file
        for stmt in SCHEMA:
            self.con.execute(stmt)
        self._rows: dict[str, list[tuple]] = {name: [] for name in TABLES}
        # each table's INSERT, its placeholders counted from the table as created
        width = {name: len(self.con.execute(f"PRAGMA table_info({name})").fetchall()) for name in TABLES}
        self._insert = {name: f"INSERT INTO {name} VALUES ({', '.join('?' * width[name])})" for name in TABLES}
        self._size = 0
        self.count = 0   # transcripts added

    def add(self, t: Transcript, hint: FileRecord | str, session: tuple[str, str | None], kind: str, where: str,
            again: tuple[str | None, str | None], origin: dict, fallback_time: str, order: int | None = None) -> None:
        """One transcript read (`order`: one read again, in its place), `hint` the record it was read from, or why not."""
        if order is None:
            order, self.count = self.count, self.count + 1
        sid, key = session
        keep = self.content and (not self.session_filter or sid in self.session_filter)
        m, r = t.mark, t.report
        rec = hint if isinstance(hint, FileRecord) and t.why_whole is None else None   # read from its record
        # what the report says of the read (a window's projection goes into `origin`)
        report = {k: v for k, v in asdict(r).items() if v and k not in ("non_persistable", "cycles", "projection")}
        self._rows["transcripts"].append((
            order, transcript_key(t), str(t.path), kind, where, *again, t.header_id, t.version, dumps(origin),
            "whole" if rec is None else "appended", t.why_whole,
            *((*astuple(rec.mark), *astuple(rec)[2:]) if rec is not None else (None,) * len(RECORD_COLUMNS)),   # RECORD_COLUMNS
            *((*(getattr(m, c) for c in MARK_COLUMNS), t.read_from, t.lines_read) if m else (None,) * (len(MARK_COLUMNS) + 2)),
            len(t.messages), dumps(report), sid, key))
        size = _ROW
        for i, msg in enumerate(t.messages):
            mid = (order << 32) | i
            self._rows["jsonl_messages"].append((
                mid, order, i, sid, msg.entry_id, msg.role, msg.token_count, msg.identity_hash,
                msg.created_at or fallback_time, _ts_text(msg.inner_timestamp)))
            size += _ROW
            if keep:
                meta = dumps(metadata(t, msg, key))
                self._rows["jsonl_content"].append((mid, msg.content, meta))
                size += len(msg.content) + len(meta)
            for p in msg.parts:
                payload = dumps(p["payload"]) if keep else None
                self._rows["jsonl_parts"].append((mid, p["ordinal"], p["kind"], payload, p["tool_name"],
                                                  p["file_path"], p["created_at"]))
                size += _ROW + len(payload or "")
        for entry_id, role, inner in t.abandoned:
            self._rows["jsonl_abandoned"].append((order, sid, entry_id, role, _ts_text(inner)))
            size += _ROW
        self._size += size
        if self._size >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        self.con.execute("BEGIN")
        for name, rows in self._rows.items():
            if rows:
                self.con.executemany(self._insert[name], rows)
                rows.clear()
        self.con.execute("COMMIT")
        self._size = 0

    def read_back(self) -> None:
        """Every row written: what follows (settle, the plan's sessions, the report) scans `transcripts` about ten
        times, so its pages stay in the cache (a 4,000-window store's 2.7 MB, over the 2 MB cache, were read again
        from the file at each scan: 36 MB a sync)."""
        self.flush()
        self.con.execute("PRAGMA cache_size=-16384")

    def forget(self, order: int) -> None:
        """Remove a transcript's rows, to read it again whole (its row is replaced by the new read's)."""
        self.flush()
        lo, hi = order << 32, (order << 32) | 0xFFFFFFFF
        self.con.execute("BEGIN")
        for stmt in ("CREATE INDEX IF NOT EXISTS parts_by_message ON jsonl_parts(message_id)",
                     "CREATE INDEX IF NOT EXISTS abandoned_by_file ON jsonl_abandoned(file_order)"):
            self.con.execute(stmt)
        self.con.execute("DELETE FROM jsonl_messages WHERE message_id BETWEEN ? AND ?", (lo, hi))
        self.con.execute("DELETE FROM jsonl_content WHERE message_id BETWEEN ? AND ?", (lo, hi))
        self.con.execute("DELETE FROM jsonl_parts WHERE message_id BETWEEN ? AND ?", (lo, hi))
        self.con.execute("DELETE FROM jsonl_abandoned WHERE file_order = ?", (order,))
        self.con.execute("DELETE FROM transcripts WHERE file_order = ?", (order,))
        self.con.execute("COMMIT")

    def query(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        """A query over the file, once every row gathered is written."""
        self.flush()
        return self.con.execute(sql, params)

    def close(self) -> None:
        self.con.close()


def file_session(t: Transcript, key_by: str, keys_by_folder: dict[Path, dict[str, str]],
                 store_keys: dict[str, str]) -> tuple[str, str | None]:
    """Where a transcript's messages land: (session id, session key). The session id is its header id (a store
    window's id), or with --key-by session-key its session key (the store's session_windows.session_key, a folder's
    sessions.json, or the doctor's legacy-store.sessions.json.imported-* beside its originals) when it has one. A file
    of a session a store holds takes the key of the store's window or archive row (`store_keys`): the same messages
    in two places land in one session, never twice."""
    key = getattr(t.origin, "session_key", None) or store_keys.get(t.header_id)
    if key is None:
        folder = t.path.parent
        if folder not in keys_by_folder:
            keys_by_folder[folder] = {**legacy_session_keys(folder), **load_session_keys(folder)}
        key = keys_by_folder[folder].get(t.header_id)
    return (key.strip() if key_by == "session-key" and key and key.strip() else t.header_id), key


def metadata(t: Transcript, m: TranscriptMessage, session_key: str | None) -> dict:
    """A message's metadata: its source and where OpenClaw keeps it: a store's window, whichever form it was read
    from (live, cold, archived), else a JSONL file and line (docs/mapping.md, "Metadata names the window")."""
    where = (t.origin.metadata() if t.origin is not None and t.origin.window_form
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


def loads(text: str | None) -> Any:
    return json.loads(text) if text else {}


def _ts_text(value) -> str | None:
    return None if value is None or isinstance(value, (dict, list)) else str(value)
