"""lcm-etl's own tables in the target (`lcm_etl_*`): their schema and its version, and the run ledger.

Remnic ignores these tables. They carry a layout version of their own (`lcm_etl_meta.schema_version`,
SCHEMA_VERSION below): `ensure` creates them on a target that has none, in the same write transaction as the
run's first rows. lcm-etl's first release defines version 1, so there is nothing to upgrade from: a target
whose lcm-etl tables have another layout (another version, or none recorded) is refused in one line naming it.

The ledger (`lcm_etl_runs`) has one row per real run, made by one constructor (`RunRecord.new`); no-op runs
in a row share one (`complete_noop`). An existing target gets the row when the run's first batch commits
(status `running`), and it becomes `complete` in the run's last transaction, or `failed` when the run fails
(or is stopped by a signal) where it can still say so. A killed run cannot: the next run or undo (which holds
the run lock, so no other run is alive) marks every row still `running` as `killed`, and `runs` shows it so
before then (runlock.held). A new target is built in one private transaction, so its row is written once,
`complete`. `undo` sets a run's status to `undone` and records itself as a run of its own. What a complete
migrate leaves for the next run's decision is beside its row, in typed columns (store/sync_state.py).
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from lcm_etl import __version__
from lcm_etl.errors import BadInput
from lcm_etl.store import marks as mark_store

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS lcm_etl_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lcm_etl_runs (run_id TEXT PRIMARY KEY, tool_version TEXT NOT NULL,
  command TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT, status TEXT NOT NULL,
  source_path TEXT, source_size INTEGER, options TEXT NOT NULL, counts TEXT NOT NULL,
  provenance INTEGER NOT NULL DEFAULT 0, undone_by TEXT);
CREATE TABLE IF NOT EXISTS lcm_etl_summaries (summary_id TEXT PRIMARY KEY, session_id TEXT NOT NULL,
  source_conversation_id, kind TEXT, depth INTEGER, earliest_at TEXT, latest_at TEXT, descendant_count INTEGER,
  descendant_token_count INTEGER, source_message_token_count INTEGER, model TEXT, file_ids TEXT,
  source_created_at TEXT, parent_candidates INTEGER);
CREATE TABLE IF NOT EXISTS lcm_etl_summary_edges (summary_id TEXT NOT NULL, covering_summary_id TEXT NOT NULL,
  ordinal INTEGER, kept INTEGER NOT NULL, reason TEXT, PRIMARY KEY (summary_id, covering_summary_id));
CREATE TABLE IF NOT EXISTS lcm_etl_skipped (source_path TEXT NOT NULL, kind TEXT NOT NULL, source_id TEXT NOT NULL,
  session_id TEXT, reason TEXT NOT NULL, detail TEXT, PRIMARY KEY (source_path, kind, source_id));
CREATE TABLE IF NOT EXISTS lcm_etl_conversations (source_path TEXT NOT NULL, conversation_id NOT NULL,
  session_id TEXT NOT NULL, source_session_id TEXT, session_key TEXT, title TEXT, active INTEGER,
  archived_at TEXT, archive_cause TEXT, bootstrapped_at TEXT, created_at TEXT, updated_at TEXT,
  PRIMARY KEY (source_path, conversation_id));
CREATE TABLE IF NOT EXISTS lcm_etl_large_files (source_path TEXT NOT NULL, file_id TEXT NOT NULL,
  conversation_id, file_name TEXT, mime_type TEXT, byte_size INTEGER, line_count INTEGER, storage_uri TEXT,
  exploration_summary TEXT, created_at TEXT, PRIMARY KEY (source_path, file_id));
CREATE TABLE IF NOT EXISTS lcm_etl_run_ranges (run_id TEXT NOT NULL, tbl TEXT NOT NULL, lo INTEGER NOT NULL,
  hi INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS lcm_etl_run_ranges_run ON lcm_etl_run_ranges(run_id, tbl);
CREATE INDEX IF NOT EXISTS lcm_etl_run_ranges_id ON lcm_etl_run_ranges(tbl, hi);
CREATE TABLE IF NOT EXISTS lcm_etl_run_rows (run_id TEXT NOT NULL, tbl TEXT NOT NULL, key TEXT NOT NULL,
  before TEXT, PRIMARY KEY (run_id, tbl, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lcm_etl_run_rows_key ON lcm_etl_run_rows(tbl, key);
CREATE TABLE IF NOT EXISTS lcm_etl_transcript_files (path TEXT PRIMARY KEY, lines INTEGER NOT NULL,
  messages INTEGER NOT NULL, parts INTEGER NOT NULL, tip TEXT, size INTEGER, sha256 TEXT, seq INTEGER, watermark TEXT,
  header_id TEXT NOT NULL, version INTEGER, session_id TEXT NOT NULL, key_by TEXT NOT NULL, held_by TEXT NOT NULL,
  run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lcm_etl_session_rows (session_id TEXT PRIMARY KEY, row_count INTEGER NOT NULL,
  id_sum INTEGER NOT NULL, run_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lcm_etl_sync_state (run_id TEXT PRIMARY KEY, source_fingerprint TEXT NOT NULL,
  target_fingerprint TEXT NOT NULL, key_by TEXT NOT NULL, session_filter TEXT NOT NULL, marks_run TEXT,
  shortcut_of TEXT, noop_runs INTEGER NOT NULL DEFAULT 1, totals TEXT NOT NULL);
"""
# lcm_etl_sync_state (store/sync_state.py): session_filter is the sorted names as one JSON array ('[]': the whole
# source); totals the report's figures for the whole source, which a no-op run repeats (a report kept whole, not
# a figure any decision compares).
def _script(con: sqlite3.Connection, sql: str) -> None:
    for stmt in sql.split(";"):
        if stmt.strip():
            con.execute(stmt)


