"""OpenClaw's SQLite session store in tests: copies of the fixtures (fixtures/openclaw-sqlite/, written by OpenClaw
2026.9.6's own code), their expected active paths, and a writer that changes a store the way the gateway does.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import uuid
from datetime import datetime, timezone
from pathlib import Path

import zstandard

from conftest import ROOT

STORE_FIXTURES = ROOT / "fixtures" / "openclaw-sqlite"
EXPECTED = STORE_FIXTURES / "expected"
STORE = Path("agent") / "openclaw-agent.sqlite"
ROLES = {"toolResult": "tool"}


def state_copy(which: str, into: Path) -> Path:
    """A writable copy of fixtures/openclaw-sqlite/<which> (native or imported): an OpenClaw state folder."""
    shutil.copytree(STORE_FIXTURES / which, into)
    for p in into.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return into


def expected(which: str | None = None, source: str = "transcript_events") -> list[dict]:
    out = []
    for f in sorted(EXPECTED.glob("*.json")):
        e = json.loads(f.read_text())
        if f.name.startswith(f"{which}.") if which else True:
            if source is None or e["source"] == source:
                out.append({**e, "set": f.name.split(".")[0]})
    return out


def store_of(state: Path, agent: str) -> Path:
    return state / "agents" / agent / STORE


def event(store: Path, session_id: str, entry_id: str) -> dict:
    """The transcript line of an entry, read with sqlite3 and zstandard (not lcm-etl's reader)."""
    con = sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True)
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(transcript_events)")}
        body = "event_json, event_zstd" if "event_zstd" in cols else "event_json, NULL"
        for text, blob in con.execute(f"SELECT {body} FROM transcript_events WHERE session_id = ?", (session_id,)):
            line = text if text is not None else zstandard.ZstdDecompressor().decompress(blob).decode()
            e = json.loads(line)
            if e.get("id") == entry_id:
                return e
    finally:
        con.close()
    raise KeyError(entry_id)


def js_message_sha256(message: dict) -> str:
    """SHA-256 of JSON.stringify(message): compact, keys in stored order, no ASCII escaping."""
    from lcm_etl.read.transcript.transcript_blocks import js_stringify

    return hashlib.sha256(js_stringify(message).encode("utf-8", "surrogatepass")).hexdigest()


def session_entries(target: Path, session_id: str) -> list[tuple[str, str, str]]:
    """(entry id, role, content) of a target session's messages, in turn order."""
    con = sqlite3.connect(target)
    try:
        return [tuple(r) for r in con.execute(
            "SELECT json_extract(metadata, '$.transcript_entry_id'), role, content FROM lcm_messages "
            "WHERE session_id = ? ORDER BY turn_index", (session_id,))]
    finally:
        con.close()


