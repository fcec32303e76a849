"""A new target built from integer source ids (every lossless-claw release): two threads, two files.

Its messages keep their source ids, so what the parts and the message FTS rows hold needs nothing from
the plan. A builder thread therefore creates the target's private building file and fills it from the
source alone while DuckDB plans: Remnic's schema, every part in its final form (76_fresh_parts.sql) with
its indexes, and the message FTS rows (77_fresh_fts.sql). The planning thread, once the plan is staged,
writes what depends on it — messages (72), summaries and their provenance (85) — into a scratch file
with the target's schema, and lists the part times the plan reads differently (73). Then it takes the
building file: those rows move in as page copies (82_copy_scratch.sql), the part times are put right
(84), summaries are indexed (86), boundary events follow (90), and write.seal checks foreign keys before
the file is linked into place. SQLite allows one writer per file; two files let both threads write at once.
"""
from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Callable

from . import target as tgt
from .errors import RunFailed
from .pipeline import BUILD, FRESH_FINISH, FRESH_MESSAGES, FRESH_SUMMARIES
from .sqlite_runtime import attach_all, interrupt, private_file
from .steps import run_stage
from .write import (EarlyWriteback, add_counts, building_path, drop_building, folders_to_make, link_into_place,
                    prepare, remove_folders, run_stages, seal)

# fresh_owners: the messages the builder writes parts and FTS rows for, with the time a part without its
# own takes. Without a session filter the plan writes every source message of a known conversation
# (10_sessions.sql, 20_turn_index.sql), so the builder can start before the plan exists.
SOURCE_OWNERS = """SELECT m.message_id, coalesce(strftime('%Y-%m-%dT%H:%M:%fZ', m.created_at), m.created_at) AS created_iso
  FROM src_messages m JOIN src_conversations c ON c.conversation_id = m.conversation_id"""
PLANNED_OWNERS = "SELECT message_id, created_iso FROM plan.plan_messages"

# The stages (lcm_etl/pipeline.py): BUILD on the builder thread; FRESH_MESSAGES, then FRESH_SUMMARIES once the
# messages' index is built, on the planning thread's scratch file; FRESH_FINISH on the building file after
# the builder; then PROVENANCE (write.seal).


