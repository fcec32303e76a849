"""OpenClaw's per-agent session store (`agents/<agentId>/agent/openclaw-agent.sqlite`, OpenClaw 2026.7.2+).

Since 2026.7.2 OpenClaw keeps each agent's transcripts in SQLite: one `transcript_events` row per JSONL line
(`event_json`, or the same line zstd-compressed in `event_zstd`), one `session_windows` row per transcript
(a window: a session id), one `session_nodes` row per session key, archives of deleted windows in
`session_transcript_archives` (docs/mapping.md, "OpenClaw's session store").

The store is read like lcm.db: through its snapshot (lcm_etl/read/openclaw/store_snapshot.py: a private copy, or the
one kept for the run's target, whose re-run counts only the windows owning a changed row), attached in DuckDB.
Columns are detected, never a schema version pinned: a store names
exactly the columns it lacks (exit 2). A window's rows become the numbered lines of a transcript
(transcripts.parse_transcript, with OpenClaw 2026.7.2+'s scan rules), numbered by their seq.

OpenClaw's materialized active path (`session_transcript_active_events`) is not what the path is read from:
it is stale wherever `session_transcript_index_state` says so (2026.8.1 left it stale after a branch). Where
it says it is fresh, the path read here is compared with it, and a difference is reported.
"""
from __future__ import annotations

import functools
import json
from lcm_etl.sqlite_runtime import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from lcm_etl import sqlite_runtime
from lcm_etl.errors import BadInput
from lcm_etl.file_identity import real_path
from lcm_etl.run_options import DEFAULT_MEMORY_LIMIT
from lcm_etl.read.openclaw.store_snapshot import WHAT, StoreSnapshot
from lcm_etl.read.openclaw.store_hidden import (ColdArchive, PendingInput, cold_archives, cold_location, cold_rows, decompress,
                                       pending_inputs, pending_message, unknown_tables)

if TYPE_CHECKING:
    import duckdb

# what a reader cannot do without: transcript_events' key and its body (event_json, or event_zstd when a row is
# compressed); the window table's columns are read where present (a missing one reads as NULL)
NEEDED = {"transcript_events": ("session_id", "seq", "event_json")}
_WINDOW_COLUMNS = ("session_key", "previous_session_id", "channel", "created_at", "display_name")
_NODE_COLUMNS = ("current_session_id", "display_name", "label", "archived_at")
_ARCHIVE_COLUMNS = ("session_id", "generation", "session_key", "reason", "encoding", "archive_blob", "archive_name",
                    "created_at", "archive_sha256")
FETCH_ROWS = 2048   # a window's rows fetched at a time (events()): any length streams through bounded memory


@dataclass(frozen=True, slots=True)   # one per window, held for the whole run: no __dict__ each
class StoreWindow:
    """One transcript of a store: a session window."""
    store: Path                       # the store as named (the original, not the snapshot)
    agent_id: str | None
    session_id: str
    session_key: str | None
    previous_session_id: str | None   # the window this one continues (a rewind's, a fork's)
    channel: str | None
    title: str | None
    current: bool                     # session_nodes.current_session_id names it
    created_at: int | None
    watermark: str | None             # transcript_rewrite_watermarks.generation: changes on an in-place rewrite
    max_seq: int
    events: int
    projection: str                   # 'fresh' / 'stale' / 'absent': OpenClaw's materialized path
    cold: str | None = None           # a cold window's storage ('file', 'sqlite'): its rows are in its archive
    record_key: str = ""              # real_path(store, session_id): where the last complete run's read is recorded

    window_form = True   # its messages' metadata names the window, not the container (run_file.metadata)

    def metadata(self) -> dict:
        """What a message of this window keeps of it: the same in every form the window is read from (live, cold,
        archived), so it never depends on when it was read (docs/mapping.md, "Metadata names the window")."""
        return {k: v for k, v in (("agent_id", self.agent_id), ("session_window", self.session_id)) if v is not None}


@dataclass(frozen=True)
class StoreArchive:
    """A reclaimed transcript kept in the store (`session_transcript_archives`)."""
    store: Path
    agent_id: str | None
    session_id: str
    session_key: str | None
    generation: str
    reason: str
    encoding: str
    name: str
    created_at: int | None
    session_alive: bool = True   # its session key still names a session (false: the session itself was deleted)
    sha256: str | None = None    # archive_sha256: the blob's, which OpenClaw records (a re-run's proof it is unchanged)


