"""The writer: Python's sqlite3 runs the write steps of `transforms/` against the target, batch by batch.

Two ways to land a plan (three with lcm_etl/fresh.py, a new target from integer source ids):
- the target exists: one `BEGIN IMMEDIATE` transaction per batch (the plan sized them to keep the
  lock short for a live Remnic), each with its FTS rows, summaries and boundary events; foreign keys
  are checked as rows land (summaries go roots first). A kill between batches leaves whole sessions
  or turn-order prefixes. Parts are flattened beforehand, outside the lock.
- the target does not exist: the whole database is built in a private file beside the final path,
  without a journal (a crash just leaves a file the next run deletes), then switched to WAL and
  hard-linked into place, so the target appears complete or not at all.
"""
from __future__ import annotations

import os
import sqlite3
import threading
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from . import ledger, provenance, shortcut, target as tgt
from .errors import BadInput, RunFailed
from .flatten import PLANNED_OWNERS, Flattener
from .pipeline import Stage
from .progress import Progress
from .sqlite_runtime import attach_all, private_file
from .steps import run_stage

# Work tables take their column types from the stage, so that joins on the source message id (INTEGER in
# lossless-claw, TEXT in the peer's shape) compare with one affinity and can use the index.
_WORK_TABLES = """
CREATE TEMP TABLE _new AS SELECT message_id AS src_message_id, session_id, 0 AS turn, 0 AS id, created_iso,
  created_raw FROM plan.plan_messages WHERE 0;
CREATE TEMP TABLE _map AS SELECT message_id AS src_message_id, 0 AS tid, 0 AS turn, created_iso
  FROM plan.plan_messages WHERE 0;
CREATE UNIQUE INDEX temp._map_src ON _map(src_message_id);
"""


# The steps of the writer's first phase as its progress bar names them (lcm_etl/progress.py); then an
# existing target's batches have a bar of their own. A new target from integer ids: TargetBuilder.PHASE.
PREPARING = ("indexing the plan", "reading the target", "flattening parts")
BUILDING = ("indexing the plan", "messages", "flattening parts", "parts", "checking and linking")

_STAGE_INDEXES = (("plan_messages", "batch"), ("plan_messages", "message_id"), ("plan_present", "message_id"),
                  ("plan_present_parts", "batch"), ("plan_summaries", "summary_id"), ("plan_summaries", "batch"),
                  ("plan_edges", "batch"), ("plan_sessions", "batch"), ("plan_parts", "message_id"),
                  ("plan_conversations", "conversation_id"))


class Builder(Protocol):
    """A new target built on a thread of its own (lcm_etl/fresh.py's TargetBuilder), finished by the writer."""
    PHASE: tuple[str, tuple[str, ...]]

    def finish(self, job: "WriteJob", finished_at: Callable[[], str], bars: Progress) -> dict[str, int]: ...


@dataclass
class WriteJob:
    target: Path
    target_existed: bool
    stage: Path                      # attached as `plan`: the narrow plan tables (and reconcile's content)
    batch_stages: tuple[Stage, ...]  # write stages run per batch (lcm_etl/pipeline.py); a new target from TEXT
    #                                  ids attaches the flattened parts after the first
    final_stage: Stage | None        # provenance, run once in the last transaction
    flatten: bool                    # parts are flattened by pipeline.FLATTEN (migrate), else not (reconcile)
    batches: list[int]
    params: dict                     # fired_at, source_path, ...
    lock_timeout: float
    progress: bool
    attach: dict[str, Path] = field(default_factory=dict)   # alias -> database (e.g. src -> the snapshot)
    views: dict[str, str] = field(default_factory=dict)     # TEMP views over the attachments
    record: ledger.RunRecord | None = None   # the run's ledger row; its counts are set when the run ends
    ledger_extra: dict = field(default_factory=dict)   # more for the ledger's counts JSON (totals, fingerprints)
    flattener: Flattener | None = None   # already running (a new target's parts, started before planning)
    builder: Builder | None = None   # a new target from integer source ids (lcm_etl/fresh.py)
    release: Callable[[], None] | None = None   # called once the attachments are no longer read


