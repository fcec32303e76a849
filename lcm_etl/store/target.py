"""The Remnic LCM target: its schema, opening it safely, and the lcm-etl tables beside Remnic's.

The schema is Remnic's LCM schema version 2 as Remnic's `applySchema` creates it (its DDL
is written out in tests/conftest.py, REMNIC_DDL): created when lcm_meta is absent, the idempotent batch re-run when schema_version < 2, nothing when
it is 2. lcm-etl adds its own `lcm_etl_*` tables (ledger and provenance); Remnic ignores them.
"""
from __future__ import annotations

import os
from lcm_etl.sqlite_runtime import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lcm_etl import sqlite_runtime
from lcm_etl.store import ledger
from lcm_etl.errors import BadInput, RunFailed
from lcm_etl.read.snapshot.sqlite_copy import SQLITE_HEADER, Snapshot, take_snapshot


@dataclass(frozen=True)
class RemnicTable:
    """One of Remnic's tables lcm-etl writes (REMNIC_SCHEMA creates them)."""
    name: str
    rows: str             # what the reports call its rows (undo, provenance.committed)
    ranged: bool          # its AUTOINCREMENT id: a run's rows are id ranges (lcm_etl/store/provenance.py)
    # its rows of a set of sessions (temp.scope), by its own session_id or through its message's, for the
    # small copy a sync re-run reads (lcm_etl/read/lcmdb/subset.py; lcm_messages is copied first)
    scope_rows: str


_OF_SESSION = "session_id IN (SELECT session_id FROM temp.scope)"
# the target's tables, named once: every other list of them reads this one
REMNIC_TABLES = (
    RemnicTable("lcm_messages", "messages", True, _OF_SESSION),
    RemnicTable("lcm_message_parts", "parts", True, "message_id IN (SELECT id FROM main.lcm_messages)"),
    RemnicTable("lcm_summary_nodes", "summaries", False, _OF_SESSION),
    RemnicTable("lcm_compaction_events", "boundary_events", True, _OF_SESSION),
)
REMNIC_TABLE_NAMES = tuple(t.name for t in REMNIC_TABLES)

REMNIC_SCHEMA = """
CREATE TABLE IF NOT EXISTS lcm_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lcm_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
  turn_index INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, token_count INTEGER NOT NULL,
  created_at TEXT NOT NULL, metadata TEXT);
CREATE INDEX IF NOT EXISTS idx_lcm_messages_session ON lcm_messages(session_id, turn_index);
CREATE TABLE IF NOT EXISTS lcm_message_parts (id INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id INTEGER NOT NULL REFERENCES lcm_messages(id) ON DELETE CASCADE, ordinal INTEGER NOT NULL,
  kind TEXT NOT NULL, payload TEXT NOT NULL, tool_name TEXT, file_path TEXT, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS idx_lcm_message_parts_msg ON lcm_message_parts(message_id, ordinal);
CREATE INDEX IF NOT EXISTS idx_lcm_message_parts_tool ON lcm_message_parts(tool_name);
CREATE INDEX IF NOT EXISTS idx_lcm_message_parts_file ON lcm_message_parts(file_path);
CREATE TABLE IF NOT EXISTS lcm_summary_nodes (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
  depth INTEGER NOT NULL, parent_id TEXT, summary_text TEXT NOT NULL, token_count INTEGER NOT NULL,
  msg_start INTEGER NOT NULL, msg_end INTEGER NOT NULL, escalation INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL, FOREIGN KEY (parent_id) REFERENCES lcm_summary_nodes(id));
CREATE INDEX IF NOT EXISTS idx_lcm_summary_session ON lcm_summary_nodes(session_id, depth);
CREATE INDEX IF NOT EXISTS idx_lcm_summary_range ON lcm_summary_nodes(session_id, msg_start, msg_end);
CREATE TABLE IF NOT EXISTS lcm_compaction_events (id INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL, fired_at TEXT NOT NULL, msg_before INTEGER NOT NULL,
  tokens_before INTEGER NOT NULL, tokens_after INTEGER NOT NULL);
"""
# lcm_meta.schema_version values this lcm-etl takes, exactly as Remnic writes them: '1' is upgraded by Remnic's
# idempotent schema batch (apply_schema), '2' is what it writes. No row at all is Remnic's "0": the batch runs.
KNOWN_VERSIONS = ("1", "2")
REMNIC_FTS = {
    "lcm_messages_fts": "CREATE VIRTUAL TABLE lcm_messages_fts USING fts5(content, content=lcm_messages, content_rowid=id)",
    "lcm_summaries_fts": "CREATE VIRTUAL TABLE lcm_summaries_fts USING fts5(summary_text, content=lcm_summary_nodes, content_rowid=rowid)",
}