class StoreWindows:
    """A store's windows, each made as it is iterated: one SQLite query over the snapshot joins each window's counts
    (`live`, and the cold windows) with its rows of the store's other tables, looked up by their keys (a DuckDB
    join scanned those tables whole: 2.2 MB of a 2,000,000-event store's sync, whatever it read), 1,024 rows
    fetched at a time."""

    BATCH = 1024

    def __init__(self, con=None, sql: str = "", live: dict | None = None, cold=(), make: Callable | None = None):
        self._con, self._sql, self._make = con, sql, make
        live = live or {}
        self._count = len(live) + len(set(cold) - live.keys())
        if con is not None:   # the counts in the connection's temp table, not held here
            con.execute("CREATE TEMP TABLE live_windows (session_id TEXT PRIMARY KEY, max_seq INTEGER, events INTEGER)")
            con.executemany("INSERT INTO live_windows VALUES (?, ?, ?)", ((sid, *n) for sid, n in live.items()))

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[StoreWindow]:
        return self.but(())

    def but(self, skip) -> Iterator[StoreWindow]:
        """The windows but those in `skip` (window ids): none of them looked up or made."""
        if self._con is None or self._make is None:
            return
        cur = self._con.execute(self._sql, (json.dumps(sorted(skip)),))
        try:
            while rows := cur.fetchmany(self.BATCH):
                for row in rows:
                    yield self._make(row)
        finally:
            cur.close()


@dataclass
class StoreContents:
    path: Path
    user_version: int | None
    agent_id: str | None
    windows: StoreWindows = field(default_factory=StoreWindows)
    archives: list[StoreArchive] = field(default_factory=list)
    compressed: bool = False          # the store can hold zstd rows (event_zstd exists)
    cold: dict[str, ColdArchive] = field(default_factory=dict)   # window id -> its archive, for the cold windows
    pending: list[PendingInput] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)           # history that is there but cannot be read


