"""`migrate`: lossless-claw lcm.db → Remnic LCM. Snapshot, plan in DuckDB, stage, write in SQLite."""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lcm_etl import duck
from lcm_etl.store import ledger, target as tgt
from lcm_etl.sync import identity as source_identity, shortcut
from lcm_etl.sync.lcm_db import Asked, LcmDbSync
from lcm_etl.read.snapshot import snapcache
from lcm_etl.cachedir import cache_root
from lcm_etl.store.runlock import target_lock
from lcm_etl.progress import Progress
from lcm_etl.report import RunReport, now_iso, one_line
from lcm_etl.read.lcmdb import source_tables
from lcm_etl.read.lcmdb.source_schema import detect_schema, normalized_views
from lcm_etl.read.snapshot.sqlite_copy import Snapshot, check_sqlite_file, file_signature, take_snapshot
from lcm_etl.load.loader import SourceParts, Strategy, choose, load, staged
from lcm_etl.steps.pipeline import PROVENANCE, WRITE_MESSAGES, WRITE_REST
from lcm_etl.load.write import WriteJob, record_noop, write_failure

if TYPE_CHECKING:
    import duckdb

    from lcm_etl.planning import delta

# DuckDB and the planning modules over it are imported by _Run.plan(), not here: duck.Warmup imports them
# on its thread while the source is read (0.1 s of a sync re-run)
_PLANNING = ("lcm_etl.planning.plan", "lcm_etl.planning.delta")


@dataclass
class MigrateOptions:
    src: Path
    target: Path
    dry_run: bool = False
    session_filter: list[str] = field(default_factory=list)
    key_by: str = "session-id"
    lock_timeout: float = 10.0
    batch_rows: int = 50_000
    progress: bool = False
    memory_limit: str = duck.DEFAULT_MEMORY_LIMIT
    full: bool = False   # re-plan even when the shortcut says nothing changed


def migrate(opts: MigrateOptions) -> RunReport:
    _not_transcripts(opts.src)
    check_sqlite_file(opts.src, "source")    # source problems are reported before target problems,
    tgt.check_target(opts.target, open_it=not opts.dry_run, writes=True)   # and both before waiting for another run
    with target_lock(opts.target, opts.lock_timeout, opts.dry_run):   # one run per target (lcm_etl/store/runlock.py)
        return _migrate(opts)


def _not_transcripts(src: Path) -> None:
    """migrate reads lossless-claw's lcm.db alone: what OpenClaw keeps besides (a session store, a JSONL transcript,
    a state folder without lcm.db) is reconcile's, and the error says so, with the command to run."""
    from lcm_etl.errors import BadInput
    from lcm_etl.read.openclaw.openclaw_home import is_state_dir
    from lcm_etl.read.openclaw.openclaw_state import STORE_NAME, is_session_store

    what, sessions = None, src
    # by its tables, whatever its name (immutable: a look that leaves nothing beside the source)
    if (src.is_file() and is_session_store(src, "immutable=1")) or (src.is_dir() and (src / STORE_NAME).is_file()):
        what = "is an OpenClaw session store, not lossless-claw's lcm.db"
    elif ".jsonl" in src.name:
        what = "is an OpenClaw JSONL transcript, not lossless-claw's lcm.db"
    elif src.is_dir() and not (src / "lcm.db").exists() and (is_state_dir(src) or any(src.glob("*.jsonl"))):
        what = "holds OpenClaw's transcripts and no lcm.db"
    elif src.name == "lcm.db" and not src.exists() and is_state_dir(src.parent):
        what, sessions = "not found: this OpenClaw state folder has no lossless-claw lcm.db", src.parent
    if what:
        raise BadInput(f"source {what}: {src} (import its transcripts with "
                       f"`lcm-etl reconcile --sessions {sessions}`)")


