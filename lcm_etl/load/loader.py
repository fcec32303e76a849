"""The loader: Python's sqlite3 runs the write steps of `transforms/` against the target. One loader, two
strategies, chosen once (`choose`) and followed by `load`:

- `batches.InBatches`: the target exists; one `BEGIN IMMEDIATE` transaction per batch.
- `aside.BuiltAside`: the target does not exist; the whole database is built in a private file and linked
  into place. What fills the file: the write stages run as one batch (TEXT source ids, reconcile), or, when the
  source's message ids are integers, lcm_etl/load/fresh.py's two threads (started before planning).

Some of a new target's work starts before the plan exists (the parts, while DuckDB plans), so a command
chooses its strategy before planning and hands it to `load` with the job once the plan is staged.
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from lcm_etl.load.aside import BuildingFile, BuiltAside, InOneTransaction
from lcm_etl.load.batches import InBatches
from lcm_etl.load.flatten import ALL_OWNERS, Flattener
from lcm_etl.load.fresh import TargetBuilder
from lcm_etl.steps.pipeline import Stage
from lcm_etl.progress import Progress
from lcm_etl.load.write import WriteJob, index_stage, write_failure


class Strategy(Protocol):
    existed: bool                        # the target existed when the run chose (for the error line)
    PHASE: tuple[str, tuple[str, ...]]   # the writer's progress bar (lcm_etl/progress.py)

    def load(self, job: WriteJob, finished_at: Callable[[], str], bars: Progress) -> dict[str, int]: ...

    # the plan is staged (and indexed): work that needs only the stage and the source may start
    def staged(self, stage: Path, attach: dict[str, Path], views: dict[str, str]) -> None: ...

    def failed(self) -> BaseException | None: ...   # what work started before the plan stopped on, if it did

    def close(self) -> None: ...   # always, at the end of the run: background work stopped, private files gone


@dataclass
class SourceParts:
    """migrate's parts come from the source snapshot, so a new target can start on them before the plan
    exists (reconcile's come with the plan: it passes none)."""
    folder: Path                   # the snapshot's private folder (the flattener's scratch file goes there)
    attach: dict[str, Path]        # src -> the snapshot
    views: dict[str, str]          # its normalised views, SQLite's dialect (source_schema.normalized_views)
    integer_ids: bool              # a new target keeps the source's message ids (lcm_etl/load/fresh.py)
    planned: bool                  # a session filter: only the planned messages', once the stage exists
    release: Callable[[], None] | None = None        # lets the snapshot go once a new target no longer reads it


def choose(target: Path, existed: bool, stages: tuple[Stage, ...], lock_timeout: float,
           parts: SourceParts | None = None) -> Strategy:
    """The one place the write strategy is chosen; a new target's work that needs no plan starts here."""
    if existed:
        return InBatches(stages, flatten=parts is not None)
    file = BuildingFile(target)
    if parts is None:
        return BuiltAside(file, InOneTransaction(stages, flatten=False))
    if parts.integer_ids:
        # the new target keeps the integer source ids as its message ids: a second thread builds it from
        # the source while DuckDB plans (at once, or once the stage exists with a filter)
        builder = TargetBuilder(file, parts.attach, parts.views, planned=parts.planned, lock_timeout=lock_timeout)
        strategy = BuiltAside(file, builder, parts.release)
        try:   # a signal can land while the thread starts: the caller never gets the strategy to close
            builder.start()
        except BaseException:
            strategy.close()
            raise
        return strategy
    # a new target takes every part: flatten them while DuckDB plans (with a filter: the planned ones, later)
    early = None if parts.planned else Flattener(parts.folder, parts.attach, parts.views, ALL_OWNERS).start()
    return BuiltAside(file, InOneTransaction(stages, flatten=True, flattener=early), parts.release)


def staged(strategy: Strategy, target: Path, stage: Path, attach: dict[str, Path], views: dict[str, str]) -> None:
    """The stage is complete: index it (before any reader attaches it), then let the strategy start on it
    while the command still fills its report. SQLite or the disk failing here is the one-line error of a
    failed write, as in load."""
    try:
        index_stage(stage)
    except (sqlite3.Error, OSError) as exc:
        raise write_failure(exc, target, strategy.existed, attach.get("src")) from None
    strategy.staged(stage, attach, views)


def load(job: WriteJob, strategy: Strategy, finished_at: Callable[[], str]) -> dict[str, int]:
    """Land the staged plan the chosen way. Returns the row counts SQLite reported; `finished_at()` stamps
    the ledger."""
    with Progress(job.progress) as bars:
        try:
            bars.phase(*strategy.PHASE)
            index_stage(job.stage)
            return strategy.load(job, finished_at, bars)
        except (sqlite3.Error, OSError) as exc:
            raise write_failure(exc, job.target, strategy.existed, job.attach.get("src")) from None
        finally:
            strategy.close()
