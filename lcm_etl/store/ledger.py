"""lcm-etl's own tables in the target (`lcm_etl_*`): their schema and its version, and the run ledger.

Remnic ignores these tables. They carry a schema version of their own (`lcm_etl_meta.schema_version`,
SCHEMA_VERSION below), so they can change safely: `ensure` creates what is missing and upgrades a target
an older lcm-etl wrote (version 1, no lcm_etl_meta) in the same write transaction as the run's first rows.

The ledger (`lcm_etl_runs`) has one row per real run, made by one constructor (`RunRecord.new`); no-op runs
in a row share one (`complete_noop`). An existing target gets the row when the run's first batch commits
(status `running`), and it becomes `complete` in the run's last transaction, or `failed` when the run fails
(or is stopped by a signal) where it can still say so. A killed run cannot: the next run or undo (which holds
the run lock, so no other run is alive) marks every row still `running` as `killed`, and `runs` shows it so
before then (runlock.held). A new target is built in one private transaction, so its row is written once,
`complete`. `undo` sets a run's status to `undone` and records itself as a run of its own.
"""
from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson

from lcm_etl import __version__
from lcm_etl.store import marks as mark_store

# 1: lcm-etl before provenance (no lcm_etl_meta); 2: provenance, run status lifecycle; 3: marks as named columns
# (lcm_etl/store/marks.py: lcm_etl_marks' colon strings moved into a table per kind of mark)
SCHEMA_VERSION = 3

SCHEMA = """
CREATE TABLE IF NOT EXISTS lcm_etl_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS lcm_etl_runs (run_id TEXT PRIMARY KEY, tool_version TEXT NOT NULL,
  command TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT, status TEXT NOT NULL,
  source_path TEXT, source_size INTEGER, source_sha256 TEXT, options TEXT NOT NULL, counts TEXT NOT NULL,
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
CREATE TABLE IF NOT EXISTS lcm_etl_run_rows (run_id TEXT NOT NULL, tbl TEXT NOT NULL, key TEXT NOT NULL,
  before TEXT, PRIMARY KEY (run_id, tbl, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS lcm_etl_run_rows_key ON lcm_etl_run_rows(tbl, key);
CREATE TABLE IF NOT EXISTS lcm_etl_transcript_files (path TEXT PRIMARY KEY, size INTEGER NOT NULL,
  sha256 TEXT NOT NULL, lines INTEGER NOT NULL, messages INTEGER NOT NULL, tip TEXT, header_id TEXT NOT NULL,
  version INTEGER, session_id TEXT NOT NULL, key_by TEXT NOT NULL, held_by TEXT NOT NULL, run_id TEXT NOT NULL);
"""
# lcm_etl_transcript_files (where a reconcile re-run continues each transcript, lcm_etl/read/transcript_decision.py)
# came within version 2: a table that is only added needs no data upgrade — `ensure` creates it on any target,
# in the run's write transaction — and its rows prove themselves (a prefix hash, the recording run's status),
# so an older lcm-etl that neither reads nor writes it can never make a later run wrong, and keeps working.

# Version 1's lcm_etl_runs had `finished_at NOT NULL` (a row was written only when a run had finished) and no
# provenance columns; SQLite cannot relax a constraint in place, so the table is rebuilt with its rows.
_UPGRADE_1_TO_2 = """
ALTER TABLE lcm_etl_runs RENAME TO lcm_etl_runs_v1;
CREATE TABLE lcm_etl_runs (run_id TEXT PRIMARY KEY, tool_version TEXT NOT NULL,
  command TEXT NOT NULL, started_at TEXT NOT NULL, finished_at TEXT, status TEXT NOT NULL,
  source_path TEXT, source_size INTEGER, source_sha256 TEXT, options TEXT NOT NULL, counts TEXT NOT NULL,
  provenance INTEGER NOT NULL DEFAULT 0, undone_by TEXT);
INSERT INTO lcm_etl_runs (rowid, run_id, tool_version, command, started_at, finished_at, status, source_path,
  source_size, source_sha256, options, counts)
SELECT rowid, run_id, tool_version, command, started_at, finished_at, status, source_path, source_size,
  source_sha256, options, counts FROM lcm_etl_runs_v1;
DROP TABLE lcm_etl_runs_v1;
"""


def _script(con: sqlite3.Connection, sql: str) -> None:
    for stmt in sql.split(";"):
        if stmt.strip():
            con.execute(stmt)


def schema_version(con: sqlite3.Connection) -> int:
    """0: no lcm-etl tables; 1: written by an lcm-etl before this schema had a version."""
    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "lcm_etl_meta" in names:
        row = con.execute("SELECT value FROM lcm_etl_meta WHERE key = 'schema_version'").fetchone()
        if row and str(row[0]).isdigit():
            return int(row[0])
    return 1 if "lcm_etl_runs" in names else 0


