"""The parts flattener of an existing target (and of a new one from TEXT ids): pipeline.FLATTEN
(74_part_rows.sql, 78_flatten_parts.sql) on a connection of its own, in a thread, into the run's scratch file. A new target
from integer ids is built differently (lcm_etl/load/fresh.py)."""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from contextlib import closing
from pathlib import Path

from lcm_etl.interrupts import Worker
from lcm_etl.sqlite_runtime import attach_all, interrupt, private_file
from lcm_etl.steps.pipeline import FLATTEN
from lcm_etl.steps.engine import run_stage


# Which source messages 78_flatten_parts.sql flattens the parts of (view `flatten_owners`).
PLANNED_OWNERS = """SELECT q.message_id, q.batch, q.created_iso, NULL AS only_ordinal FROM plan.plan_messages q
  UNION ALL SELECT q.message_id, q.batch, q.created_iso, q.ordinal FROM plan.plan_present_parts q"""
# A new target receives every message, so its parts can be flattened before the plan exists, while
# DuckDB plans (created_at falls back to the message's at copy time, 80_write_parts.sql).
ALL_OWNERS = "SELECT message_id, 0 AS batch, NULL AS created_iso, NULL AS only_ordinal FROM src_messages"


class Flattener:
    """Runs 78_flatten_parts.sql on its own connection, in a thread: SQLite releases the GIL while it
    works, so the JSON flattening of parts (the costliest work of a run) overlaps with planning or
    with the message writes, and never happens under the target's write lock."""

    def __init__(self, folder: Path, attach: dict[str, Path], views: dict[str, str], owners: str):
        self.path = folder / "scratch.sqlite"
        self.attach_map, self.views, self.owners = attach, views, owners
        self.error: BaseException | None = None
        self.con: sqlite3.Connection | None = None
        self.thread = Worker(target=self._run, name="lcm-etl-flatten")

    def _run(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
            with closing(sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)) as con:
                self.con = con
                private_file(con, cache_kib=2000)
                attach_all(con, {**self.attach_map, "scratch": self.path},
                           {**self.views, "flatten_owners": self.owners})
                run_stage(FLATTEN, con)
        except BaseException as exc:  # re-raised in the caller's thread by attach()
            self.error = exc
        finally:
            self.con = None

    def start(self) -> "Flattener":
        self.thread.start()
        return self

    def cancel(self) -> None:
        """Stop early (the run failed elsewhere): interrupt SQLite, wait for the thread."""
        interrupt(self.con)
        self.thread.join()

    def attach(self, con: sqlite3.Connection) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error
        attach_all(con, {"scratch": self.path}, {})
