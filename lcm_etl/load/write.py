"""What every write of a plan shares, whichever way it lands (lcm_etl/load/loader.py chooses the way): the job,
the stage attached as `plan`, the write stages run over a range of batches, the run's last transaction
(final stage, provenance, ledger row) and the one-line error when SQLite or the disk fails.

The two ways: lcm_etl/load/batches.py (into an existing target, one transaction per batch) and lcm_etl/load/aside.py
(a new target built in a private file and linked into place).
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lcm_etl import sqlite_runtime
from lcm_etl.store import ledger, provenance, sync_state, target as tgt
from lcm_etl.errors import BadInput, RunFailed
from lcm_etl.load.flatten import PLANNED_OWNERS, Flattener
from lcm_etl.steps.pipeline import Stage
from lcm_etl.steps.engine import run_stage
from lcm_etl.sqlite_runtime import attach_all, private_file

# Work tables take their column types from the stage, so that joins on the source message id (INTEGER in
# lossless-claw, TEXT in the peer's shape) compare with one affinity and can use the index.
_WORK_TABLES = """
CREATE TEMP TABLE _new AS SELECT message_id AS src_message_id, session_id, 0 AS turn, 0 AS id, created_iso,
  created_raw FROM plan.plan_messages WHERE 0;
CREATE TEMP TABLE _map AS SELECT message_id AS src_message_id, 0 AS tid, 0 AS turn, created_iso
  FROM plan.plan_messages WHERE 0;
CREATE UNIQUE INDEX temp._map_src ON _map(src_message_id);
"""

_STAGE_INDEXES = (("plan_messages", "batch"), ("plan_messages", "message_id"), ("plan_present", "message_id"),
                  ("plan_present_parts", "batch"), ("plan_summaries", "summary_id"), ("plan_summaries", "batch"),
                  ("plan_edges", "batch"), ("plan_sessions", "batch"), ("jsonl_parts", "message_id"),
                  ("plan_conversations", "conversation_id"))


@dataclass
class WriteJob:
    """What both ways of writing need. What only one needs lives in its strategy (lcm_etl/load/loader.py)."""
    target: Path
    stage: Path                      # attached as `plan`: the narrow plan tables (and reconcile's content)
    final_stage: Stage               # provenance (or reconcile's offsets), run once in the last transaction
    batches: list[int]
    params: dict                     # fired_at, source_path, run_id, ...
    record: ledger.RunRecord         # the run's ledger row; its counts are set when the run ends
    lock_timeout: float
    progress: bool
    attach: dict[str, Path] = field(default_factory=dict)   # alias -> database (e.g. src -> the snapshot)
    views: dict[str, str] = field(default_factory=dict)     # TEMP views over the attachments
    state: sync_state.SyncState | None = None   # a migrate's, for the next run's decision (store/sync_state.py)


def prepare(con: sqlite3.Connection, job: WriteJob, work_tables: bool = True) -> None:
    attach_all(con, {**job.attach, "plan": job.stage}, job.views)
    if work_tables:
        for stmt in _WORK_TABLES.split(";"):
            if stmt.strip():
                con.execute(stmt)
        con.execute("INSERT INTO _map SELECT p.message_id, p.tid_present, p.turn_present, NULL FROM plan.plan_present p")


def index_stage(stage: Path) -> None:
    """Before any reader attaches the stage (loader.staged, else loader.load): without these SQLite would scan
    a plan table per row. Again on an indexed stage, it only reads its schema (a flattener may be reading it)."""
    with closing(sqlite3.connect(stage, isolation_level=None)) as con:
        private_file(con)   # the run's own file: one transaction, no journal and no fsync per index
        con.execute("BEGIN")
        staged = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, cols in _STAGE_INDEXES:
            if table in staged:
                con.execute(f"CREATE INDEX IF NOT EXISTS {table}_{cols.replace(', ', '_')} ON {table}({cols})")
        con.execute("COMMIT")


def planned_flattener(stage: Path, attach: dict[str, Path], views: dict[str, str]) -> Flattener:
    """The parts of the planned messages flattened (pipeline.FLATTEN) on a thread, once the stage exists."""
    return Flattener(stage.parent, {**attach, "plan": stage}, views, PLANNED_OWNERS).start()


def run_stages(con: sqlite3.Connection, job: WriteJob, stages: tuple[Stage, ...], lo: int | None = None,
               hi: int | None = None) -> dict[str, int]:
    """Run write stages for batches lo..hi (default: every batch of the plan, as one)."""
    if lo is None or hi is None:
        lo, hi = (min(job.batches), max(job.batches)) if job.batches else (0, -1)
    counts: dict[str, int] = {}
    for stage in stages:
        add_counts(counts, run_stage(stage, con, {**job.params, "lo": lo, "hi": hi,
                                                  "placed_by": ledger.placed_by(job.record.command, job.record.source_path)}))
    return counts


def add_counts(total: dict, part: dict) -> None:
    for k, v in part.items():
        total[k] = total.get(k, 0) + v


def finish(con: sqlite3.Connection, job: WriteJob, counts: dict, finished_at: str, whole: bool = False) -> None:
    """The run's last transaction: the final stage, provenance of a new target (`whole`), the ledger row."""
    add_counts(counts, run_stage(job.final_stage, con, job.params))   # its counts too (off_path_marks)
    if whole:   # every row of a new target is this run's
        provenance.record_whole(con, job.record.run_id)
    job.record.counts = {"written": counts}
    if job.state is None:
        ledger.complete(con, job.record, finished_at)
    else:
        sync_state.complete(con, job.record, job.state, finished_at)


