"""A new target built aside and linked into place: the whole database is built in a private file beside the
final path, without a journal (a crash just leaves a file the next run deletes), then switched to WAL and
hard-linked into place, so the target appears complete or not at all.

`BuiltAside` is that skeleton, once; what fills the file is its `Fill`: `InOneTransaction` below (TEXT source
ids: the write stages of an existing target, run as one batch) or lcm_etl/load/fresh.py's `TargetBuilder` (integer
source ids: two threads, two files).
"""
from __future__ import annotations

import os
from lcm_etl.sqlite_runtime import sqlite3
import threading
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Callable, Iterator, Protocol

from lcm_etl.interrupts import Worker
from lcm_etl.store import target as tgt
from lcm_etl.store.runlock import folders_to_make, remove_folders
from lcm_etl.errors import RunFailed
from lcm_etl.load.flatten import Flattener
from lcm_etl.steps.pipeline import Stage
from lcm_etl.progress import Progress
from lcm_etl.sqlite_runtime import private_file
from lcm_etl.load.write import WriteJob, add_counts, finish, planned_flattener, prepare, run_stages


def building_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.lcm-etl-building")


class BuildingFile:
    """The private file a new target is built in, from the first connection to the link (or its removal)."""

    def __init__(self, target: Path):
        self.target, self.path = target, building_path(target)
        self.made = folders_to_make(target)
        self.linked = False
        self._file_id: tuple[int, int] | None = None   # (device, inode) of the building file this run made

    @contextmanager
    def open(self, lock_timeout: float, cache_kib: int = 16384) -> Iterator[sqlite3.Connection]:
        """A transaction on the building file, flushed in the background; the first one creates the file
        (a leftover of that name, a killed run's, is deleted first) with Remnic's schema."""
        new = self._file_id is None
        if new:
            drop_building(self.path)
        else:
            self.check()
        con = tgt.connect(self.path, lock_timeout)
        if new:
            self._file_id = _file_id(self.path)   # from here on discard() removes the file
        with closing(con), EarlyWriteback(self.path):
            private_file(con, cache_kib)   # nobody else sees this file until it is linked into place
            con.execute("BEGIN")
            if new:
                tgt.apply_schema(con)
            yield con

    def check(self) -> None:
        """The building file is still the one this run made: a second run started on the same new target
        deletes a leftover name and makes its own, and the two must never mix."""
        if self._file_id is None or _file_id(self.path) != self._file_id:
            raise RunFailed(f"another run is building the same new target: {self.target}; the target was not "
                            "created by this run (run one migration per target at a time)")

    def link(self) -> None:
        """fsync the finished file, then give it the target's name: the target appears complete or not at all."""
        self.check()
        with open(self.path, "rb") as fh:
            os.fsync(fh.fileno())
        try:
            os.link(self.path, self.target)   # never clobbers a target that appeared meanwhile
        except FileExistsError:
            raise RunFailed(f"target appeared while it was being built: {self.target}; re-run to append to it") \
                from None
        self.linked = True
        _fsync_dir(self.target.parent)

    def discard(self) -> None:
        """Always, at the end of the run: the private name goes; a run that did not link the target also
        leaves no file and no folder it created."""
        linked = self.linked or _same_file(self.path, self.target)   # linked, then failed (dir fsync)
        if self._file_id is not None and _file_id(self.path) == self._file_id:
            drop_building(self.path)   # ours: another run's file of that name is left alone
        if not linked:
            remove_folders(self.made)


class Fill(Protocol):
    """What fills a building file: work done beforehand elsewhere (`before`), then on the file (`into`)."""
    PHASE: tuple[str, tuple[str, ...]]   # the writer's progress bar (lcm_etl/progress.py)
    attached: tuple[str, ...]            # databases `into` attaches (detached before the check)
    work_tables: bool                    # the writer's _new and _map tables (write.prepare)

    def before(self, job: WriteJob, bars: Progress) -> dict[str, int]: ...

    def into(self, con: sqlite3.Connection, job: WriteJob, bars: Progress) -> dict[str, int]: ...

    def failed(self) -> BaseException | None: ...

    def close(self) -> None: ...


