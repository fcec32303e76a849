"""A new target built from integer source ids (every lossless-claw release): two threads, two files.

Its messages keep their source ids, so what the parts and the message FTS rows hold needs nothing from
the plan. A builder thread therefore creates the target's private building file and fills it from the
source alone while DuckDB plans: Remnic's schema, every part in its final form (76_fresh_parts.sql) with
its indexes, and the message FTS rows (77_fresh_fts.sql). The planning thread, once the plan is staged,
writes what depends on it — messages (72), summaries and their provenance (85) — into a scratch file
with the target's schema, and lists the part times the plan reads differently (73). Then it takes the
building file: those rows move in as page copies (82_copy_scratch.sql), the part times are put right
(84), summaries are indexed (86), boundary events follow (90), and aside.BuiltAside seals the file (foreign
keys checked) and links it into place: TargetBuilder is one way of filling a building file (aside.Fill). SQLite allows one writer per file; two files let both threads write at once.
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
import threading
from contextlib import closing
from pathlib import Path

from lcm_etl.interrupts import Worker
from lcm_etl.store import target as tgt
from lcm_etl.load.aside import BuildingFile
from lcm_etl.errors import RunFailed
from lcm_etl.steps.pipeline import BUILD, FRESH_FINISH, FRESH_MESSAGES, FRESH_SUMMARIES
from lcm_etl.progress import Progress
from lcm_etl.sqlite_runtime import attach_all, interrupt, private_file
from lcm_etl.steps.engine import run_stage
from lcm_etl.load.write import WriteJob, add_counts, prepare, run_stages

# fresh_owners: the messages the builder writes parts and FTS rows for, with the time a part without its
# own takes. Without a session filter the plan writes every source message of a known conversation
# (10_sessions.sql, 20_turn_index.sql), so the builder can start before the plan exists.
SOURCE_OWNERS = """SELECT m.message_id, coalesce(strftime('%Y-%m-%dT%H:%M:%fZ', m.created_at), m.created_at) AS created_iso
  FROM src_messages m JOIN src_conversations c ON c.conversation_id = m.conversation_id"""
PLANNED_OWNERS = "SELECT message_id, created_iso FROM plan.plan_messages"

# The stages (lcm_etl/steps/pipeline.py): BUILD on the builder thread; FRESH_MESSAGES, then FRESH_SUMMARIES once the
# messages' index is built, on the planning thread's scratch file; FRESH_FINISH on the building file after
# the builder; then PROVENANCE (aside.BuiltAside seals the file).


class TargetBuilder:
    """Fills a new target's building file from the source on a thread of its own (SQLite releases the GIL
    while it works). Without a session filter it starts at once, beside DuckDB; with one it waits for
    the stage (`stage_ready`) and reads the planned messages from it. Then the planning thread's half:
    `before` and `into` (aside.Fill)."""

    # the writer's progress bar (lcm_etl/progress.py): the planning thread's steps, the builder's as one
    PHASE: tuple[str, tuple[str, ...]] = ("building", ("indexing the plan", "messages", "parts and FTS rows", "copying into the target",
                          "checking and linking"))
    attached: tuple[str, ...] = ("msgs",)
    work_tables = False   # 69_new_target_turns.sql makes _new and _map views

    def __init__(self, file: BuildingFile, attach: dict[str, Path], views: dict[str, str], planned: bool,
                 lock_timeout: float):
        self.file = file
        self.attach_map, self.views, self.planned, self.lock_timeout = attach, views, planned, lock_timeout
        self.counts: dict[str, int] = {}
        self.error: BaseException | None = None
        self.con: sqlite3.Connection | None = None
        self.stage: Path | None = None
        self._stage_ready = threading.Event()
        self._cancelled = False
        self.thread = Worker(target=self._run, name="lcm-etl-build")

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
            if self._cancelled:   # closed before the thread ran (or while it waited for the stage)
                return
            # SQLite's default 2 MB page cache: the builder appends, and it runs beside DuckDB's budget while
            # the run's memory peaks
            with self.file.open(self.lock_timeout, cache_kib=2000) as con:
                self.con = con
                stage = {"plan": self.stage} if self.planned and self.stage is not None else {}
                attach_all(con, {**self.attach_map, **stage},
                           {**self.views, "fresh_owners": self.owners})
                with tgt.indexes_after_load(con, "lcm_message_parts"):
                    # SQLite forgets an interrupt that lands between statements: check before and after each
                    self._check_cancelled()
                    add_counts(self.counts, run_stage(BUILD, con, after_each=self._check_cancelled))
                    con.execute("PRAGMA cache_size=-16384")   # the index sorts stay in memory
                con.execute("COMMIT")
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

    def close(self) -> None:
        if self.thread.is_alive():
            self.cancel()
        else:   # not started yet, or its start was interrupted: a thread that still starts does nothing
            self._cancelled = True

    def before(self, job: WriteJob, bars: Progress) -> dict[str, int]:
        """The messages into a scratch file while the builder works, then the builder's counts."""
        self.stage_ready(job.stage)
        if self.failed():   # a builder that stopped early (disk full, a bad source page) fails the run now
            self.join()
        counts: dict[str, int] = {}
        bars.step("messages")
        with closing(sqlite3.connect(_scratch_rows(job), isolation_level=None)) as con:
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
        built = dict(self.join())
        if built.pop("messages_indexed", 0) != counts.get("messages_inserted", 0):
            raise RunFailed("internal error: the new target's FTS rows and its messages differ in number; "
                            "the target was not created")
        add_counts(counts, built)
        bars.step("copying into the target")
        return counts

    def into(self, con: sqlite3.Connection, job: WriteJob, bars: Progress) -> dict[str, int]:
        """The scratch file's rows copied into the building file as pages, and the file finished."""
        attach_all(con, {"msgs": _scratch_rows(job)}, {})
        counts = run_stages(con, job, (FRESH_FINISH,))
        counts.pop("part_times_fixed", None)   # a correction of rows counted already
        # as many FTS rows as messages (checked in `before`), and every one of them a message's
        stray = con.execute("SELECT count(*) FROM lcm_messages_fts_docsize d "
                            "WHERE NOT EXISTS (SELECT 1 FROM lcm_messages m WHERE m.id = d.id)").fetchone()[0]
        if stray:
            raise RunFailed(f"internal error: {stray} FTS rows of the new target index no message; "
                            "the target was not created")
        return counts


def _scratch_rows(job: WriteJob) -> Path:
    """The planning thread's file with the target's schema, beside the stage."""
    return job.stage.parent / "scratch-rows.sqlite"