@contextmanager
def indexes_after_load(con: sqlite3.Connection, *tables: str):
    """Drop the explicit indexes of tables while they load into an empty file, and build them once over
    the loaded rows on leaving, with the same DDL (a sort per index instead of a B-tree insert per row)."""
    indexes = con.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                          f"AND tbl_name IN ({', '.join('?' * len(tables))})", tables).fetchall()
    for name, _ in indexes:
        con.execute(f"DROP INDEX {name}")
    yield
    for _, sql in indexes:
        con.execute(sql)


@dataclass(frozen=True)
class Target:
    """The target a command was given or found, and why it is that file (the report's first line)."""
    path: Path
    rule: str            # "--dest", "--memory-dir", or the Remnic rule that chose it (lcm_etl/store/remnic_home.py)

    @property
    def default(self) -> bool:
        """Neither option named it: Remnic's rules chose it."""
        return self.rule not in ("--dest", "--memory-dir")


def resolve_target(dest: str | None, memory_dir: str | None) -> Target:
    """--dest, else --memory-dir's state/lcm.sqlite, else the one Remnic reads (remnic_home)."""
    from lcm_etl.read.snapshot.sqlite_copy import expand
    from lcm_etl.store.remnic_home import LCM_STORE, remnic_memory_dir

    if dest and memory_dir:
        raise BadInput("give either --dest or --memory-dir, not both")
    if memory_dir:
        return Target(expand(memory_dir) / LCM_STORE, "--memory-dir")
    if dest:
        return Target(expand(dest), "--dest")
    found = remnic_memory_dir()
    return Target(found.memory_dir / LCM_STORE, found.rule)


