"""`reconcile`: crash recovery from OpenClaw's transcripts (docs/cli.md, docs/mapping.md), in migrate's shape:
source → the run's private SQLite file → DuckDB plans over it → SQLite writes (docs/design.md, "Reconcile:
transcripts, read from where the last run stopped").

Every transcript (each agent's session store windows and archives, lcm_etl/read/sessions/store_reads.py; legacy JSONL files,
transcript_offsets.py) is read, from its record or whole (transcript_decision.py), into the run file as it is read
(lcm_etl/read/sessions/run_file.py: its messages, parts, content, one row per transcript), before the target is looked at.
Under the run lock, the hints are settled and what must be read again whole is (one query over the run file, the
target and --src attached); DuckDB plans over the file once (reconcile_plan.py: r20/r60), r65 hands off,
r72/r80 write the content from the file, r95 records what the file says was read, and the report is a query over
it joined with the plan's counts per transcript. What cannot be read is a finding (lcm_etl/read/findings.py): a
warning, and the rest is written (--strict: exit 2, nothing written).
"""
from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

import duckdb

from lcm_etl import sqlite_runtime
from lcm_etl.sync import identity as source_identity
from lcm_etl.sync.decision import of_transcripts
from lcm_etl.read.snapshot import runfolder
from lcm_etl.store import ledger
from lcm_etl.planning import plan
from lcm_etl.run_options import ReconcileOptions
from lcm_etl.planning.reconcile_plan import open_plan, plan_transcripts, read_all, source_sessions, target_rows
from lcm_etl.read.sessions import transcript_decision as decide
from lcm_etl.read.findings import as_warning
from lcm_etl.read.sessions.run_file import loads
from lcm_etl.progress import Progress
from lcm_etl.report import RunReport, now_iso
from lcm_etl.store.runlock import target_lock
from lcm_etl.read.lcmdb.source_schema import detect_schema, normalized_views
from lcm_etl.read.snapshot.sqlite_copy import Snapshot, file_signature, take_snapshot
from lcm_etl.steps import pipeline
from lcm_etl.steps.engine import run_stage
from lcm_etl.store.target import check_target, target_view
from lcm_etl.read.sessions.transcript_reading import Reading
from lcm_etl.load.loader import choose, load
from lcm_etl.load.write import WriteJob


def reconcile(opts: ReconcileOptions) -> RunReport:
    # the run begins with reading the transcripts: its elapsed and the ledger's started_at count it (a first run
    # of a large store reads for most of its time)
    started, t0 = now_iso(), time.monotonic()
    # --src first: its key (the one migrate keys it on, lcm_etl/sync/identity.py) is what the records were made under
    bars = Progress(opts.progress)   # reading and planning; the writer draws its own (load)
    if opts.src and opts.src.is_file():   # else take_snapshot says what is wrong with it
        bars.phase("reading source", sum(side[1] for side in file_signature(opts.src) if side), unit="B")
    try:
        source = take_snapshot(opts.src, "source", progress=bars.count) if opts.src else None
    except BaseException:
        bars.close()
        raise
    read = report = None
    try:
        held_by = source_identity.of_snapshot(source.original, source.path).key if source else ""
        # where the last complete run stopped in each transcript
        with closing(decide.Records(absent=decide.FULL) if opts.full else
                     decide.recorded(opts.target, opts.dry_run)) as records:
            read = read_all(opts, records, held_by, bars)   # transcript problems first, then target problems, then a wait
        check_target(opts.target, open_it=not opts.dry_run, writes=True)
        with target_lock(opts.target, opts.lock_timeout, opts.dry_run):   # one run per target (lcm_etl/store/runlock.py)
            report = _reconcile(opts, read, source, held_by, started, t0, bars)
            return report
    finally:
        bars.close()
        if read is not None:   # the stores' snapshots kept for the next run once this one committed (OpenStore.close)
            kept = read.close(report.run_id if report is not None else None)
            if kept and report is not None:
                report.extra["kept_snapshot_bytes"] = kept
        if source is not None:
            source.close()


