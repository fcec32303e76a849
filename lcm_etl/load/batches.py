"""Into an existing target, batch by batch: one `BEGIN IMMEDIATE` transaction per batch (the plan sized them
to keep the lock short for a live Remnic), each with its FTS rows, summaries and boundary events; foreign keys
are checked as rows land (summaries go roots first). A kill between batches leaves whole sessions or
turn-order prefixes. Parts are flattened beforehand, outside the lock.
"""
from __future__ import annotations

from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Callable

from lcm_etl.store import ledger, target as tgt
from lcm_etl.store import provenance
from lcm_etl.load.aside import building_path
from lcm_etl.load.flatten import Flattener
from lcm_etl.steps.pipeline import Stage
from lcm_etl.progress import Progress
from lcm_etl.load.write import WriteJob, add_counts, finish, in_transaction, planned_flattener, prepare, run_stages


class InBatches:
    """The strategy for a target that exists (lcm_etl/load/loader.py chooses it)."""
    existed = True
    # the progress bar's phase before the batches, which then have a bar of their own
    PHASE: tuple[str, tuple[str, ...]] = ("preparing", ("indexing the plan", "reading the target", "flattening parts"))

    def __init__(self, stages: tuple[Stage, ...], flatten: bool):
        self.stages = stages     # run per batch (lcm_etl/steps/pipeline.py)
        self.flatten = flatten   # parts are flattened by pipeline.FLATTEN (migrate), else not (reconcile)
        self.early: Flattener | None = None   # started once the stage exists, while the report is filled

    def staged(self, stage: Path, attach: dict[str, Path], views: dict[str, str]) -> None:
        if self.flatten:
            self.early = planned_flattener(stage, attach, views)

    def failed(self) -> BaseException | None:
        return None   # the flattener's failure, if any, is raised where the load attaches its rows

    def close(self) -> None:
        if self.early is not None and self.early.thread.is_alive():
            self.early.cancel()

    def load(self, job: WriteJob, finished_at: Callable[[], str], bars: Progress) -> dict[str, int]:
        # a build killed after it was linked into place leaves its private name behind (a second hard link
        # to this very target): drop the name, never the data
        building_path(job.target).unlink(missing_ok=True)
        scratch = self.early or (planned_flattener(job.stage, job.attach, job.views) if self.flatten else None)
        try:
            return self._batches(job, finished_at, bars, scratch)
        finally:
            if scratch and scratch.thread.is_alive():
                scratch.cancel()

    def _batches(self, job: WriteJob, finished_at: Callable[[], str], bars: Progress,
                 scratch: Flattener | None) -> dict[str, int]:
        counts: dict[str, int] = {}
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
                # it was; each batch records what it inserted (lcm_etl/store/provenance.py) in its own transaction

                def batch(b: int | None = None) -> None:
                    if not started[0]:
                        tgt.apply_schema(con)
                        ledger.start(con, job.record)
                        provenance.install_triggers(con, job.record.run_id)
                        started[0] = True
                    if b is not None:
                        mark = provenance.high_water(con)
                        add_counts(counts, run_stages(con, job, self.stages, b, b))
                        provenance.record_ranges(con, job.record.run_id, mark)

                def last() -> None:
                    batch()
                    finish(con, job, counts, done)

                bars.phase("writing", len(job.batches) + 1, unit="batch")   # + the last transaction (ledger)
                for b in job.batches:
                    in_transaction(con, job.target, job.lock_timeout, partial(batch, b))
                    committed = dict(counts)
                    bars.step()
                done = finished_at()
                in_transaction(con, job.target, job.lock_timeout, last)
            return counts
        except BaseException:
            if started[0]:
                job.record.counts = {"written": committed}
                ledger.fail(job.target, job.record, finished_at(), job.lock_timeout)
            raise
