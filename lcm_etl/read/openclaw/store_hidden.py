"""The history a session store keeps outside its live `transcript_events` rows (OpenClaw 2026.9+), and the tables it
does not know (docs/mapping.md, "Everything OpenClaw holds").

- A **cold window** (`session_transcript_cold_archives`): OpenClaw's cold-storage pass moved the window's rows into
  one zstd file in the agent's `sessions/cold/` (storage 'file'), or a restored backup holds the same bytes as a blob
  (storage 'sqlite'). Its `event` records are the window's rows with their original seqs: openclaw_store.OpenStore
  reads a cold window through them as it reads a live one.
- A **pending input** (`session_pending_inputs`): a user message the gateway accepted and never wrote to its window
  (a crash between the two); store_reads.read_pending makes it a one-message transcript.
- A table a newer release added that holds session rows: a **finding**, never passed over without a word.

What cannot be read (a cold archive missing or failing verification, an unknown table) is a finding
(lcm_etl/read/findings.py), which reconcile reports as a warning and audit as a difference.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson

from lcm_etl.errors import BadInput
from lcm_etl.read.findings import Unreadable, finding, read_regular

# Every table of OpenClaw's agent database up to schema 23 (2026.9.6): the four that hold conversation history are
# read (transcript_events, session_transcript_archives, session_transcript_cold_archives, session_pending_inputs),
# the rest are its bookkeeping.
KNOWN_TABLES = frozenset((
    "acp_parent_stream_events", "auth_profile_state", "auth_profile_store", "board_tabs", "board_widgets",
    "cache_entries", "context_engine_turn_outbox", "conversation_deliveries", "conversations", "heartbeat_outcomes",
    "memory_embedding_cache", "memory_entry_origins", "memory_index_chunk_provenance",
    "memory_index_chunk_recall_metadata", "memory_index_chunks", "memory_index_meta", "memory_index_sources",
    "memory_index_state", "memory_session_tombstones", "message_tool_run_outcomes", "schema_meta",
    "session_canonical_validation_pending", "session_conversations", "session_goal_operations",
    "session_input_completions", "session_key_contract", "session_members", "session_nodes", "session_participants",
    "session_pending_inputs", "session_progress_cards", "session_suggestions", "session_transcript_active_events",
    "session_transcript_archives", "session_transcript_cold_archives", "session_transcript_fts",
    "session_transcript_fts_rows", "session_transcript_index_state", "session_windows", "standing_intents",
    "standing_intents_fts", "trajectory_runtime_events", "transcript_event_identities", "transcript_events",
    "transcript_rewrite_watermarks"))
_FTS_SHADOWS = ("_config", "_content", "_data", "_docsize", "_idx")
_FTS = frozenset(t for t in KNOWN_TABLES if t.endswith("_fts"))   # only these have shadow tables
# a column that ties a table's rows to sessions or messages (spelt in any case, with or without '_': sessionId,
# msg_id): an unknown table with one may hold history
_HOLDS_HISTORY = frozenset(("sessionid", "sessionkey", "conversationid", "messageid", "msgid", "eventjson",
                            "messagejson", "eventid"))
_COLD_COLUMNS = ("session_id", "archive_name", "archive_sha256", "archive_bytes", "event_count", "last_seq", "storage")
_PENDING_COLUMNS = ("input_id", "session_id", "session_key", "idempotency_key", "state", "accepted_at")


@dataclass(frozen=True)
class ColdArchive:
    """A cold window's archive: its name (`<sha256>.jsonl.zst`), the SHA-256 and length OpenClaw verifies, where."""
    name: str
    sha256: str
    size: int
    storage: str
    event_count: int = 0
    last_seq: int = -1
    raw_bytes: int | None = None   # its events' JSON joined: bounds what the archive may inflate to

    def inflate_limit(self) -> int | None:
        """What the archive may inflate to: its events' JSON, and for each event its identity, active and full-text
        records (OpenClaw's codec); None without raw_bytes (decompress's general bound)."""
        return None if self.raw_bytes is None else 4 * self.raw_bytes + 1024 * self.event_count + (64 << 10)


@dataclass(frozen=True)
class PendingInput:
    """A `session_pending_inputs` row no transcript entry holds."""
    store: Path
    agent_id: str | None
    input_id: str
    session_id: str
    session_key: str | None
    idempotency_key: str | None
    state: str | None
    accepted_at: int | None


# A transcript's JSONL compresses 5-10 times at OpenClaw's level 1: a frame whose row declares no length may
# inflate to 64 times its own bytes (and 64 MiB), never more (a 133 KB frame can inflate to 4 GiB)
INFLATE_RATIO, INFLATE_FLOOR = 64, 64 << 20
_FEED = 256   # bytes fed at a time: a block of 4 bytes can inflate to 128 KiB, so a feed inflates to 8 MiB at most