class OpenStore:
    """A store read through its snapshot (`kept`: StoreSnapshot), attached in DuckDB as `st`. Use as a context
    manager."""

    def __init__(self, path: Path, workdir: Path, memory_limit: str = DEFAULT_MEMORY_LIMIT, keeps_records: bool = True,
                 target: Path | None = None):
        from lcm_etl import duck

        self.path, self.key = path, real_path(path)   # the store's part of its windows' record keys, resolved once
        self.kept = StoreSnapshot(path, workdir, target)
        import duckdb

        try:
            # keeps_records=False: a command that writes nothing keeps no record of the scanner's check (duck.connect)
            self.con: duckdb.DuckDBPyConnection = duck.connect(workdir, memory_limit, keeps_records)
            duck.attach_sqlite(self.con, str(self.kept.copy.path), "st")
            # the store's windows, rows and small tables are read with SQLite, by this one connection: each DuckDB
            # query of the attached store, and each other connection, read the store's schema again (14 pages of
            # OpenClaw's). Text comes as str: a line, an id that may not be UTF-8, is asked for as BLOB (bytes)
            self.lite = sqlite_runtime.connect(self.kept.copy.path, check_same_thread=False)
            self.columns = self._columns()
            self.contents = self._describe()
        except duckdb.Error as exc:
            self.close()
            raise duck.translate(exc, f"session store {path} could not be read") from None
        except sqlite3.Error as exc:   # a small table's value that is not UTF-8, a damaged page: a finding, as DuckDB's
            self.close()
            raise BadInput(f"session store {path} could not be read: {str(exc).splitlines()[0]}") from None
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "OpenStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, committed: str | None = None, settled: dict[str, tuple] | None = None) -> None:
        """`committed`: the run that read the store and committed (its kept snapshot is sealed for the next run,
        with the windows whose records it left `settled`: StoreSnapshot.close)."""
        if getattr(self, "lite", None) is not None:
            self.lite.close()
        con = getattr(self, "con", None)
        if con is not None:
            con.close()
            self.con = None   # type: ignore[assignment]
        self.kept.close(committed, settled)

    # ------------------------------------------------------------------------------------------
    # what the store holds

    def _columns(self) -> dict[str, set[str]]:
        import duckdb

        try:
            rows = self.con.execute("SELECT table_name, column_name FROM information_schema.columns "
                                    "WHERE table_catalog = 'st'").fetchall()
        except duckdb.Error as exc:
            problem = f"{WHAT} is not a readable SQLite database: {self.path}"
            raise BadInput(f"{problem} ({str(exc).splitlines()[0]})", problem) from None
        out: dict[str, set[str]] = {}
        for table, column in rows:
            out.setdefault(table, set()).add(column)
        if "transcript_events" not in out:
            what = "an OpenClaw agent database of another kind" if "schema_meta" in out else "not an OpenClaw session store"
            problem = f"{WHAT} {self.path} holds no transcript_events table"
            raise BadInput(f"{problem} ({what}); pass --sessions with an agents/<id>/agent/openclaw-agent.sqlite, an "
                           "agent folder, a state folder or a JSONL file", problem)
        for table, needed in NEEDED.items():
            missing = [c for c in needed if c not in out.get(table, set())]
            if missing:
                problem = (f"{WHAT} {self.path} (user_version {self._user_version()}) lacks "
                           f"{', '.join(f'{table}.{c}' for c in missing)}, which lcm-etl needs to read its transcripts")
                raise BadInput(f"{problem}; nothing was written", problem)
        return out

    def _user_version(self) -> int | None:
        try:
            return int(self.lite.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.Error:
            return None

    def _describe(self) -> StoreContents:
        lite, agent = self.lite, None
        if {"agent_id", "role"} <= self.columns.get("schema_meta", set()):
            row = lite.execute("SELECT agent_id FROM schema_meta ORDER BY (role = 'agent') DESC LIMIT 1").fetchone()
            agent = row[0] if row else None
        if agent is None and self.path.parent.name == "agent":
            agent = self.path.parent.parent.name   # agents/<agentId>/agent/openclaw-agent.sqlite
        contents = StoreContents(self.path, self._user_version(), agent,
                                 compressed="event_zstd" in self.columns["transcript_events"])
        contents.cold = cold_archives(lite, self.columns, self.path, contents.user_version)
        # a window made as it is asked for (StoreWindows): 10,000 windows made at once held 8 MB while they were read,
        # and left that much fragmented behind (docs/benchmarks.md, 2026-11-26 22:21)
        contents.windows = StoreWindows(lite, _windows_query(self.columns, bool(contents.cold)),
                                        self.kept.counts(self._counts), contents.cold,
                                        functools.partial(_make_window, self.path, self.key, agent))
        contents.findings += unknown_tables(self.columns, self.path, contents.user_version)
        self.cold, self.findings = contents.cold, contents.findings
        contents.archives = _store_archives(lite, self.columns, self.path, agent)
        contents.pending = pending_inputs(lite, self.columns, self.path, agent)
        return contents

    def _counts(self, windows: set[str] | None) -> dict[str, tuple[int, int]]:
        """The last seq and rows of each of `windows` (None: of every window) with rows in transcript_events."""
        if windows is None:
            rows = self.con.execute("SELECT session_id, max(seq), count(*) FROM st.transcript_events GROUP BY 1")
            return {sid: (int(m), int(n)) for sid, m, n in rows.fetchall()}
        # one query for them all, each window a range of the table's key
        counted = self.lite.execute("SELECT CAST(session_id AS BLOB), max(seq), count(*) FROM transcript_events WHERE "
                                    "session_id IN (SELECT value FROM json_each(?)) GROUP BY session_id", (json.dumps(sorted(windows)),))
        return {sid.decode("utf-8", "surrogateescape"): (int(m), int(n)) for sid, m, n in counted}

    def where(self, w: StoreWindow) -> Path:
        """What names a window's rows in reports: the store, or a cold window's archive."""
        return Path(cold_location(self.path, self.cold[w.session_id])) if w.cold else self.path

    # ------------------------------------------------------------------------------------------
    # rows

    def events(self, session_id: str, after_seq: int = -1) -> Iterator[tuple[int, bytes | None, str | None]]:
        """(seq, line bytes, None) per row of a window past `after_seq`, in seq order; (seq, None, why) for a
        row whose body cannot be decoded (it is reported as a skipped line, as an unparsable JSONL line is).

        The rows are read with SQLite from the same private snapshot DuckDB attached (as migrate copies content
        with SQLite, docs/design.md): a window is a range of transcript_events' primary key, which SQLite reads
        in key order, where a DuckDB scan of the attached table reads the whole table for each window (6.9 s of
        7 s for 100 windows of a 50,000-event store)."""
        if session_id in self.cold:
            yield from cold_rows(self.lite, self.path, session_id, self.cold[session_id], after_seq, self.findings)
            return
        zstd = "event_zstd" in self.columns["transcript_events"]
        size = "event_utf8_bytes" in self.columns["transcript_events"]
        cur = self.lite.execute(   # lines go to the parser as bytes, as a file's do
            f"SELECT seq, CAST(event_json AS BLOB), {'event_zstd' if zstd else 'NULL'}, "
            f"{'event_utf8_bytes' if size else 'NULL'} FROM transcript_events WHERE session_id = ? AND seq > ? "
            "ORDER BY seq", (session_id, after_seq))
        try:
            while True:
                rows = cur.fetchmany(FETCH_ROWS)
                if not rows:
                    return
                for seq, text, blob, n in rows:
                    if text is not None:
                        yield int(seq), text, None
                    elif blob is not None:
                        try:
                            yield int(seq), decompress(bytes(blob), n), None
                        except Exception as exc:   # zstandard's ZstdError: a damaged row is one bad line
                            yield int(seq), None, f"zstd row cannot be decoded ({type(exc).__name__})"
                    else:
                        yield int(seq), None, "row holds neither event_json nor event_zstd"
        finally:
            cur.close()

    def compressed_rows(self) -> dict[str, int]:
        """session id -> rows stored zstd-compressed."""
        if "event_zstd" not in self.columns["transcript_events"]:
            return {}
        return dict(self.con.execute("SELECT session_id, count(*) FROM st.transcript_events WHERE event_json IS NULL "
                                     "GROUP BY 1").fetchall())

    def projection(self, session_id: str) -> list[str] | None:
        """The entry ids of the messages on OpenClaw's materialized path, or None without the tables."""
        if not ({"session_id", "event_seq", "message_position"} <= self.columns.get("session_transcript_active_events", set())
                and {"session_id", "seq", "event_id"} <= self.columns.get("transcript_event_identities", set())):
            return None
        # in SQLite, through both tables' keys: a DuckDB scan of the attached tables read them whole for each window
        # (0.45 s a window of a 500,000-event store OpenClaw appends to: most of a first run)
        rows = self.lite.execute(
            "SELECT CAST(i.event_id AS BLOB) FROM session_transcript_active_events a JOIN transcript_event_identities i "
            "ON i.session_id = a.session_id AND i.seq = a.event_seq WHERE a.session_id = ? "
            "AND a.message_position IS NOT NULL ORDER BY a.active_position", (session_id,)).fetchall()
        return [r[0].decode("utf-8", "surrogateescape") if isinstance(r[0], bytes) else r[0]   # as BLOB: bytes, or NULL
                for r in rows]

    def pending_message(self, p: PendingInput) -> bytes:
        return pending_message(self.lite, p.input_id)

    def archive_blob(self, archive: StoreArchive) -> bytes:
        """By the name's unique index (DuckDB's scanner read every archive's blob for each one asked for)."""
        row = self.lite.execute("SELECT archive_blob FROM session_transcript_archives WHERE archive_name = ?",
                                (archive.name,)).fetchone()
        return bytes(row[0]) if row else b""

    def archive_text(self, archive: StoreArchive, blob: bytes | None = None) -> bytes:
        """The archive's transcript (its blob, decompressed where it is zstd); `blob` when already fetched."""
        blob = self.archive_blob(archive) if blob is None else blob
        return decompress(blob) if archive.encoding == "zstd" else blob


def _picked(have: set[str], alias: str, columns: tuple[str, ...]) -> str:
    return ", ".join(f"{alias}.{c} AS {alias}_{c}" if c in have else f"NULL AS {alias}_{c}" for c in columns)


def _windows_query(columns: dict[str, set[str]], cold_windows: bool) -> str:
    """The store's windows in read order but those named (StoreWindows: SQLite, over the snapshot): each window with
    rows (`live_windows`: its last seq and rows) or a cold one, with what the store's other tables say of it."""
    has = columns.get
    windows = "session_windows" in columns and "session_id" in has("session_windows", set())
    nodes = "session_nodes" in columns and "session_key" in has("session_nodes", set())
    marks = {"session_id", "generation"} <= has("transcript_rewrite_watermarks", set())
    index = {"session_id", "indexed_seq", "needs_rebuild"} <= has("session_transcript_index_state", set())
    # a cold window has no rows left in transcript_events: its archive row says how many it had, and to what seq
    cold = ("UNION ALL SELECT session_id, last_seq, event_count, storage FROM session_transcript_cold_archives "
            "WHERE session_id NOT IN (SELECT session_id FROM live_windows)") if cold_windows else ""
    return f"""
        WITH ev AS (SELECT session_id, max_seq, events, NULL AS cold FROM live_windows
                    WHERE session_id NOT IN (SELECT value FROM json_each(?)) {cold})
        SELECT ev.session_id, ev.max_seq, ev.events, ev.cold,
               {_picked(has("session_windows", set()) if windows else set(), "w", _WINDOW_COLUMNS)},
               {_picked(has("session_nodes", set()) if windows and nodes else set(), "n", _NODE_COLUMNS)},
               {"m.generation" if marks else "NULL"} AS watermark,
               {"CASE WHEN x.session_id IS NULL THEN 'absent' WHEN x.needs_rebuild = 0 AND x.indexed_seq >= ev.max_seq "
                "THEN 'fresh' ELSE 'stale' END" if index else "'absent'"} AS projection
        FROM ev
        {"LEFT JOIN session_windows w ON w.session_id = ev.session_id" if windows else ""}
        {"LEFT JOIN session_nodes n ON n.session_key = w.session_key" if windows and nodes else ""}
        {"LEFT JOIN transcript_rewrite_watermarks m ON m.session_id = ev.session_id" if marks else ""}
        {"LEFT JOIN session_transcript_index_state x ON x.session_id = ev.session_id" if index else ""}
        ORDER BY w_created_at NULLS LAST, ev.session_id"""


def _make_window(path: Path, key: str, agent: str | None, r: tuple) -> StoreWindow:
    """A row of the windows' query (_windows_query) as a StoreWindow of the store at `path` (`key`: its real path)."""
    sid, max_seq, events, cold = r[0], r[1], r[2], r[3]
    w = dict(zip(_WINDOW_COLUMNS, r[4:4 + len(_WINDOW_COLUMNS)]))
    n = dict(zip(_NODE_COLUMNS, r[4 + len(_WINDOW_COLUMNS):4 + len(_WINDOW_COLUMNS) + len(_NODE_COLUMNS)]))
    watermark, projection = r[-2], r[-1]
    return StoreWindow(
        store=path, agent_id=agent, session_id=sid, session_key=w["session_key"],
        previous_session_id=w["previous_session_id"], channel=w["channel"],
        title=n["display_name"] or n["label"] or w["display_name"],
        current=n["current_session_id"] == sid, created_at=w["created_at"], watermark=watermark,
        max_seq=int(max_seq), events=int(events), projection="cold" if cold else projection, cold=cold,
        record_key=f"{key}#{sid}")


def _store_archives(con, columns: dict[str, set[str]], path: Path, agent: str | None) -> list[StoreArchive]:
    have = columns.get("session_transcript_archives", set())
    if not {"session_id", "archive_blob", "archive_name"} <= have:
        return []
    cols = [c for c in _ARCHIVE_COLUMNS if c != "archive_blob"]
    picked = ", ".join(f"a.{c}" if c in have else f"NULL AS {c}" for c in cols)
    # a session deleted on purpose has no node left under its key; an evicted or reset window's node lives on
    nodes = "session_key" in columns.get("session_nodes", set()) and "session_key" in have
    alive = ("a.session_key IN (SELECT session_key FROM session_nodes)" if nodes else "true")
    order = "a.created_at NULLS LAST, a.archive_name" if "created_at" in have else "a.archive_name"
    rows = con.execute(f"SELECT {picked}, {alive} FROM session_transcript_archives a ORDER BY {order}").fetchall()
    return [StoreArchive(path, agent, r["session_id"], r["session_key"], r["generation"] or "",
                         r["reason"] or "", r["encoding"] or "identity", r["archive_name"], r["created_at"],
                         session_alive=bool(row[-1]), sha256=r["archive_sha256"])
            for row in rows for r in (dict(zip(cols, row)),)]
