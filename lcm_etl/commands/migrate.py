"""`migrate`: lossless-claw lcm.db → Remnic LCM. Snapshot, plan in DuckDB, stage, write in SQLite."""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from lcm_etl.planning import delta, plan, shortcut
from lcm_etl import duck
from lcm_etl.store import ledger, target as tgt
from lcm_etl.read import snapcache
from lcm_etl.store.runlock import target_lock
from lcm_etl.progress import Progress
from lcm_etl.report import RunReport, now_iso
from lcm_etl.read.source_schema import detect_schema, normalized_views
from lcm_etl.read.sources import check_sqlite_file, take_snapshot
from lcm_etl.load.loader import SourceParts, Strategy, choose, load
from lcm_etl.planning.pipeline import PROVENANCE, WRITE_MESSAGES, WRITE_REST
from lcm_etl.load.write import WriteJob, record_run, write_failure


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
    tmp_dir: str | None = None
    memory_limit: str = duck.DEFAULT_MEMORY_LIMIT
    full: bool = False   # re-plan even when the shortcut says nothing changed


def migrate(opts: MigrateOptions) -> RunReport:
    check_sqlite_file(opts.src, "source")    # source problems are reported before target problems,
    tgt.check_target(opts.target, open_it=not opts.dry_run)   # and both before waiting for another run
    with target_lock(opts.target, opts.lock_timeout, opts.dry_run):   # one run per target (lcm_etl/store/runlock.py)
        return _migrate(opts)