def inflate_cap(blob: bytes) -> int:
    return INFLATE_FLOOR + INFLATE_RATIO * len(blob)


def decompress(blob: bytes, limit: int | None = None) -> bytes:
    """One standard zstd frame (OpenClaw writes level 1, checksum on, no dictionary) read to its end, inflating to
    at most `limit` bytes (what its row declares; none: inflate_cap). Unreadable (findings.py) when it is not
    zstd, damaged, cut short, followed by other bytes or inflates past the limit: never read as less than it holds."""
    import zstandard

    limit = inflate_cap(blob) if limit is None else limit
    d = zstandard.ZstdDecompressor().decompressobj()
    out = bytearray()
    view = memoryview(blob)
    at = 0
    try:
        declared = zstandard.frame_content_size(blob)
        if declared > limit:
            raise Unreadable(f"its zstd frame declares {declared} bytes inflated, past the {limit} allowed: not read")
        while at < len(blob) and not d.eof:
            out += d.decompress(view[at:at + _FEED])
            at += _FEED
            if len(out) > limit:
                raise Unreadable(f"inflates past the {limit} bytes allowed: not read")
    except zstandard.ZstdError as exc:
        raise Unreadable(f"not a readable zstd frame ({exc})") from None
    if not d.eof:
        raise Unreadable(f"cut short: its zstd frame does not end in its {len(blob)} bytes")
    if d.unused_data or at < len(blob):
        raise Unreadable("bytes follow its zstd frame")
    return bytes(out)


def unknown_tables(columns: dict[str, set[str]], store: Path, user_version: int | None) -> list[dict]:
    """Findings for the tables a newer OpenClaw added that hold session or message rows: lcm-etl cannot say whether
    they hold history it should bring, so it says it does not read them."""
    out = []
    for table, cols in sorted(columns.items()):
        known = (table in KNOWN_TABLES or table.startswith("sqlite_")
                 or table.endswith(_FTS_SHADOWS) and table.rpartition("_")[0] in _FTS)
        held = sorted(c for c in cols if c.replace("_", "").lower() in _HOLDS_HISTORY)
        if not known and held:
            out.append(finding("session store table", f"{store}#{table}", "unknown, holds session rows: not read",
                               detail=f"columns {', '.join(held)}; a newer OpenClaw's "
                                      f"(user_version {user_version}): lcm-etl does not know it"))
    return out


def cold_archives(con, columns: dict[str, set[str]], store: Path, user_version: int | None) -> dict[str, ColdArchive]:
    """window id -> its cold archive (`con`: SQLite over the store's snapshot)."""
    have = columns.get("session_transcript_cold_archives", set())
    if not have:
        return {}
    missing = [c for c in _COLD_COLUMNS if c not in have]
    if missing:   # a newer layout: its cold windows cannot be read, and that is said, never passed over
        problem = (f"session store {store} (user_version {user_version}) lacks "
                   f"{', '.join(f'session_transcript_cold_archives.{c}' for c in missing)}, which lcm-etl needs to "
                   "read its cold windows")
        raise BadInput(f"{problem}; nothing was written", problem)
    raw = "raw_bytes" if "raw_bytes" in have else "NULL"
    rows = con.execute("SELECT session_id, archive_name, archive_sha256, archive_bytes, storage, event_count, "
                       f"last_seq, {raw} FROM session_transcript_cold_archives").fetchall()
    return {r[0]: ColdArchive(r[1], r[2], int(r[3]), r[4], int(r[5]), int(r[6]), None if r[7] is None else int(r[7]))
            for r in rows}


def cold_location(store: Path, c: ColdArchive) -> str:
    """Where a cold archive's bytes are: its file in the agent's `sessions/cold/`, or the store's blob."""
    if c.storage != "file":
        return f"{store}#session_transcript_cold_archives/{c.name}"
    # OpenClaw's `<session artifact dir>/cold/`: agents/<id>/sessions/cold/ beside agents/<id>/agent/
    for folder in (store.parent.parent / "sessions", store.parent / "sessions"):
        if os.path.lexists(folder / "cold" / c.name):   # False where it cannot be looked at: the read says why
            return str(folder / "cold" / c.name)
    return str(store.parent.parent / "sessions" / "cold" / c.name)