def _reconcile(opts: ReconcileOptions, read: Reading, source: Snapshot | None, held_by: str, started: str,
               t0: float, bars: Progress) -> RunReport:
    report = RunReport(command="reconcile", dry_run=opts.dry_run, source=str(opts.src) if opts.src else None,
                       target=str(opts.target))
    run = read.run
    existed = check_target(opts.target, open_it=not opts.dry_run, writes=True)
    view = None
    work = runfolder.Held()
    try:
        bars.phase("planning")
        view = target_view(opts.target, existed, private=opts.dry_run)
        target_db = view.path if view else opts.target if existed else None
        # each transcript read from a record the target no longer holds as it was, or into another session, the
        # others of its session, and a session whose held rows lack entry ids are read again whole (settle)
        if any(read.unchanged.values()):   # the records the unread windows stand on (none: the target went)
            last = None
            if target_db is not None:
                with closing(sqlite_runtime.connect(target_db)) as lite:
                    last = decide.last_records_run(lite)
            read.confirm_unchanged(last)
        con = open_plan(opts, source, Path(work.name))   # --src's sessions keyed once, by 10_sessions.sql
        try:
            held = (source.path, normalized_views(detect_schema(source.path, source.original), "sqlite"),
                    source_sessions(con)) if source else None
            rows = target_rows(read, target_db, Path(work.name), opts.session_filter)   # again if settle reads more
            read.read_whole(again := decide.settle(run.con, target_db, rows, held, opts.every_session))
            plan_transcripts(con, opts, read, target_db, Path(work.name), decide.sessions_from_records(run.con),
                             None if again else rows)
            _plan_counts(con, report)
            if opts.dry_run:   # a run that writes counts the seams 89 moves as it moves them (take_written)
                report.boundaries_moved = plan.boundaries_moving(target_db, report.sessions_touched,
                                                                 ledger.placed_by("reconcile", held_by or None))
                report.boundary_events -= report.boundaries_moved
            batches = plan.all_batches(con)
            report.batches = len(batches)
            if not opts.dry_run:
                run_stage(pipeline.RECONCILE_HANDOFF, con)
        finally:
            con.close()
        bars.close()   # before the writer's bars
        if opts.dry_run:
            _fill_files(report, read)
            report.elapsed_s = time.monotonic() - t0
            return report
        paths = sorted({r[0] for r in run.query("SELECT DISTINCT path FROM transcripts")} |   # a store's once,
                       {s["store"] for s in read.stores})   # its windows read or not
        record = ledger.RunRecord.new(
            "reconcile", started, {"sessions": paths, "session_filter": opts.session_filter, "key_by": opts.key_by},
            source_path=held_by or None, source_size=source.size if source else None)
        job = WriteJob(target=opts.target, stage=run.path, final_stage=pipeline.RECONCILE_RECORD, batches=batches,
                       params={"fired_at": started, "run_id": record.run_id, "key_by": opts.key_by,
                               "held_by": held_by}, record=record,
                       lock_timeout=opts.lock_timeout, progress=opts.progress)
        strategy = choose(opts.target, existed, (pipeline.RECONCILE_WRITE,), opts.lock_timeout)
        counts = load(job, strategy, now_iso)
        report.take_written(counts)
        _fill_files(report, read)
        report.run_id = record.run_id
        report.elapsed_s = time.monotonic() - t0
        return report
    except duckdb.Error as exc:
        raise plan.duck.translate(exc, "inputs could not be read") from None
    finally:
        if view:
            view.close()
        work.cleanup()


def _plan_counts(con, report: RunReport) -> None:
    """The plan's counts into the report, and per transcript into the run file (`file_counts`, by read order): its
    messages already held, new, matched by entry id, by identity, as a rewrite."""
    m = report.messages
    m.inserted = con.execute("SELECT count(*) FROM write_messages").fetchone()[0]
    # a message the target holds once, however many transcripts hold it (a store's archive row and its published
    # file): its first copy is counted
    m.already_present = con.execute("SELECT count(*) FROM jsonl_plan WHERE NOT is_new AND first").fetchone()[0]
    report.parts.inserted, report.parts.already_present = con.execute(
        "SELECT count(*) FILTER (WHERE w.message_id IS NOT NULL), count(*) FILTER (WHERE NOT j.is_new AND j.first) "
        "FROM jsonl_parts p "
        "JOIN jsonl_plan j USING (message_id) LEFT JOIN write_messages w USING (message_id)").fetchone()
    report.sessions_touched = [r[0] for r in con.execute("SELECT session_id FROM session_work ORDER BY 1").fetchall()]
    report.boundary_events = len(report.sessions_touched)
    report.extra["rewritten_in_place"] = con.execute("SELECT count(*) FROM jsonl_plan WHERE rewritten").fetchone()[0]
    off_path(con, report.extra)
    con.execute("""
        CREATE TABLE stage.file_counts AS
        SELECT file_order, count(*) FILTER (WHERE NOT is_new) AS present, count(*) FILTER (WHERE is_new) AS new,
               count(*) FILTER (WHERE matched_by = 'entry id') AS by_id,
               count(*) FILTER (WHERE matched_by = 'identity') AS by_identity,
               count(*) FILTER (WHERE matched_by = 'rewrite') AS rewrites
        FROM jsonl_plan GROUP BY 1""")