def check_target(path: Path, open_it: bool = True, writes: bool = False) -> bool:
    """Validate a target before anything is read or written. Returns True when it already exists.

    open_it=False checks the file only: opening a WAL database, even read-only, creates -wal/-shm
    beside it, which a dry run or an audit must not do; they call check_remnic on their snapshot.
    writes: a dry run that says what the real run would do, a target it could not write included.
    """
    if path.is_dir():
        raise BadInput(f"target is a directory: {path} (pass the lcm.sqlite file path, or use --memory-dir)")
    if path.is_symlink() and not path.exists():
        # a new target is built aside and linked into place, which a link's name refuses (it exists): every run
        # would fail the same way at its end. Said here, before anything is read or written.
        raise BadInput(f"target is a symbolic link to nothing: {path} -> {os.readlink(path)} (pass --dest the path "
                       "it should point at, or remove the link)")
    if path.exists():
        try:
            with open(path, "rb") as fh:
                head = fh.read(16)
        except OSError as exc:
            raise BadInput(f"target cannot be read: {path}: {exc.strerror}") from None
        if head and head != SQLITE_HEADER:
            raise BadInput(f"target exists but is not a SQLite database: {path} (choose another --dest)")
        if head and open_it:
            check_remnic(path, path)
        if head and (open_it or writes):
            check_writable(path)
        return True
    folder = path.parent
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise BadInput(f"target folder cannot be created: {probe} is not a directory (choose a --dest in a folder)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise BadInput(f"target folder is not writable: {probe} (choose a --dest you can write to)")
    return False


def check_writable(path: Path) -> None:
    """An existing target a real run will write: the file, and its folder, where SQLite creates the -wal
    and -shm files (without them it cannot even open a WAL database: 'unable to open database file',
    which the planner would otherwise report against whatever it was reading at the time)."""
    folder = path.parent
    try:
        read_only_fs = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only_fs = False
    if read_only_fs:   # root included: permissions do not matter here
        raise BadInput(f"target is on a read-only file system: {path} (remount it read-write, or copy it to a "
                       "writable folder and pass that copy as --dest)")
    if not os.access(path, os.W_OK):
        raise BadInput(f"target is read-only: {path} (make it writable, e.g. chmod u+w, or pass another --dest)")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInput(f"target folder is not writable: {folder} (SQLite creates its -wal and -shm files beside "
                       f"{path.name}: make the folder writable or move the target)")


def _schema_of(db: Path, query: str) -> tuple[set[str], str | None]:
    con = sqlite_runtime.connect(db, query)
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = None
        if "lcm_meta" in names:
            row = con.execute("SELECT value FROM lcm_meta WHERE key='schema_version'").fetchone()
            version = row[0] if row else None
        return names, version
    finally:
        con.close()


def check_remnic(db: Path, path: Path) -> None:
    """db is the file to open (the target or a private copy of it); path names it in messages.

    First opened `immutable=1`: even a read-only open of a WAL database creates -wal/-shm beside it, and
    a target we refuse must be left exactly as it was. Immutable reads skip the WAL, which is fine for
    this check unless the main file alone is inconsistent (a checkpoint cut short by a kill or a full
    disk): then the database is opened the ordinary way, WAL included, before anything is concluded.
    """
    try:
        try:
            names, version = _schema_of(db, "mode=ro&immutable=1")
        except (sqlite3.DatabaseError, UnicodeDecodeError):
            names, version = _schema_of(db, "mode=ro")
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise BadInput(f"target is not a readable SQLite database: {path} ({exc}; point --dest at a Remnic "
                       "lcm.sqlite, or at a new path)") from None
    if names and "lcm_meta" not in names and "lcm_messages" not in names:
        raise BadInput(f"target exists but is not a Remnic LCM database: {path} (no lcm_meta/lcm_messages; "
                       "choose another --dest)")
    if version is None or str(version) in KNOWN_VERSIONS:
        return
    if str(version).isdigit() and not str(version).startswith("0"):
        raise BadInput(f"target has Remnic LCM schema version {version}, newer than the 2 this lcm-etl writes: {path}")
    # anything else ('3.0', ' 3', '2026.1', '02') is no version Remnic writes: read as a number it could pass for
    # an old one and be rewritten to '2', or for 2 and be written as if it were one
    raise BadInput(f"target has Remnic LCM schema version {str(version)!r}, not one this lcm-etl knows "
                   f"({' or '.join(repr(v) for v in KNOWN_VERSIONS)} exactly): {path} (it is left untouched; point "
                   "--dest at a Remnic lcm.sqlite of schema version 2, or at a new path)")


def connect(path: Path, lock_timeout: float) -> sqlite3.Connection:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, isolation_level=None, timeout=lock_timeout)
    except (OSError, sqlite3.Error) as exc:
        raise BadInput(f"target cannot be opened: {path}: {exc}") from None
    con.execute(f"PRAGMA busy_timeout={int(lock_timeout * 1000)}")
    con.execute("PRAGMA foreign_keys=ON")
    return con


def apply_schema(con: sqlite3.Connection) -> None:
    """Remnic's applySchema, then lcm-etl's own tables. Caller holds a write transaction."""
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    version = 0
    if "lcm_meta" in names:
        row = con.execute("SELECT value FROM lcm_meta WHERE key='schema_version'").fetchone()
        version = int(row[0]) if row and str(row[0]).isdigit() else 0
    if version < 2:
        for stmt in REMNIC_SCHEMA.split(";"):
            if stmt.strip():
                con.execute(stmt)
        for name, ddl in REMNIC_FTS.items():
            if name not in names:
                con.execute(ddl)
        con.execute("INSERT INTO lcm_meta (key, value) VALUES ('schema_version', '2') "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value")
    ledger.ensure(con)   # lcm-etl's own tables, created when the target has none


def begin_immediate(con: sqlite3.Connection, path: Path, lock_timeout: float) -> None:
    try:
        con.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise RunFailed(f"target is locked by another writer: {path} (waited {lock_timeout:g} s; stop the "
                            "other writer or raise --lock-timeout); nothing was written") from None
        raise


def is_disk_full(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "disk is full" in text or "no space" in text or getattr(exc, "errno", None) == 28


def target_view(target: Path, existed: bool, private: bool) -> Snapshot | None:
    """What the plan reads of the target: nothing (absent), the target itself, or, when nothing may be
    written (dry-run, audit), a private checked copy, since even a read-only open of a WAL database
    creates -wal/-shm beside it. Returns the copy to close, or None."""
    if not (existed and private):
        return None
    view = take_snapshot(target, "target")
    try:
        check_remnic(view.path, target)
    except BaseException:
        view.close()
        raise
    return view