def cold_rows(con, store: Path, session_id: str, c: ColdArchive, after_seq: int,
              findings: list[dict]) -> Iterator[tuple[int, bytes | None, str | None]]:
    """A cold window's rows past `after_seq`, as OpenStore.events yields a live window's: from its archive verified as
    OpenClaw verifies it (`readVerifiedSessionColdArchive`: the length and SHA-256 its row records), its `event`
    records in seq order, checked against its header and the count and last seq its row records. An archive
    missing, not a regular file, failing verification or undecodable is a finding, and the window reads as one
    unreadable row, never as empty; one that holds fewer events than its row says is a finding too, its events read
    and then one unreadable row (the window is then not recorded: a later run reads it whole again)."""
    where = cold_location(store, c)
    rows: list[tuple[int, bytes]] = []
    got, short = _verified(con, where, session_id, c), None
    problem: str | None = got if isinstance(got, str) else None
    if isinstance(got, bytes):
        try:
            header, events, last = None, 0, -1
            for line in decompress(got, c.inflate_limit()).split(b"\n"):
                record = orjson.loads(line) if line.strip() else None
                kind = record.get("kind") if isinstance(record, dict) else None
                if record is None or kind is None:
                    continue
                if kind == "header":
                    header = record
                elif kind == "event":
                    seq = int(record["row"]["seq"])
                    events, last = events + 1, max(last, seq)
                    if seq > after_seq:
                        rows.append((seq, record["row"]["event_json"].encode()))
            problem = None
            if header is None or header.get("sessionId") != session_id:
                problem = (f"verified but its header names window {header.get('sessionId')!r}" if header
                           else "verified but holds no header record")
            elif (events, last) != (c.event_count, c.last_seq):
                short = (f"holds {events} event records up to seq {last}, its row records {c.event_count} up to "
                         f"seq {c.last_seq}")
        except Unreadable as exc:
            problem = f"verified but {exc.problem}"
        except Exception as exc:   # orjson's JSONDecodeError, a record of another shape
            problem = f"verified but undecodable ({type(exc).__name__}: {exc})"
    if problem is not None:
        findings.append(finding("cold archive", where, problem, session_id,
                                "OpenClaw refuses it too: restore it from a backup"))
        yield -1, None, f"cold archive {where} {problem}"
        return
    for seq, raw in sorted(rows):
        yield seq, raw, None
    if short is not None:
        findings.append(finding("cold archive", where, short, session_id,
                                "its events are read; the window is read whole again by the next run"))
        yield c.last_seq, None, f"cold archive {where} {short}"


def _verified(con, where: str, session_id: str, c: ColdArchive) -> bytes | str:
    """A cold archive's bytes when they are what its row records (length and SHA-256), else why not."""
    try:
        if c.storage == "file":
            data = read_regular(Path(where), limit=c.size)
        else:
            row = con.execute("SELECT archive_blob FROM session_transcript_cold_archives WHERE session_id = ?",
                              (session_id,)).fetchone()   # SQLite, by the key
            data = bytes(row[0]) if row and row[0] is not None else b""
    except Unreadable as exc:
        if exc.larger:
            return f"failed verification (more than {c.size} bytes, {c.size} recorded)"
        return f"missing or unreadable ({exc.reason})" if exc.reason else exc.problem
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != c.size or digest != c.sha256:
        return (f"failed verification ({len(data)} bytes, {c.size} recorded; SHA-256 "
                f"{'matches' if digest == c.sha256 else 'differs'})")
    return data


def pending_message(lite, input_id: str) -> bytes:
    """A pending input's message_json as bytes, read by SQLite (`lite`): a value of any size stays out of DuckDB's
    memory budget (a 100 MB message through it ran out of the default 96 MB)."""
    row = lite.execute("SELECT CAST(message_json AS BLOB) FROM session_pending_inputs WHERE input_id = ?",
                       (input_id,)).fetchone()
    return bytes(row[0]) if row and row[0] is not None else b""


def pending_inputs(con, columns: dict[str, set[str]], store: Path, agent: str | None) -> list[PendingInput]:
    """The inputs no transcript entry holds: not consumed, and no event of their window carries their idempotency key
    (OpenClaw writes the input as the turn runs, then deletes the row: a read between the two sees both). Every state
    counts: 'queued', 'interrupted' (a restarted gateway's mark) and 'cancelled' rows are each the only copy of what
    the user sent. Their message_json is read when each is (store_reads.read_pending): one that is not a message is
    a finding then."""
    have = columns.get("session_pending_inputs", set())
    if not {"input_id", "session_id", "message_json"} <= have:
        return []
    pick = ", ".join(f"p.{c}" if c in have else "NULL" for c in _PENDING_COLUMNS)
    conds = ["p.consumed_event_id IS NULL"] if "consumed_event_id" in have else []
    if "idempotency_key" in have and {"session_id", "message_idempotency_key"} <= columns.get(
            "transcript_event_identities", set()):
        conds.append("NOT EXISTS (SELECT 1 FROM transcript_event_identities i WHERE i.session_id = p.session_id "
                     "AND i.message_idempotency_key = p.idempotency_key)")   # SQLite: by OpenClaw's index of the key
    order = "p.seq" if "seq" in have else "p.accepted_at" if "accepted_at" in have else "p.input_id"
    rows = con.execute(f"SELECT {pick} FROM session_pending_inputs p "
                       f"{'WHERE ' + ' AND '.join(conds) if conds else ''} ORDER BY {order} NULLS LAST").fetchall()
    return [PendingInput(store, agent, *r) for r in rows]