def _migrate(opts: MigrateOptions) -> RunReport:
    started, t0 = now_iso(), time.monotonic()
    report = RunReport(command="migrate", dry_run=opts.dry_run, source=str(opts.src), target=str(opts.target))
    existed = tgt.check_target(opts.target, open_it=not opts.dry_run)   # again: a run we waited for made it
    source_fp, opts_key = shortcut.source_fingerprint(opts.src), shortcut.options_key(opts.key_by, opts.session_filter)
    if existed and not opts.full:
        previous = shortcut.previous_totals(opts.target, source_fp, opts_key, opts.dry_run)
        if previous:
            return _nothing_changed(opts, report, previous, source_fp, opts_key, started, t0)
    bars = Progress(opts.progress)   # the phases before the writer's (planning has its own bar)
    bars.phase("reading source")
    # a run that stores marks keeps its snapshot for the next run of the pair, which then copies and reads
    # only the pages that changed (lcm_etl/read/snapcache.py); a dry run or a filtered run leaves it alone
    cache = None if opts.dry_run or opts.session_filter else snapcache.SnapshotCache.for_pair(opts.src, opts.target)
    rec = None if opts.full or opts.session_filter or not existed or opts.dry_run else \
        delta.recorded(opts.target, str(opts.src), opts_key)
    warm = duck.Warmup(opts.memory_limit)   # DuckDB starts while the source is read
    try:
        snap, changes = (cache.snapshot(rec.run_id if rec else None, opts.tmp_dir) if cache
                         else (take_snapshot(opts.src, "source", opts.tmp_dir), None))
    except BaseException:
        bars.close()   # before the error line
        warm.close()
        raise
    proved = changes.conversations if changes else None
    if changes is not None and proved is None:
        rec = None   # changed pages that cannot be placed (a value rewritten in its overflow pages): plan all
    view = strategy = committed = None
    try:
        schema = detect_schema(snap.path, opts.src)
        report.source_schema = schema.generation
        if not opts.dry_run:   # chosen before planning: a new target's parts start on the source meanwhile
            strategy = choose(opts.target, existed, (WRITE_MESSAGES, WRITE_REST), opts.lock_timeout, SourceParts(
                snap.folder, {"src": snap.path}, normalized_views(schema, "sqlite"), schema.integer_ids,
                planned=bool(opts.session_filter), spare_work=snap.hash_in_background,
                release=snap.discard_in_background))
        con = plan.open_source(snap.path, schema, opts.src, opts.memory_limit, warm)
        try:
            if proved is not None:
                snap.hash_in_background()   # for the ledger: a core is spare while a few sessions are planned
            if rec is None or proved is None:
                delta.mark_source(con, schema)
            view = tgt.target_view(opts.target, existed, private=opts.dry_run)
            target_db = view.path if view else opts.target if existed else None
            # a sync re-run plans only what changed since the previous run's marks (lcm_etl/planning/delta.py)
            if opts.dry_run and existed and not (opts.full or opts.session_filter):
                rec = delta.recorded(target_db, str(opts.src), opts_key)
            params = plan.plan_params(opts.key_by, opts.batch_rows, str(opts.src))
            # a target as the previous run left it (its file unchanged since) has the marks that run stored
            known = [(k, m) for kind, k, m in rec.marks if kind == "session"] \
                if rec and proved is not None and cache and cache.target_untouched else None
            scope = plan.load_target_state(con, target_db, snap.folder, (lambda: delta.narrow(
                con, rec, params, schema, snap.path, snap.folder, proved)) if rec else None, known)
            bars.close()
            planned = plan.build(con, opts.key_by, opts.session_filter, opts.batch_rows, report, str(opts.src),
                                 opts.progress, new_target=not existed, scoped=scope is not None)
            if scope is not None:
                delta.add_unchanged(con, report, target_db, str(opts.src))
                report.extra["sync"] = (f"{scope.sessions} of {scope.sessions_total} sessions re-planned "
                                        f"({scope.conversations_changed} conversations changed since run "
                                        f"{scope.since_run}); the others are unchanged (--full re-plans all)")
            if changes is not None:
                report.extra["snapshot"] = (
                    f"{changes.pages} pages changed since the one kept from run {rec.run_id}" if rec is not None
                    else f"{changes.pages} pages changed since the one kept, and {changes.why}: planned everything")
            if opts.dry_run:
                report.elapsed_s = time.monotonic() - t0
                return report
            stage_path = snap.folder / "stage.sqlite"
            bars.phase("staging")
            plan.stage(con, stage_path, record_marks=not opts.session_filter)
            bars.close()
            if not (strategy and strategy.takes_spare_work):   # else a builder thread hashes once it is free
                snap.hash_in_background()   # for the ledger; once DuckDB is done, so it does not slow planning
        except duckdb.Error as exc:
            _background_failure(strategy, opts, snap.path)   # a full disk shows first where the builder writes
            raise duck.translate(exc, plan.unreadable_source(opts.src)) from None
        finally:
            con.close()
        # the source's sha256 is read when the ledger row is written: hashing runs meanwhile
        record = ledger.RunRecord.new("migrate", started, _options(opts), source_path=str(opts.src),
                                      source_size=snap.size, source_sha256=lambda: snap.sha256)
        job = WriteJob(target=opts.target, stage=stage_path, final_stage=PROVENANCE, batches=planned.batches,
                       # 95 stores the marks under the run id
                       params={"fired_at": started, "source_path": str(opts.src), "run_id": record.run_id},
                       record=record, lock_timeout=opts.lock_timeout, progress=opts.progress,
                       attach={"src": scope.source_subset if scope else snap.path},
                       views=normalized_views(schema, "sqlite"),
                       # a re-plan of a few sessions reports the whole source too (delta.add_unchanged): its
                       # totals are those of the whole source, for the no-op shortcut of the next run
                       ledger_extra={"source_fingerprint": source_fp, "options_key": opts_key,
                                     "totals": _totals(report),
                                     "marks_run": None if opts.session_filter else record.run_id})
        assert strategy is not None   # only a dry run has none, and it has returned
        counts = load(job, strategy, now_iso)
        committed = job.record.run_id
        report.take_written(counts)
        report.run_id = job.record.run_id
        report.elapsed_s = time.monotonic() - t0
        return report
    finally:
        bars.close()   # before the error line, if any
        warm.close()
        try:
            if strategy is not None:
                strategy.close()
        finally:
            snap.close()
        if view:
            view.close()
        if committed and cache is not None:
            # the kept copy is this run's snapshot; sealed last, with the target as the run leaves it (a
            # new target's building name, removed above, changed its ctime)
            cache.seal(committed)


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


def _nothing_changed(opts: MigrateOptions, report: RunReport, previous: tuple[str, dict, str | None], source_fp, opts_key,
                     started: str, t0: float) -> RunReport:
    run_id, totals, marks_run = previous
    for kind, k in (("messages", report.messages), ("parts", report.parts), ("summaries", report.summaries)):
        k.already_present = totals.get(kind, {}).get("present", 0)
        k.skipped = dict(totals.get(kind, {}).get("skipped", {}))
    for name in shortcut.REPLAN_FIELDS:
        setattr(report, name, totals[name])
    report.extra["shortcut"] = (f"source unchanged and target untouched since run {run_id}: nothing to do "
                                "(--full re-plans everything)")
    if not opts.dry_run:
        record = ledger.RunRecord.new("migrate", started, _options(opts), source_path=str(opts.src),
                                      source_size=opts.src.stat().st_size)
        record_run(opts.target, opts.lock_timeout, record, {"source_fingerprint": source_fp, "options_key": opts_key,
                                                            "totals": totals, "shortcut_of": run_id,
                                                            "marks_run": marks_run}, now_iso())
        report.run_id = record.run_id
    report.elapsed_s = time.monotonic() - t0
    return report


def _options(opts: MigrateOptions) -> dict:
    return {"dry_run": opts.dry_run, "session_filter": opts.session_filter, "key_by": opts.key_by,
            "batch_rows": opts.batch_rows, "target": str(opts.target)}