class StoreWriter:
    """Changes a store as OpenClaw's gateway does: appends events to a window (a WAL commit each), and rewrites one
    in place (same seq and id, new text) with a new rewrite watermark. Holds its connection open, as the gateway
    does, so its commits stay in the -wal."""

    def __init__(self, store: Path):
        self.con = sqlite3.connect(store, isolation_level=None)
        # OpenClaw's CHECKs call octet_length(), which SQLite has since 3.43; Python's sqlite3 may be older
        self.con.create_function("octet_length", 1, octet_length, deterministic=True)
        self.con.execute("PRAGMA wal_autocheckpoint=0")

    def close(self) -> None:
        self.con.close()

    def tip(self, session_id: str) -> tuple[int, str]:
        seq, line = self.con.execute("SELECT seq, event_json FROM transcript_events WHERE session_id = ? "
                                     "AND event_json IS NOT NULL ORDER BY seq DESC LIMIT 1", (session_id,)).fetchone()
        return seq, json.loads(line)["id"]

    def append(self, session_id: str, texts: list[str]) -> list[str]:
        """One user/assistant message per text, each a child of the last; returns their ids."""
        seq, parent = self.tip(session_id)
        ids = []
        self.con.execute("BEGIN IMMEDIATE")
        for i, text in enumerate(texts):
            eid = str(uuid.uuid4())
            role = "user" if i % 2 == 0 else "assistant"
            content = text if role == "user" else [{"type": "text", "text": text}]
            line = json.dumps({"type": "message", "id": eid, "parentId": parent,
                               "timestamp": "2026-11-20T10:00:00.000Z",
                               "message": {"role": role, "content": content, "timestamp": 1795000000000 + seq}},
                              separators=(",", ":"), ensure_ascii=False)
            seq += 1
            self.con.execute("INSERT INTO transcript_events (session_id, seq, event_json, created_at) "
                             "VALUES (?, ?, ?, ?)", (session_id, seq, line, 1795000000000 + seq))
            parent = eid
            ids.append(eid)
        self.con.execute("COMMIT")
        return ids

    def write(self, session_id: str, messages: list[dict], parent: str | None = None) -> list[str]:
        """Message entries as SessionManager.appendMessage writes them (a random UUID, the envelope's ISO timestamp,
        the message's in ms), each a child of the last: the first a child of the window's last entry, or, after
        `branch(parent)`, of `parent` (OpenClaw writes no entry for the branch itself). Returns their ids."""
        seq, tip = self.tip(session_id)
        parent = parent or tip
        ids = []
        self.con.execute("BEGIN IMMEDIATE")
        for message in messages:
            seq += 1
            eid, ms = str(uuid.uuid4()), 1795000000000 + 1000 * seq
            stamp = datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            line = json.dumps({"type": "message", "id": eid, "parentId": parent, "timestamp": stamp,
                               "message": {**message, "timestamp": ms}}, separators=(",", ":"), ensure_ascii=False)
            self.con.execute("INSERT INTO transcript_events (session_id, seq, event_json, created_at) "
                             "VALUES (?, ?, ?, ?)", (session_id, seq, line, ms))
            parent = eid
            ids.append(eid)
        self.con.execute("COMMIT")
        return ids

    def rewrite(self, session_id: str, entry_id: str, old: str, new: str) -> None:
        """OpenClaw's doctor-style rewrite: the row keeps its seq and id, its text changes, the watermark moves."""
        self.con.execute("BEGIN IMMEDIATE")
        for seq, line in self.con.execute("SELECT seq, event_json FROM transcript_events WHERE session_id = ? "
                                          "AND event_json IS NOT NULL", (session_id,)).fetchall():
            if json.loads(line).get("id") == entry_id:
                self.con.execute("UPDATE transcript_events SET event_json = ? WHERE session_id = ? AND seq = ?",
                                 (line.replace(old, new), session_id, seq))
        self.con.execute("INSERT OR REPLACE INTO transcript_rewrite_watermarks (session_id, generation, updated_at) "
                         "VALUES (?, ?, 1795000000000)", (session_id, uuid.uuid4().hex))
        self.con.execute("COMMIT")


def octet_length(value):
    return None if value is None else len(value.encode("utf-8") if isinstance(value, str) else value)


def make_schema_19(store: Path) -> None:
    """Turn a schema-23 store into the shape OpenClaw 2026.8.1 wrote (user_version 19): transcript_events without
    the compressed columns (each zstd row decoded into event_json), and a stale materialized path
    (needs_rebuild = 1, the projection's rows of every window cut to its first half), as 2026.8.1 left it after
    a branch."""
    con = sqlite3.connect(store, isolation_level=None)
    try:
        rows = con.execute("SELECT session_id, seq, event_json, event_zstd, created_at FROM transcript_events").fetchall()
        con.execute("PRAGMA foreign_keys=OFF")
        con.execute("BEGIN")
        con.execute("ALTER TABLE transcript_events RENAME TO transcript_events_23")
        con.execute("CREATE TABLE transcript_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
                    "event_json TEXT NOT NULL, created_at INTEGER NOT NULL, PRIMARY KEY (session_id, seq))")
        con.executemany("INSERT INTO transcript_events VALUES (?, ?, ?, ?)",
                        [(s, q, j if j is not None else zstandard.ZstdDecompressor().decompress(z).decode(), c)
                         for s, q, j, z, c in rows])
        con.execute("DROP TABLE transcript_events_23")
        con.execute("DROP TABLE IF EXISTS session_transcript_cold_archives")
        con.execute("UPDATE session_transcript_index_state SET needs_rebuild = 1, indexed_seq = indexed_seq - 3")
        con.execute("DELETE FROM session_transcript_active_events WHERE active_position * 2 > "
                    "(SELECT max(active_position) FROM session_transcript_active_events a "
                    " WHERE a.session_id = session_transcript_active_events.session_id)")
        con.execute("UPDATE schema_meta SET schema_version = 19")
        con.execute("COMMIT")
        con.execute("PRAGMA user_version = 19")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