class BuiltAside:
    """The strategy for a new target (lcm_etl/load/loader.py chooses it)."""
    existed = False

    def __init__(self, file: BuildingFile, fill: Fill, release: Callable[[], None] | None = None):
        self.file, self.fill = file, fill
        self.release = release   # called once the attachments are no longer read
        self.PHASE = fill.PHASE

    def failed(self) -> BaseException | None:
        return self.fill.failed()

    def staged(self, stage: Path, attach: dict[str, Path], views: dict[str, str]) -> None:
        pass   # a new target's work that needs no plan started when it was chosen; the rest runs in load

    def close(self) -> None:
        """Always, at the end of the run (twice does no harm)."""
        try:
            self.fill.close()
        finally:
            self.file.discard()

    def load(self, job: WriteJob, finished_at: Callable[[], str], bars: Progress) -> dict[str, int]:
        counts = self.fill.before(job, bars)
        with self.file.open(job.lock_timeout) as con:
            prepare(con, job, self.fill.work_tables)
            add_counts(counts, self.fill.into(con, job, bars))
            bars.step("checking and linking")
            self._seal(con, job, counts, finished_at)
        self.file.link()
        return counts

    def _seal(self, con: sqlite3.Connection, job: WriteJob, counts: dict, finished_at: Callable[[], str]) -> None:
        """The end of the private file: provenance and ledger row, COMMIT, foreign keys checked, WAL."""
        finish(con, job, counts, finished_at(), whole=True)
        con.execute("COMMIT")
        for alias in (*job.attach, "plan", *self.fill.attached):
            con.execute(f"DETACH {alias}")
        if self.release:   # the check below reads only the target: let the private folder go meanwhile
            self.release()
        problems = con.execute("PRAGMA foreign_key_check").fetchall()
        if problems:
            raise RunFailed(f"internal error: {len(problems)} foreign key violations in the built target")
        con.execute("PRAGMA journal_mode=WAL")


class InOneTransaction:
    """A new target from TEXT source ids (the peer's shape), or reconcile's: the write stages of an existing
    target run as one batch, numbered from 1 by 70_assign_turns.sql, its parts (migrate) flattened beside the
    writer (pipeline.FLATTEN: from the start of the run, or once the stage exists) and copied after the
    messages (80)."""
    PHASE: tuple[str, tuple[str, ...]] = ("building", ("indexing the plan", "messages", "flattening parts", "parts",
                                                       "checking and linking"))
    work_tables = True

    def __init__(self, stages: tuple[Stage, ...], flatten: bool, flattener: Flattener | None = None):
        self.stages, self.flatten, self.flattener = stages, flatten, flattener
        self.attached: tuple[str, ...] = ()

    def before(self, job: WriteJob, bars: Progress) -> dict[str, int]:
        if self.flattener is None and self.flatten:
            self.flattener = planned_flattener(job.stage, job.attach, job.views)
        self.attached = ("scratch",) if self.flattener else ()
        return {}

    def into(self, con: sqlite3.Connection, job: WriteJob, bars: Progress) -> dict[str, int]:
        counts: dict[str, int] = {}
        scratch = self.flattener
        split = 1 if scratch else len(self.stages)   # the parts come after the messages' stage
        with tgt.indexes_after_load(con, "lcm_messages", "lcm_message_parts"):
            bars.step("messages")
            add_counts(counts, run_stages(con, job, self.stages[:split]))
            if scratch:
                bars.step("flattening parts")
                scratch.attach(con)
            bars.step("parts")
            add_counts(counts, run_stages(con, job, self.stages[split:]))
        return counts

    def failed(self) -> BaseException | None:
        return None   # the flattener's error is raised where its file is attached

    def close(self) -> None:
        if self.flattener and self.flattener.thread.is_alive():
            self.flattener.cancel()


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
        self.thread = Worker(target=self._run, name="lcm-etl-writeback")
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


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _same_file(a: Path, b: Path) -> bool:
    ia = _file_id(a)
    return ia is not None and ia == _file_id(b)