def off_path(con, extra: dict) -> None:
    """The target's rows of the run's sessions off the active path (kept, marked: r25_off_path.sql), and how many
    marks this run sets and removes."""
    extra["off_path"], extra["off_path_marked"], extra["back_on_path"] = con.execute(
        "SELECT count(*) FILTER (WHERE off), count(*) FILTER (WHERE off AND NOT marked), "
        "count(*) FILTER (WHERE marked AND NOT off) FROM off_path").fetchone()


# the report's entry per transcript: the run file's row joined with the plan's counts (a newcomer can run it by hand)
FILES = """
SELECT t.path, t.header_id, t.origin, t.read, t.why, t.messages, t.read_count, t.read_from, t.lines_read, t.report,
       t.where_kind, t.rec_parts, coalesce(c.present, 0), coalesce(c.new, 0), coalesce(c.by_id, 0), coalesce(c.by_identity, 0),
       coalesce(c.rewrites, 0), t.kind = 'archive' AND EXISTS (
           SELECT 1 FROM transcripts e WHERE e.kind = 'archive' AND e.session_id = t.session_id
           AND e.header_id = t.header_id AND e.file_order < t.file_order) AS copy
FROM transcripts t LEFT JOIN file_counts c USING (file_order) ORDER BY t.file_order"""


def _fill_files(report: RunReport, read: Reading) -> None:
    """The report's entry per transcript read, and what they add up to."""
    m = report.messages
    files = []
    names: dict[str, str] = {}   # a store's windows share its name: one string, not one an entry
    by_where: dict[str, int] = {}
    for (path, header_id, origin, how, why, on_path, count, read_from, lines_read, r, where, parts_before,
         present, new, by_id, by_identity, rewrites, copy) in read.run.query(FILES):
        r = loads(r)
        by_where[where] = by_where.get(where, 0) + 1
        if how == "appended":   # the messages before the offset: reconciled by the run that recorded it
            present += on_path - count
            if not copy:   # a second archive of the same window (a store row's published file): held once
                m.already_present += on_path - count
                report.parts.already_present += parts_before
        skipped = r.get("skipped_lines", ())
        files.append({"file": names.setdefault(path, path), "session_id": header_id, **loads(origin),
                      "messages_on_path": count if on_path is None else on_path, "read": how, "why": why,
                      "read_from_offset": read_from or 0,
                      "lines_read": r.get("lines_total", 0) if lines_read is None else lines_read,
                      "already_present": present, "imported": new, "matched_by_entry_id": by_id,
                      "matched_by_identity": by_identity, "matched_as_rewrite": rewrites,
                      "abandoned_branch_entries": r.get("abandoned_entries", 0),
                      "skipped_lines": [{"line": n, "reason": w} for n, w in skipped] or (),
                      "parent_gaps": r.get("gaps") or (), "replays": r.get("replays") or (),
                      "extra_headers": r.get("extra_headers") or (),
                      "unknown_entry_types": r.get("unknown_types", 0)})
        for n, w in skipped:
            report.warnings.append(f"{path}:{n}: skipped line ({w})")
        for gap in r.get("gaps", ()):
            report.warnings.append(f"{path}: entry {gap} points at a missing parent; the path continues with the "
                                   "entry before it")
    unread = [rec for windows in read.unchanged.values() for rec in windows.values()]
    m.already_present += sum(rec[1] for rec in unread)   # nothing past their records: held by the runs that made them
    report.parts.already_present += sum(rec[2] for rec in unread)
    report.warnings += [as_warning(f) for f in read.findings()]
    report.extra["files"] = files
    report.extra["files_skipped"] = [{"file": str(p), "reason": why} for p, why in read.skipped]
    report.extra["stores"] = read.stores
    report.extra["archives"] = read.archives
    report.extra["transcripts_read"] = len(files)
    report.extra["transcripts_by_where"] = by_where
    report.extra["lines_read"] = sum(f["lines_read"] for f in files)
    report.extra["files_read_from_offset"] = sum(f["read"] == "appended" for f in files)
    report.sync_decision = of_transcripts(files, len(unread)).as_dict()