def schema_version(con: sqlite3.Connection) -> int:
    """0: no lcm-etl tables yet; else SCHEMA_VERSION. Any other layout is refused (BadInput, naming it)."""
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'lcm_etl_%'")}
    if not names:
        return 0
    row = con.execute("SELECT value FROM lcm_etl_meta WHERE key = 'schema_version'").fetchone() \
        if "lcm_etl_meta" in names else None
    if row is not None and row[0] == str(SCHEMA_VERSION):
        return SCHEMA_VERSION
    layout = f"schema version {row[0]}" if row is not None else "no schema version recorded"
    raise BadInput(f"target's lcm-etl tables have a layout this lcm-etl does not know ({layout}; it knows version "
                   f"{SCHEMA_VERSION}): migrate into a new target")


def ensure(con: sqlite3.Connection) -> None:
    """lcm-etl's tables, created when the target has none. Caller holds a write transaction."""
    if schema_version(con) == 0:
        _script(con, SCHEMA + mark_store.SCHEMA)
        con.execute("INSERT INTO lcm_etl_meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))


@dataclass
class RunRecord:
    """A run's ledger row, made once when the run starts and written as the run goes."""
    run_id: str
    command: str
    started_at: str
    options: dict
    source_path: str | None = None
    source_size: int | None = None
    counts: dict = field(default_factory=dict)
    provenance: bool = True   # the run's rows are recorded (lcm_etl/store/provenance.py) and `undo` can remove them

    @classmethod
    def new(cls, command: str, started_at: str, options: dict, **source) -> "RunRecord":
        import uuid

        return cls(run_id=uuid.uuid4().hex, command=command, started_at=started_at, options=options, **source)

    def _row(self, status: str, finished_at: str | None) -> dict:
        return {"run_id": self.run_id, "tool_version": __version__, "command": self.command,
                "started_at": self.started_at, "finished_at": finished_at, "status": status,
                "source_path": self.source_path, "source_size": self.source_size,
                "options": orjson.dumps(self.options).decode(), "counts": orjson.dumps(self.counts).decode(),
                "provenance": int(self.provenance)}


def placed_by(command: str, source_path: str | None) -> str:
    """A run's command and source key as 88_movable_boundaries.sql compares them with the run that placed a seam."""
    return f"{command}\x1f{source_path or ''}"


def _put(con: sqlite3.Connection, row: dict) -> None:
    con.execute(f"INSERT OR REPLACE INTO lcm_etl_runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()))


def start(con: sqlite3.Connection, record: RunRecord) -> None:
    """In the run's first write transaction, after `ensure`: earlier runs still `running` died (this run
    holds the run lock), and this one is now `running`."""
    mark_dead_runs(con)
    _put(con, record._row("running", None))


def mark_dead_runs(con: sqlite3.Connection) -> None:
    con.execute("UPDATE lcm_etl_runs SET status = 'killed' WHERE status = 'running'")


def complete(con: sqlite3.Connection, record: RunRecord, finished_at: str) -> None:
    """In the run's last transaction (inserted there when `start` was not called: a new target)."""
    _put(con, record._row("complete", finished_at))


def fail(target: Path, record: RunRecord, finished_at: str, lock_timeout: float) -> None:
    """Best effort, after the run's own transaction rolled back: a row left `running` by a run that failed
    is marked `failed` (the next run would do it anyway, so a locked or full target is not an error here)."""
    try:
        with closing(sqlite3.connect(target, isolation_level=None, timeout=min(lock_timeout, 2.0))) as con:
            con.execute("UPDATE lcm_etl_runs SET status = 'failed', finished_at = ?, counts = ? "
                        "WHERE run_id = ? AND status = 'running'",
                        (finished_at, orjson.dumps(record.counts).decode(), record.run_id))
    except sqlite3.Error:
        pass


RUN_COLUMNS = ("run_id", "command", "started_at", "finished_at", "status", "source_path", "options", "counts",
               "tool_version", "provenance", "undone_by")


def read_runs(con: sqlite3.Connection) -> list[dict]:
    """Every ledger row, oldest first, options and counts parsed, with what a no-op run's state says (`shortcut_of`,
    and `times`: how many no-op runs in a row the row stands for); [] when the target has no ledger."""
    if schema_version(con) == 0:
        return []
    runs = []
    for row in con.execute(f"SELECT r.rowid, {', '.join('r.' + c for c in RUN_COLUMNS)}, s.shortcut_of, "
                           "coalesce(s.noop_runs, 1) FROM lcm_etl_runs r LEFT JOIN lcm_etl_sync_state s USING (run_id) "
                           "ORDER BY r.rowid"):
        run = dict(zip(("seq", *RUN_COLUMNS, "shortcut_of", "times"), row))
        for key in ("options", "counts"):
            try:
                run[key] = orjson.loads(run[key] or "{}")
            except orjson.JSONDecodeError:
                pass
        run["provenance"] = bool(run["provenance"])
        runs.append(run)
    return runs


def last_migrate(con: sqlite3.Connection, path: str, key: str | None = None) -> tuple[str, str, str] | None:
    """(run_id, status, source_path) of the last migrate to start of the source `key` (lcm_etl/sync/identity.py), or without it
    of any database at the real path `path` (before the source's origin is read), else None. The last to *start*:
    one that died after a complete one is the latest, and what that one left is not trusted."""
    row = con.execute("SELECT run_id, status, source_path FROM lcm_etl_runs WHERE command = 'migrate' AND (source_path = ?1 OR "
                      "(?2 AND substr(source_path, 1, length(?1)) = ?1)) ORDER BY rowid DESC LIMIT 1",
                      (key, 0) if key else (f"{path}#", 1)).fetchone()
    return (row[0], row[1], row[2]) if row else None