def building_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.lcm-etl-building")


def prepare(con: sqlite3.Connection, job: WriteJob, work_tables: bool = True) -> None:
    attach_all(con, {**job.attach, "plan": job.stage}, job.views)
    if work_tables:
        for stmt in _WORK_TABLES.split(";"):
            if stmt.strip():
                con.execute(stmt)
        con.execute("INSERT INTO _map SELECT p.message_id, p.tid_present, p.turn_present, NULL FROM plan.plan_present p")


def _index_stage(stage: Path) -> None:
    """Once, before any reader attaches the stage: without these SQLite would scan a plan table per row."""
    with closing(sqlite3.connect(stage, isolation_level=None)) as con:
        staged = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table, cols in _STAGE_INDEXES:
            if table in staged:
                con.execute(f"CREATE INDEX IF NOT EXISTS {table}_{cols.replace(', ', '_')} ON {table}({cols})")


def _flattener(job: WriteJob) -> Flattener | None:
    if job.flattener is None and job.flatten:
        job.flattener = Flattener(job.stage.parent, {**job.attach, "plan": job.stage}, job.views,
                                  PLANNED_OWNERS).start()
    return job.flattener


def run_stages(con: sqlite3.Connection, job: WriteJob, stages, lo: int | None = None,
               hi: int | None = None) -> dict[str, int]:
    """Run write stages for batches lo..hi (default: every batch of the plan, as one)."""
    if lo is None:
        lo, hi = (min(job.batches), max(job.batches)) if job.batches else (0, -1)
    counts: dict[str, int] = {}
    for stage in stages:
        add_counts(counts, run_stage(stage, con, {**job.params, "lo": lo, "hi": hi}))
    return counts


def record_run(target: Path, job: WriteJob, counts: dict, finished_at: str) -> None:
    """A ledger row for a run that writes nothing else (the no-op shortcut)."""
    with closing(tgt.connect(target, job.lock_timeout)) as con:
        # the ledger may be an older lcm-etl's (lcm_etl/ledger.py upgrades it)
        _in_transaction(con, job, lambda: (tgt.apply_schema(con), _finish(con, job, counts, finished_at)))


def _finish(con: sqlite3.Connection, job: WriteJob, counts: dict, finished_at: str, whole: bool = False) -> None:
    """The run's last transaction: the final stage, provenance of a new target (`whole`), the ledger row."""
    if job.final_stage:
        run_stage(job.final_stage, con, job.params)
    if whole:   # every row of a new target is this run's
        provenance.record_whole(con, job.record.run_id)
    # what this run wrote, plus the target's fingerprint after it (lcm_etl/shortcut.py reads it back)
    job.record.counts = {"written": counts, **job.ledger_extra, "target_fingerprint": shortcut.target_fingerprint(con)}
    ledger.complete(con, job.record, finished_at)


def add_counts(total: dict, part: dict) -> None:
    for k, v in part.items():
        total[k] = total.get(k, 0) + v


def write(job: WriteJob, finished_at) -> dict[str, int]:
    """Land the staged plan. Returns the row counts SQLite reported. `finished_at()` stamps the ledger."""
    with Progress(job.progress) as bars:
        try:
            bars.phase(*(("preparing", PREPARING) if job.target_existed else job.builder.PHASE if job.builder
                         else ("building", BUILDING)))
            _index_stage(job.stage)
            if job.target_existed:
                return _write_existing(job, finished_at, bars)
            if job.builder is not None:   # it created the building file and cleans up after a failure
                return job.builder.finish(job, finished_at, bars)
            return _write_fresh(job, finished_at, bars)
        except (sqlite3.Error, OSError) as exc:
            raise write_failure(exc, job.target, job.target_existed, job.attach.get("src")) from None