def ensure(con: sqlite3.Connection) -> None:
    """lcm-etl's tables, created or upgraded to SCHEMA_VERSION. Caller holds a write transaction."""
    version = schema_version(con)
    if version > SCHEMA_VERSION:
        from lcm_etl.errors import BadInput

        raise BadInput(f"target's lcm-etl tables have schema version {version}, newer than the {SCHEMA_VERSION} "
                       "this lcm-etl knows (upgrade lcm-etl)")
    if version == 1:
        _script(con, _UPGRADE_1_TO_2)
    _script(con, SCHEMA + mark_store.SCHEMA)
    if version < 3:
        mark_store.upgrade(con)   # version 2's colon strings into named columns, in this same transaction
    if version < SCHEMA_VERSION:
        con.execute("INSERT INTO lcm_etl_meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))


@dataclass
class RunRecord:
    """A run's ledger row, made once when the run starts and written as the run goes."""
    run_id: str
    command: str
    started_at: str
    options: dict
    source_path: str | None = None
    source_size: int | None = None
    source_sha256: str | None | Callable[[], str | None] = None   # a callable: hashed while the run writes
    counts: dict = field(default_factory=dict)
    provenance: bool = True   # the run's rows are recorded (lcm_etl/store/provenance.py) and `undo` can remove them

    @classmethod
    def new(cls, command: str, started_at: str, options: dict, **source) -> "RunRecord":
        import uuid

        return cls(run_id=uuid.uuid4().hex, command=command, started_at=started_at, options=options, **source)

    def _row(self, status: str, finished_at: str | None) -> dict:
        sha = self.source_sha256() if callable(self.source_sha256) else self.source_sha256
        return {"run_id": self.run_id, "tool_version": __version__, "command": self.command,
                "started_at": self.started_at, "finished_at": finished_at, "status": status,
                "source_path": self.source_path, "source_size": self.source_size, "source_sha256": sha,
                "options": orjson.dumps(self.options).decode(), "counts": orjson.dumps(self.counts).decode(),
                "provenance": int(self.provenance)}


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


NOOP_RUNS = "noop_runs"   # in a coalesced row's counts: how many no-op runs in a row it stands for


def complete_noop(con: sqlite3.Connection, record: RunRecord, finished_at: str) -> str:
    """A no-op run's row (the shortcut: it wrote nothing else). When the ledger's latest row is a no-op run
    that found the same (same source, options, version and everything its counts hold: totals, marks and
    fingerprints), that row stands for this run too: its count goes up and its finished_at becomes this
    run's (started_at stays the first's), so a cron job that finds nothing every minute does not grow the
    ledger by a row a minute. Returns the id of the row that records the run."""
    row = con.execute("SELECT rowid, run_id, command, status, source_path, options, counts, tool_version "
                      "FROM lcm_etl_runs ORDER BY rowid DESC LIMIT 1").fetchone()
    mine = record._row("complete", finished_at)
    if row is not None and (row[2], row[3], row[4], row[7]) == ("migrate", "complete", mine["source_path"],
                                                                 mine["tool_version"]):
        try:
            options, counts = orjson.loads(row[5]), orjson.loads(row[6])
        except orjson.JSONDecodeError:
            options, counts = None, None
        if isinstance(counts, dict) and counts.get("shortcut_of") and options == record.options:
            times = counts.pop(NOOP_RUNS, 1)
            # the run took the shortcut from that row, or from the run that row took it from
            same = {**record.counts, "shortcut_of": counts["shortcut_of"]} == counts
            if same and record.counts.get("shortcut_of") in (row[1], counts["shortcut_of"]):
                con.execute("UPDATE lcm_etl_runs SET finished_at = ?, counts = ? WHERE rowid = ?",
                            (finished_at, orjson.dumps({**counts, NOOP_RUNS: times + 1}).decode(), row[0]))
                return row[1]
    _put(con, mine)
    return record.run_id


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
    """Every ledger row, oldest first, options and counts parsed; [] when the target has no ledger."""
    if schema_version(con) == 0:
        return []
    have = {r[1] for r in con.execute("PRAGMA table_info(lcm_etl_runs)")}
    cols = [c if c in have else f"NULL AS {c}" for c in RUN_COLUMNS]
    runs = []
    for row in con.execute(f"SELECT rowid, {', '.join(cols)} FROM lcm_etl_runs ORDER BY rowid"):
        run = dict(zip(("seq", *RUN_COLUMNS), row))
        for key in ("options", "counts"):
            try:
                run[key] = orjson.loads(run[key] or "{}")
            except orjson.JSONDecodeError:
                pass
        run["provenance"] = bool(run["provenance"])
        runs.append(run)
    return runs


def last_run(con: sqlite3.Connection, source_path: str | None = None) -> tuple[str, str, str, dict] | None:
    """(run_id, command, status, counts) of the latest ledger row, or None. The no-op shortcut takes the
    last run to finish; a sync re-run takes the last `migrate` of `source_path` to start, so that one that
    died (no finished_at) is the latest and its marks are not trusted."""
    query = ("SELECT run_id, command, status, counts FROM lcm_etl_runs WHERE command = 'migrate' AND "
             "source_path = ? ORDER BY rowid DESC LIMIT 1", (source_path,)) if source_path else (
             "SELECT run_id, command, status, counts FROM lcm_etl_runs ORDER BY finished_at DESC, rowid DESC "
             "LIMIT 1", ())
    row = con.execute(*query).fetchone()
    if row is None:
        return None
    counts = orjson.loads(row[3] or "{}")
    return row[0], row[1], row[2], counts if isinstance(counts, dict) else {}