def _migrate(opts: MigrateOptions) -> RunReport:
    """Read the source, plan in DuckDB, load into the target: each phase a method of _Run, which owns what
    they share and releases it, sealing the kept snapshot once the run has committed."""
    run = _Run(opts)
    previous = run.sync.before_read()
    if previous:
        snapcache.used(opts.src, opts.target, opts.dry_run)   # the pair's kept snapshot is still wanted
        return _nothing_changed(opts, run.report, previous, run.sync, run.started, run.t0)
    with run:
        run.read()
        planned = run.plan()
        if planned is not None:   # None: a dry run, whose report is the plan
            run.load(planned)
    run.report.elapsed_s = time.monotonic() - run.t0
    return run.report


@dataclass
class _Planned:
    """What loading needs from planning: the stage file, its batches, and the rows the writer reads."""
    stage: Path
    batches: list[int]
    src: Path   # the snapshot, or a sync re-run's small copy of its scope (lcm_etl/read/lcmdb/subset.py)


class _Run:
    """One migrate, phase by phase. What it reads and re-plans is decided by `sync` (lcm_etl/sync/lcm_db.py) as
    the phases read what the decision needs; `changes` are the kept snapshot's changed pages."""

    def __init__(self, opts: MigrateOptions):
        self.opts, self.started, self.t0 = opts, now_iso(), time.monotonic()
        self.report = RunReport(command="migrate", dry_run=opts.dry_run, source=str(opts.src), target=str(opts.target))
        self.existed = tgt.check_target(opts.target, open_it=not opts.dry_run, writes=True)   # again: a run we waited for made it
        self.sync = LcmDbSync(Asked(opts.src, opts.target, self.existed, opts.full, opts.session_filter, opts.dry_run,
                                    opts.key_by))
        self.bars = Progress(opts.progress)   # the phases before the writer's (planning has its own bar)
        self.cache: snapcache.SnapshotCache | None = None
        self.warm: duck.Warmup | None = None
        self.snap: Snapshot | None = None
        self.strategy: Strategy | None = None
        self.view: Snapshot | None = None   # a dry run's private copy of the target
        self.committed: str | None = None
        self.changes: snapcache.Changes | None = None
        self.scope: delta.Scope | None = None   # a sync re-run's (lcm_etl/planning/delta.py)

    def read(self) -> None:
        """The source's snapshot: the kept one brought up to date page by page, or a whole copy."""
        opts = self.opts
        size = sum(side[1] for side in file_signature(opts.src) if side is not None)   # the file and its -wal
        self.bars.phase("reading source", size, unit="B")   # a whole copy counts its bytes (sqlite_copy.copy_file)
        # a run that stores marks keeps its snapshot for the next run of the pair, which then copies and reads
        # only the pages that changed (lcm_etl/read/snapshot/snapcache.py); a dry run or a filtered run leaves it alone
        if not (opts.dry_run or opts.session_filter):
            self.cache = snapcache.SnapshotCache.for_pair(opts.src, opts.target, source_tables.BY_NAME)
        # DuckDB starts while the source is read; a dry run keeps no record of the scanner's check (lcm_etl/duck.py)
        self.warm = duck.Warmup(opts.memory_limit, _PLANNING, keeps_records=not opts.dry_run)
        if self.cache is not None:
            self.snap, self.changes = self.cache.snapshot(self.bars.count, self.sync.files)
            self._warn(self.cache.warning)
        else:
            self.snap = take_snapshot(opts.src, "source", None, progress=self.bars.count)
        self.bars.count(size, size)   # read, whole or page by page

    def plan(self) -> _Planned | None:
        """DuckDB: the marks and the target's state, the scope of a sync re-run, the plan, the stage file."""
        import duckdb   # loaded by the Warmup thread (see the imports at the top)

        from lcm_etl.planning import delta, plan
        opts, report, snap = self.opts, self.report, self.snap
        assert snap is not None and self.warm is not None
        schema = detect_schema(snap.path, opts.src)
        report.source_schema = schema.generation
        report.unknown_in_source = schema.unknown()
        if not opts.dry_run:   # chosen before planning: a new target's parts start on the source meanwhile
            self.strategy = choose(opts.target, self.existed, (WRITE_MESSAGES, WRITE_REST), opts.lock_timeout,
                                   SourceParts(snap.folder, {"src": snap.path}, normalized_views(schema, "sqlite"),
                                               schema.integer_ids, planned=bool(opts.session_filter),
                                               release=snap.discard_in_background))
        self.schema = schema
        self.view = tgt.target_view(opts.target, self.existed, private=opts.dry_run)
        target_db = self.view.path if self.view else opts.target if self.existed else None
        sync = self.sync
        identity = source_identity.of_snapshot(opts.src, snap.path)
        sync.after_snapshot(identity, target_db, self.changes, self.cache.dropped if self.cache is not None else None,
                            cache_root() is not None)
        key = identity.key
        con = plan.open_source(snap.path, schema, opts.src, opts.memory_limit, self.warm, workdir=snap.folder)
        try:
            sync.mark_source(con, schema, snap.path)
            params = plan.plan_params(opts.key_by, opts.batch_rows, key)
            reader = plan.TargetReader(con, target_db, snap.folder)
            reader.provenance()
            # a sync re-run plans only what changed since the previous run's marks (lcm_etl/sync/lcm_db.py)
            scope = self.scope = sync.narrow(con, params, schema, snap.path, snap.folder)
            reader.state(scoped=scope is not None, source=plan.SourceRows(snap.path, normalized_views(schema, "sqlite")))
            if scope is not None:
                delta.enter_scope(con, scope, schema)
            self.bars.close()
            planned = plan.build(con, opts.key_by, opts.session_filter, opts.batch_rows, key,
                                 opts.progress, new_target=not self.existed, label=str(opts.src))
            stage_path = snap.folder / "stage.sqlite"
            rows = scope.source_subset if scope else snap.path
            if not opts.dry_run:   # staged before the report is filled: the parts flattener starts meanwhile
                self.bars.phase("staging")
                plan.stage(con, stage_path, record_marks=not opts.session_filter)
                self.bars.close()
                assert self.strategy is not None
                staged(self.strategy, opts.target, stage_path, {"src": rows}, normalized_views(schema, "sqlite"))
            plan.report_plan(con, report, planned, filtered=bool(opts.session_filter) or scope is not None)
            self._report_sync(con, scope, target_db)
            if opts.dry_run:
                return None
            return _Planned(stage_path, planned.batches, rows)
        except duckdb.Error as exc:
            _background_failure(self.strategy, opts, snap.path)   # a full disk shows first where the builder writes
            raise duck.translate(exc, plan.unreadable_source(opts.src)) from None
        except sqlite3.DatabaseError as exc:   # SQLite reads content while planning (delta.content_marks, 04)
            _background_failure(self.strategy, opts, snap.path)
            raise write_failure(exc, opts.target, self.existed, snap.path) from None
        finally:
            con.close()

    def _report_sync(self, con: duckdb.DuckDBPyConnection, scope: delta.Scope | None, target_db: Path | None) -> None:
        from lcm_etl.planning import delta   # loaded by the Warmup thread

        if scope is not None and target_db is not None and self.sync.identity is not None:
            delta.add_unchanged(con, self.report, target_db, self.sync.identity.key)
        self.report.sync_decision = self.sync.decision.as_dict()

    def load(self, planned: _Planned) -> None:
        """Into the target by the strategy chosen before planning; the ledger row in the last transaction."""
        opts, report, snap = self.opts, self.report, self.snap
        assert snap is not None and self.strategy is not None   # only a dry run has none, and it has returned
        sync = self.sync
        assert sync.identity is not None
        key = sync.identity.key
        record = ledger.RunRecord.new("migrate", self.started, _options(opts), source_path=key,
                                      source_size=snap.size)
        job = WriteJob(target=opts.target, stage=planned.stage, final_stage=PROVENANCE, batches=planned.batches,
                       # 95 stores the marks under the run id
                       params={"fired_at": self.started, "source_path": key, "run_id": record.run_id},
                       record=record, lock_timeout=opts.lock_timeout, progress=opts.progress,
                       attach={"src": planned.src}, views=normalized_views(self.schema, "sqlite"),
                       # a re-plan of a few sessions reports the whole source too (delta.add_unchanged): its
                       # totals are those of the whole source, for the no-op shortcut of the next run
                       state=replace(sync.state, totals=_totals(report),
                                     marks_run=None if opts.session_filter else record.run_id))
        report.take_written(load(job, self.strategy, now_iso))
        report.run_id = self.committed = record.run_id

    def __enter__(self) -> "_Run":
        return self

    def __exit__(self, *exc) -> None:
        self.bars.close()   # before the error line, if any
        if self.warm is not None:
            self.warm.close()
        try:
            if self.strategy is not None:
                self.strategy.close()
        finally:
            if self.snap is not None:
                self.snap.close()
        if self.view:
            self.view.close()
        if self.cache is not None:   # sealed last, with the target as the run leaves it (a new target's building
            # name, removed above, changed its ctime); else discarded; the cache kept within its bound
            warned = self.cache.warning
            if self.cache.finish(self.committed) != warned:
                self._warn(self.cache.warning)
            if self.cache.kept_bytes is not None:
                self.report.extra["kept_snapshot_bytes"] = self.cache.kept_bytes

    def _warn(self, line: str | None) -> None:
        """The cache could not do its part: one line on stderr and in the report, and the run goes on."""
        if line:
            self.bars.close()
            self.report.warnings.append(line)
            print(f"lcm-etl: warning: {one_line(line)}", file=sys.stderr, flush=True)