def write_failure(exc: sqlite3.Error | OSError, target: Path, existed: bool, snapshot: Path | None) -> Exception:
    """The one-line error for SQLite or the disk failing while a target is written (or a new one built)."""
    after = ("the target was not created" if not existed else
             "batches committed before this hold whole sessions (or turn-order prefixes); re-run to finish")
    if tgt.is_disk_full(exc):
        return RunFailed(f"disk full while writing {target}; {after}; free space and re-run")
    damaged = _damaged(snapshot) if isinstance(exc, sqlite3.DatabaseError) else None
    if damaged:   # SQLite met a bad page of the source's snapshot while copying content
        return BadInput(f"source is damaged: {damaged} ({exc}); {after}")
    return RunFailed(f"writing {target} failed: {exc}; {after}")


def _damaged(snapshot: Path | None) -> str | None:
    """Only after a failure: is the source snapshot itself corrupt? (quick_check is too slow to run always)."""
    if snapshot is None or not snapshot.exists():   # gone: released after the content was copied
        return None
    try:
        with closing(sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)) as con:
            rows = [r[0] for r in con.execute("PRAGMA quick_check(3)")]
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        return str(exc)
    return None if rows == ["ok"] else "; ".join(rows)


def _in_transaction(con: sqlite3.Connection, job: WriteJob, work) -> None:
    tgt.begin_immediate(con, job.target, job.lock_timeout)
    try:
        work()
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise


def _write_existing(job: WriteJob, finished_at, bars: Progress) -> dict[str, int]:
    # a build killed after it was linked into place leaves its private name behind (a second hard link
    # to this very target): drop the name, never the data
    building_path(job.target).unlink(missing_ok=True)
    counts: dict[str, int] = {}
    scratch = _flattener(job)
    bars.step("reading the target")
    # the ledger row `running` has been written, perhaps committed: a failure must mark it (an interrupt can
    # land between the first COMMIT and any statement after it, so this is set before the COMMIT)
    started = [False]
    committed: dict[str, int] = {}   # counts of the batches committed so far (for a failed run's ledger row)
    try:
        with closing(tgt.connect(job.target, job.lock_timeout)) as con:
            # the journal mode is left as the target has it (Remnic sets WAL itself); changing it is a write
            con.execute("PRAGMA synchronous=NORMAL")
            prepare(con, job)
            if scratch:   # flattened before the first write lock is taken, so it never lengthens one
                bars.step("flattening parts")
                scratch.attach(con)
            # Remnic's schema (for a v1 or empty target), lcm-etl's tables and the run's ledger row land with
            # the first batch, so a run that fails before it (locked, disk full) leaves the target exactly as
            # it was; each batch records what it inserted (lcm_etl/provenance.py) in its own transaction

            def batch(b=None):
                if not started[0]:
                    tgt.apply_schema(con)
                    ledger.start(con, job.record)
                    provenance.install_triggers(con, job.record.run_id)
                    started[0] = True
                if b is not None:
                    mark = provenance.high_water(con)
                    add_counts(counts, run_stages(con, job, job.batch_stages, b, b))
                    provenance.record_ranges(con, job.record.run_id, mark)

            bars.phase("writing", len(job.batches) + 1, unit="batch")   # + the last transaction (ledger)
            for b in job.batches:
                _in_transaction(con, job, lambda: batch(b))
                committed = dict(counts)
                bars.step()
            done = finished_at()
            _in_transaction(con, job, lambda: (batch(), _finish(con, job, counts, done)))
        return counts
    except BaseException:
        if started[0]:
            job.record.counts = {"written": committed}
            ledger.fail(job.target, job.record, finished_at(), job.lock_timeout)
        raise


def _write_fresh(job: WriteJob, finished_at, bars: Progress) -> dict[str, int]:
    made = folders_to_make(job.target)
    try:
        return _build_fresh(job, finished_at, bars)
    except BaseException:
        remove_folders(made)   # a failed run leaves no empty folders behind either
        raise


def folders_to_make(target: Path) -> list[Path]:
    """The target's folders that do not exist yet, deepest first (the run creates them)."""
    return [p for p in (target.parent, *target.parent.parents) if not p.exists()]