class TargetBuilder:
    """Fills a new target's building file from the source on a thread of its own (SQLite releases the GIL
    while it works). Without a session filter it starts at once, beside DuckDB; with one it waits for
    the stage (`stage_ready`) and reads the planned messages from it."""

    # the writer's progress bar (lcm_etl/progress.py): the planning thread's steps, the builder's as one
    PHASE = ("building", ("indexing the plan", "messages", "parts and FTS rows", "copying into the target",
                          "checking and linking"))

    def __init__(self, target: Path, attach: dict[str, Path], views: dict[str, str], planned: bool,
                 lock_timeout: float, spare_work: Callable[[], object] | None = None):
        self.target, self.building = target, building_path(target)
        self.attach_map, self.views, self.planned, self.lock_timeout = attach, views, planned, lock_timeout
        # work for whichever of the two threads is free first (the source's hash): the builder once the file
        # is built, or the writer when it would wait for the builder
        self.spare_work = spare_work
        self.made = folders_to_make(target)
        self.counts: dict[str, int] = {}
        self.error: BaseException | None = None
        self.linked = False
        self.con: sqlite3.Connection | None = None
        self.stage: Path | None = None
        self._stage_ready = threading.Event()
        self._cancelled = False
        self._file_id: tuple[int, int] | None = None   # (device, inode) of the building file this run made
        self.thread = threading.Thread(target=self._run, name="lcm-etl-build", daemon=True)

    @property
    def owners(self) -> str:
        return PLANNED_OWNERS if self.planned else SOURCE_OWNERS

    def start(self) -> "TargetBuilder":
        self.thread.start()
        return self

    def stage_ready(self, stage: Path) -> None:
        self.stage = stage
        self._stage_ready.set()

    def _run(self) -> None:
        try:
            if self.planned:
                self._stage_ready.wait()
                if self._cancelled:
                    return
            drop_building(self.building)   # left by a run that was killed while building
            con = tgt.connect(self.building, self.lock_timeout)
            self._file_id = _file_id(self.building)   # from here on discard() removes the file
            with closing(con), EarlyWriteback(self.building):
                self.con = con
                # SQLite's default 2 MB page cache: the builder appends, and it runs beside DuckDB's
                # budget while the run's memory peaks
                private_file(con, cache_kib=2000)
                con.execute("BEGIN")
                tgt.apply_schema(con)
                stage = {"plan": self.stage} if self.planned and self.stage is not None else {}
                attach_all(con, {**self.attach_map, **stage},
                           {**self.views, "fresh_owners": self.owners})
                with tgt.indexes_after_load(con, "lcm_message_parts"):
                    # SQLite forgets an interrupt that lands between statements: check before and after each
                    self._check_cancelled()
                    add_counts(self.counts, run_stage(BUILD, con, after_each=self._check_cancelled))
                    con.execute("PRAGMA cache_size=-16384")   # the index sorts stay in memory
                con.execute("COMMIT")
            if self.spare_work and not self._cancelled:
                self.spare_work()
        except BaseException as exc:  # re-raised in the writer's thread by join()
            self.error = exc
        finally:
            self.con = None

    def _check_cancelled(self) -> None:
        if self._cancelled:
            raise sqlite3.OperationalError("interrupted")

    def failed(self) -> BaseException | None:
        """The builder's error if it has stopped on one (without waiting for it)."""
        return None if self.thread.is_alive() else self.error

    def _check_file(self) -> None:
        """The building file is still the one this run made: a second run started on the same new target
        deletes a leftover name and makes its own, and the two must never mix."""
        if self._file_id is None or _file_id(self.building) != self._file_id:
            raise RunFailed(f"another run is building the same new target: {self.target}; the target was not "
                            "created by this run (run one migration per target at a time)")

    def join(self) -> dict[str, int]:
        """Wait for the builder; its row counts, or the error it met (raised here, in the caller's thread)."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.counts

    def cancel(self) -> None:
        """Stop early (the run failed elsewhere): interrupt SQLite, wait for the thread."""
        self._cancelled = True
        self._stage_ready.set()
        interrupt(self.con)
        self.thread.join()

    def discard(self) -> None:
        """Always, at the end of the run: the private name goes; a run that did not link the target also
        leaves no file and no folder it created."""
        if self.thread.is_alive():
            self.cancel()
        linked = self.linked or _same_file(self.building, self.target)   # linked, then failed (dir fsync)
        if self._file_id is not None and _file_id(self.building) == self._file_id:
            drop_building(self.building)   # ours: another run's file of that name is left alone
        if not linked:
            remove_folders(self.made)

    def finish(self, job, finished_at, bars) -> dict[str, int]:
        """The planning thread's half (write.write calls it): the messages into a scratch file while the
        builder works, then the building file finished, sealed and linked into place."""
        self.stage_ready(job.stage)
        if self.failed():   # a builder that stopped early (disk full, a bad source page) fails the run now
            self.join()
        scratch = job.stage.parent / "scratch-rows.sqlite"
        counts: dict[str, int] = {}
        bars.step("messages")
        with closing(sqlite3.connect(scratch, isolation_level=None)) as con:
            private_file(con)
            con.execute("BEGIN")
            tgt.apply_schema(con)   # the target's own DDL: what is copied from here moves as pages
            prepare(con, job, work_tables=False)   # 69_new_target_turns.sql makes _new and _map views
            attach_all(con, {}, {"fresh_owners": self.owners})
            with tgt.indexes_after_load(con, "lcm_messages"):
                add_counts(counts, run_stages(con, job, (FRESH_MESSAGES,)))
            add_counts(counts, run_stages(con, job, (FRESH_SUMMARIES,)))
            con.execute("COMMIT")
        bars.step("parts and FTS rows")   # what is left of the builder's work, if anything
        if self.spare_work:   # the builder may still be busy: this core is free meanwhile
            self.spare_work()
        built = dict(self.join())
        if built.pop("messages_indexed", 0) != counts.get("messages_inserted", 0):
            raise RunFailed("internal error: the new target's FTS rows and its messages differ in number; "
                            "the target was not created")
        add_counts(counts, built)
        self._check_file()
        bars.step("copying into the target")
        with closing(tgt.connect(self.building, job.lock_timeout)) as con, EarlyWriteback(self.building):
            private_file(con)
            con.execute("BEGIN")
            prepare(con, job, work_tables=False)
            attach_all(con, {"msgs": scratch}, {})
            add_counts(counts, run_stages(con, job, (FRESH_FINISH,)))
            counts.pop("part_times_fixed", None)   # a correction of rows counted already
            # as many FTS rows as messages (checked above), and every one of them a message's
            stray = con.execute("SELECT count(*) FROM lcm_messages_fts_docsize d "
                                "WHERE NOT EXISTS (SELECT 1 FROM lcm_messages m WHERE m.id = d.id)").fetchone()[0]
            if stray:
                raise RunFailed(f"internal error: {stray} FTS rows of the new target index no message; "
                                "the target was not created")
            bars.step("checking and linking")
            seal(con, job, counts, finished_at, ("msgs",))
        self._check_file()
        link_into_place(self.building, self.target)
        self.linked = True
        return counts


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _same_file(a: Path, b: Path) -> bool:
    ia = _file_id(a)
    return ia is not None and ia == _file_id(b)