def _background_failure(strategy: Strategy | None, opts: MigrateOptions, snapshot: Path) -> None:
    """Planning failed: if the builder had failed first (its own disk full, say), that is the run's error."""
    if strategy is None:
        return
    error = strategy.failed()   # read before stopping it: the builder's own failure, not the interruption
    strategy.close()
    if isinstance(error, (sqlite3.Error, OSError)):
        raise write_failure(error, opts.target, strategy.existed, snapshot) from None


def _totals(report: RunReport) -> dict:
    """Everything of the source the target now holds or has accounted for, per kind, and what a re-plan
    of the same source reports besides (shortcut.REPLAN_FIELDS), so that the shortcut reports it too."""
    totals = {kind: {"present": k.inserted + k.already_present, "skipped": k.skipped}
              for kind, k in (("messages", report.messages), ("parts", report.parts), ("summaries", report.summaries))}
    return {**totals, **{name: getattr(report, name) for name in shortcut.REPLAN_FIELDS}}


def _nothing_changed(opts: MigrateOptions, report: RunReport, previous: shortcut.Previous, sync: LcmDbSync,
                     started: str, t0: float) -> RunReport:
    totals = previous.state.totals
    for kind, k in (("messages", report.messages), ("parts", report.parts), ("summaries", report.summaries)):
        k.already_present = totals.get(kind, {}).get("present", 0)
        k.skipped = dict(totals.get(kind, {}).get("skipped", {}))
    for name in shortcut.REPLAN_FIELDS:
        setattr(report, name, totals[name])
    report.sync_decision = sync.decision.as_dict()
    if not opts.dry_run:   # the source is the one that run read, byte for byte: its key too
        record = ledger.RunRecord.new("migrate", started, _options(opts), source_path=previous.source_path,
                                      source_size=opts.src.stat().st_size)
        state = replace(sync.state, totals=totals, shortcut_of=previous.run_id, marks_run=previous.state.marks_run)
        report.run_id = record_noop(opts.target, opts.lock_timeout, record, state, now_iso())
    report.elapsed_s = time.monotonic() - t0
    return report


def _options(opts: MigrateOptions) -> dict:
    return {"dry_run": opts.dry_run, "session_filter": opts.session_filter, "key_by": opts.key_by,
            "batch_rows": opts.batch_rows, "target": str(opts.target)}