def record_noop(target: Path, lock_timeout: float, record: ledger.RunRecord, state: sync_state.SyncState,
                finished_at: str) -> str:
    """The rows of a run that writes nothing else (the no-op shortcut): its own, or the previous no-op run's
    standing for it too (sync_state.complete_noop). Returns the id of that row."""
    recorded = [record.run_id]
    with closing(tgt.connect(target, lock_timeout)) as con:
        def work() -> None:
            tgt.apply_schema(con)
            record.counts = {"written": {}}
            recorded[0] = sync_state.complete_noop(con, record, state, finished_at)
        in_transaction(con, target, lock_timeout, work)
    return recorded[0]


def in_transaction(con: sqlite3.Connection, target: Path, lock_timeout: float, work: Callable[[], object]) -> None:
    tgt.begin_immediate(con, target, lock_timeout)
    try:
        work()
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def write_failure(exc: sqlite3.Error | OSError, target: Path, existed: bool, snapshot: Path | None) -> Exception:
    """The one-line error for SQLite or the disk failing while a target is written (or a new one built)."""
    after = ("the target was not created" if not existed else
             "batches committed before this hold whole sessions (or turn-order prefixes); re-run to finish")
    if tgt.is_disk_full(exc):
        return RunFailed(f"disk full while writing {target}; {after}; free space and re-run")
    damaged = _damaged(snapshot, "malformed" in str(exc)) if isinstance(exc, sqlite3.DatabaseError) else None
    if damaged:   # SQLite met a bad page of the source's snapshot while copying content
        return BadInput(f"source is damaged: {damaged} ({exc}); {after}")
    return RunFailed(f"writing {target} failed: {exc}; {after}")


def _damaged(snapshot: Path | None, malformed: bool = False) -> str | None:
    """Only after a failure: is the source snapshot itself corrupt? (quick_check is too slow to run always). After
    SQLite said "malformed" and quick_check finds nothing, integrity_check too: quick_check does not match an index
    against its table, and a write that read the source through a damaged index fails exactly so."""
    if snapshot is None or not snapshot.exists():   # gone: released after the content was copied
        return None
    try:
        with closing(sqlite_runtime.connect(snapshot)) as con:
            rows = [r[0] for r in con.execute("PRAGMA quick_check(3)")]
            if rows == ["ok"] and malformed:
                rows = [r[0] for r in con.execute("PRAGMA integrity_check(3)")]
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        return str(exc)
    return None if rows == ["ok"] else "; ".join(rows)