def remove_folders(made: list[Path]) -> None:
    for folder in made:
        try:
            folder.rmdir()
        except OSError:   # not empty: something else lives there now
            break


def _build_fresh(job: WriteJob, finished_at, bars: Progress) -> dict[str, int]:
    """A new target from TEXT source ids (the peer's shape): numbered from 1 by 70_assign_turns.sql, its
    parts flattened beside the writer (pipeline.FLATTEN) and copied after the messages (80). Integer ids:
    lcm_etl/fresh.py."""
    building = building_path(job.target)
    drop_building(building)   # left by a run that was killed while building
    counts: dict[str, int] = {}
    scratch = _flattener(job)
    try:
        with closing(tgt.connect(building, job.lock_timeout)) as con, EarlyWriteback(building):
            private_file(con)   # nobody else sees this file until it is linked into place
            con.execute("BEGIN")
            tgt.apply_schema(con)
            prepare(con, job)
            split = 1 if scratch else len(job.batch_stages)   # the parts come after the messages' stage
            with tgt.indexes_after_load(con, "lcm_messages", "lcm_message_parts"):
                bars.step("messages")
                add_counts(counts, run_stages(con, job, job.batch_stages[:split]))
                if scratch:
                    bars.step("flattening parts")
                    scratch.attach(con)
                bars.step("parts")
                add_counts(counts, run_stages(con, job, job.batch_stages[split:]))
            bars.step("checking and linking")
            seal(con, job, counts, finished_at, ("scratch",) if scratch else ())
        link_into_place(building, job.target)
    finally:
        if scratch and scratch.thread.is_alive():
            scratch.cancel()
        drop_building(building)
    return counts


def seal(con: sqlite3.Connection, job: WriteJob, counts: dict, finished_at, attached=()) -> None:
    """The end of a new target's private file: provenance and ledger row, COMMIT, foreign keys checked, WAL."""
    _finish(con, job, counts, finished_at(), whole=True)
    con.execute("COMMIT")
    for alias in (*job.attach, "plan", *attached):
        con.execute(f"DETACH {alias}")
    if job.release:   # the check below reads only the target: let the private folder go meanwhile
        job.release()
    problems = con.execute("PRAGMA foreign_key_check").fetchall()
    if problems:
        raise RunFailed(f"internal error: {len(problems)} foreign key violations in the built target")
    con.execute("PRAGMA journal_mode=WAL")


def link_into_place(building: Path, target: Path) -> None:
    """fsync the finished file, then give it the target's name: the target appears complete or not at all."""
    with open(building, "rb") as fh:
        os.fsync(fh.fileno())
    try:
        os.link(building, target)   # never clobbers a target that appeared meanwhile
    except FileExistsError:
        raise RunFailed(f"target appeared while it was being built: {target}; re-run to append to it") from None
    _fsync_dir(target.parent)


def drop_building(building: Path) -> None:
    """The private name (after the link it is a second name of the target: the data stays) and its sides."""
    building.unlink(missing_ok=True)
    for side in ("-wal", "-shm", "-journal"):
        Path(str(building) + side).unlink(missing_ok=True)


class EarlyWriteback:
    """While a new target is built, flush what SQLite has written so far once a second, from a thread of
    its own: the disk then writes while the CPUs work, and the final fsync before the link only waits
    for the last second's pages (it waited for the whole file: 0.5 s on 200k messages, 1.3 s on 2M).
    The file's content is not touched; a crash still leaves only a private file nobody uses."""

    def __init__(self, path: Path, every: float = 1.0):
        self.path, self.every = path, every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="lcm-etl-writeback", daemon=True)
        self.fd = -1

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            try:
                os.fdatasync(self.fd)
            except OSError:
                pass   # only a head start: the final fsync reports real failures

    def __enter__(self) -> "EarlyWriteback":
        self.fd = os.open(self.path, os.O_RDONLY)   # sqlite3.connect has created the file
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        os.close(self.fd)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
