"""What `reconcile` makes of read transcripts: identity rows for the DuckDB plan, content rows for the stage.

The plan needs identities only (session, entry id, role, identity hash, order, token count), so only
those go to DuckDB, as Arrow tables with declared column types. Content, metadata and part payloads go
from Python straight into the stage file (SQLite), and only for the messages the plan decided to write:
a value of any size never passes through DuckDB's memory budget.

message_id = file_order << 32 | path_index: the position of a message among the transcripts read.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import orjson

from lcm_etl.sqlite_runtime import private_file
from lcm_etl.read.transcript_blocks import js_stringify
from lcm_etl.read.openclaw_state import legacy_session_keys
from lcm_etl.read.openclaw_store import StoreWindow
from lcm_etl.read.transcript_files import load_session_keys
from lcm_etl.read.transcripts import Transcript, TranscriptMessage

# Declared, not inferred from the data: a column with no value at all (an empty file, a header-only
# file, v1 files without entry ids) would be typed NULL or INTEGER and fail to bind in the plan.
MESSAGE_COLUMNS = {"message_id": "int", "file_order": "int", "path_index": "int", "file": "str", "session_id": "str",
                   "entry_id": "str", "role": "str", "token_count": "int", "identity_hash": "str",
                   "created_iso": "str", "inner_ts": "str"}
PART_COLUMNS = {"message_id": "int", "ordinal": "int"}
ABANDONED_COLUMNS = {"session_id": "str", "entry_id": "str", "role": "str", "inner_ts": "str"}


@dataclass
class FileSession:
    session_id: str            # where the file's messages land
    session_key: str | None    # from the folder's sessions.json, kept in metadata


def file_sessions(transcripts: list[Transcript], key_by: str) -> list[FileSession]:
    """Where each transcript's messages land: its session id (a file's header id, a store window's id), or with
    --key-by session-key its session key (the store's session_windows.session_key, a folder's sessions.json, or
    the doctor's legacy-store.sessions.json.imported-* beside its originals) when it has one."""
    keys_by_folder: dict[Path, dict[str, str]] = {}
    out = []
    for t in transcripts:
        key = getattr(t.origin, "session_key", None)
        if key is None:
            folder = t.path.parent
            if folder not in keys_by_folder:
                keys_by_folder[folder] = {**legacy_session_keys(folder), **load_session_keys(folder)}
            key = keys_by_folder[folder].get(t.header_id)
        out.append(FileSession(key.strip() if key_by == "session-key" and key and key.strip() else t.header_id, key))
    return out


def arrow_tables(transcripts: list[Transcript], sessions: list[FileSession], fallback_time: str):
    """(messages, parts, abandoned) as Arrow tables: one row per active-path message, per part, per
    message off the path."""
    import pyarrow as pa   # here, not at the top: `audit` imports this module and rarely reads transcripts (28 MB)

    m_cols: dict[str, list] = {k: [] for k in MESSAGE_COLUMNS}
    p_cols: dict[str, list] = {k: [] for k in PART_COLUMNS}
    a_cols: dict[str, list] = {k: [] for k in ABANDONED_COLUMNS}
    for order, (t, s) in enumerate(zip(transcripts, sessions)):
        for i, m in enumerate(t.messages):
            mid = (order << 32) | i
            for k, v in (("message_id", mid), ("file_order", order), ("path_index", i), ("file", str(t.path)),
                         ("session_id", s.session_id), ("entry_id", m.entry_id), ("role", m.role),
                         ("token_count", m.token_count), ("identity_hash", m.identity_hash),
                         ("created_iso", m.created_at or fallback_time), ("inner_ts", _ts_text(m.inner_timestamp))):
                m_cols[k].append(v)
            for part in m.parts:
                p_cols["message_id"].append(mid)
                p_cols["ordinal"].append(part["ordinal"])
        for entry_id, role, inner in t.abandoned:
            for k, v in (("session_id", s.session_id), ("entry_id", entry_id), ("role", role),
                         ("inner_ts", _ts_text(inner))):
                a_cols[k].append(v)
    return tuple(pa.table(cols, schema=pa.schema([(n, pa.int64() if kind == "int" else pa.string())
                                                  for n, kind in spec.items()]))
                 for cols, spec in ((m_cols, MESSAGE_COLUMNS), (p_cols, PART_COLUMNS), (a_cols, ABANDONED_COLUMNS)))


def stage_content(path: Path, transcripts: list[Transcript], sessions: list[FileSession], message_ids) -> None:
    """Create the stage file with the content, metadata and parts of the given messages (the stage's
    plan_parts and jsonl_content tables, read by r80 and r72)."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        private_file(con, cache_kib=2048)
        con.execute("CREATE TABLE jsonl_content (message_id INTEGER PRIMARY KEY, content TEXT NOT NULL, metadata TEXT)")
        con.execute("CREATE TABLE plan_parts (message_id INTEGER, ordinal INTEGER, kind TEXT, payload TEXT, "
                    "tool_name TEXT, file_path TEXT, created_at TEXT)")
        con.execute("BEGIN")
        occurrence = identity_occurrences(transcripts, sessions)
        for mid in sorted(message_ids):
            order, index = mid >> 32, mid & 0xFFFFFFFF
            t = transcripts[order]
            m = t.messages[index]
            meta = _metadata(t, m, sessions[order].session_key)
            if m.entry_id is None:
                meta["identity_occurrence"] = occurrence[mid]
            con.execute("INSERT INTO jsonl_content VALUES (?, ?, ?)", (mid, m.content, _dumps(meta)))
            con.executemany("INSERT INTO plan_parts VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [(mid, p["ordinal"], p["kind"], _dumps(p["payload"]), p["tool_name"], p["file_path"],
                              p["created_at"]) for p in m.parts])
        con.execute("COMMIT")
    finally:
        con.close()


def identity_occurrences(transcripts: list[Transcript], sessions: list[FileSession]) -> dict[int, int]:
    """message_id -> k: the message is the k-th of its identity on its session's path (files in the order
    read). Kept in the metadata of a row without an entry id (v1 files): lossless-claw's backfill of the same
    file stores the same messages in the same order, so `migrate` can tell the k-th copy of a repeated message
    (a delivery mirror repeats the reply it follows, in the same second) from the others
    (transforms/20_turn_index.sql)."""
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for order, (t, s) in enumerate(zip(transcripts, sessions)):
        for i, m in enumerate(t.messages):
            key = (s.session_id, m.identity_hash)
            seen[key] = seen.get(key, 0) + 1
            out[(order << 32) | i] = seen[key]
    return out


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


def _dumps(value) -> str:
    """orjson when it can (fast); the JS-compatible writer for what orjson refuses (lone surrogates,
    integers beyond 64 bits), which it writes as JSON.stringify would."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:   # orjson.JSONEncodeError is a TypeError
        return js_stringify(value)


def _ts_text(value) -> str | None:
    return None if value is None or isinstance(value, (dict, list)) else str(value)
