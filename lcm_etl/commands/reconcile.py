"""`reconcile`: crash recovery from OpenClaw's transcripts (docs/cli.md, docs/mapping.md).

Transcripts are each agent's session store windows (lcm_etl/read/openclaw/openclaw_store.py, store_reads.py) and legacy
JSONL files, read in Python (lcm_etl/read/transcript/transcripts.py: OpenClaw's active path, lossless-claw's identity and
token formula), handed to DuckDB as Arrow tables (or a Parquet spool: transcript_rows.IdentitySpool), matched
against what lcm.db and the target already hold by the declarative steps r20/r60
(lcm_etl/planning/reconcile_plan.py), staged by r65 and written by the shared SQLite writer. Every transcript is
read and validated before anything is written: one bad transcript means nothing is written.
"""
from __future__ import annotations

import sqlite3
import time
from array import array
from contextlib import closing
from pathlib import Path
from typing import Iterable

import duckdb

from lcm_etl.sync import identity as source_identity
from lcm_etl.sync.decision import of_transcripts
from lcm_etl.read.snapshot import runfolder
from lcm_etl.store import ledger
from lcm_etl.planning import plan
from lcm_etl.planning.reconcile_plan import ReconcileOptions, plan_transcripts, read_all
from lcm_etl.read import transcript_offsets as offsets
from lcm_etl.read import transcript_decision as decide
from lcm_etl.report import RunReport, now_iso
from lcm_etl.store.runlock import target_lock
from lcm_etl.read.lcmdb.sources import Snapshot, take_snapshot
from lcm_etl.steps import pipeline
from lcm_etl.steps.engine import run_stage
from lcm_etl.store.target import check_target, target_view
from lcm_etl.read.transcript_rows import IDENTITY_OCCURRENCE, file_sessions, stage_content
from lcm_etl.read.openclaw.openclaw_store import StoreWindow
from lcm_etl.read.store_reads import PendingOrigin, where_kind
from lcm_etl.read.transcript.transcripts import Transcript
from lcm_etl.read.transcript_reading import Reading
from lcm_etl.load.loader import choose, load
from lcm_etl.load.write import WriteJob


def reconcile(opts: ReconcileOptions) -> RunReport:
    # the run begins with reading the transcripts: its elapsed and the ledger's started_at count it (a first run
    # of a large store reads for most of its time)
    started, t0 = now_iso(), time.monotonic()
    # --src first: its key (the one migrate keys it on, lcm_etl/sync/identity.py) is what the records were made under
    source = take_snapshot(opts.src, "source") if opts.src else None
    read = report = None
    try:
        held_by = source_identity.of_snapshot(source.original, source.path).key if source else ""
        # where the last complete run stopped in each transcript
        with decide.recorded(opts.target, hint=True, dry_run=opts.dry_run) as records:
            read = read_all(opts, records, held_by)   # transcript problems first, then target problems, then a wait
        check_target(opts.target, open_it=not opts.dry_run)
        with target_lock(opts.target, opts.lock_timeout, opts.dry_run):   # one run per target (lcm_etl/store/runlock.py)
            report = _reconcile(opts, read, source, held_by, started, t0)
            return report
    finally:
        if read is not None:   # the stores' snapshots kept for the next run once this one committed (OpenStore.close)
            read.close(report.run_id if report is not None else None)
        if source is not None:
            source.close()


def _reconcile(opts: ReconcileOptions, read: Reading, source: Snapshot | None, held_by: str, started: str,
               t0: float) -> RunReport:
    report = RunReport(command="reconcile", dry_run=opts.dry_run, source=str(opts.src) if opts.src else None,
                       target=str(opts.target))
    transcripts = read.transcripts
    existed = check_target(opts.target, open_it=not opts.dry_run)
    view = None
    work = runfolder.Held()
    try:
        view = target_view(opts.target, existed, private=opts.dry_run)
        target_db = view.path if view else opts.target if existed else None
        sessions = file_sessions(transcripts, opts.key_by)
        # each transcript read from a record the target no longer holds as it was, or into another session, and
        # the others of its session, are read again whole (transcript_decision.settle)
        with decide.recorded(target_db) as records:
            read.read_whole(decide.settle(transcripts, sessions, records))
        appended = decide.sessions_from_records(transcripts, sessions)
        con = plan_transcripts(opts, read, target_db, source, Path(work.name), sessions, appended)
        # held rows without an entry id are matched by identity along the whole path: such a session is read whole
        by_identity = {r[0] for r in con.execute("SELECT DISTINCT session_id FROM held WHERE entry_id IS NULL AND "
                                                 "session_id IN (SELECT session_id FROM jsonl_appended)").fetchall()}
        if by_identity:
            con.close()
            read.read_whole(decide.in_sessions(transcripts, sessions, by_identity, decide.BY_IDENTITY))
            appended -= by_identity
            con = plan_transcripts(opts, read, target_db, source, Path(work.name), sessions, appended)
        try:
            per_file = _plan_counts(con, report, read)
            batches = plan.all_batches(con)
            report.batches = len(batches)
            if opts.dry_run:
                _fill_files(report, read, per_file)
                report.elapsed_s = time.monotonic() - t0
                return report
            # the stage file holds the store windows' content already (spooled as read: content_spool.py)
            stage_path = read.content.finish() if read.content is not None else Path(work.name) / "stage.sqlite"
            con.execute(IDENTITY_OCCURRENCE[0])
            stage_content(stage_path, transcripts, sessions, _rows(con.execute(IDENTITY_OCCURRENCE[1])))
            planned = {r[0] for r in con.execute("SELECT session_id FROM selected").fetchall()}
            _stage_offsets(stage_path, offsets.rows(transcripts, sessions, planned, opts.key_by, held_by))
            plan.duck.attach_sqlite(con, str(stage_path), "stage", read_only=False)
            run_stage(pipeline.RECONCILE_HANDOFF, con)
            con.execute("DETACH stage")
        finally:
            con.close()
        files = sorted(str(p) for p in transcripts.paths())
        transcripts.drop_content()   # the stage holds what is written now: free the parsed content before writing
        record = ledger.RunRecord.new(
            "reconcile", started, {"sessions": files, "session_filter": opts.session_filter, "key_by": opts.key_by},
            source_path=held_by or None, source_size=source.size if source else None,
            source_sha256=source.sha256 if source else None)
        job = WriteJob(target=opts.target, stage=stage_path, final_stage=pipeline.RECONCILE_RECORD, batches=batches,
                       params={"fired_at": started, "run_id": record.run_id}, record=record,
                       lock_timeout=opts.lock_timeout, progress=opts.progress)
        strategy = choose(opts.target, existed, (pipeline.RECONCILE_WRITE,), opts.lock_timeout)
        counts = load(job, strategy, now_iso)
        report.take_written(counts)
        marks = report.extra["off_path_marked"] + report.extra["back_on_path"]
        if counts.get("off_path_marks", 0) != marks:
            report.warnings.append(f"off_path_marks: planned {marks}, written {counts.get('off_path_marks', 0)} "
                                   "(the target changed during the run?)")
        # the report's entry per transcript is made once the run is written: 10,000 windows' entries (about 1 KB
        # each) are not held through the write (docs/benchmarks.md, 2026-11-26 22:21)
        _fill_files(report, read, per_file)
        report.run_id = record.run_id
        report.elapsed_s = time.monotonic() - t0
        return report
    except duckdb.Error as exc:
        raise plan.duck.translate(exc, "inputs could not be read") from None
    finally:
        if view:
            view.close()
        work.cleanup()


PER_FILE = 5   # the plan's counts kept per transcript (_plan_counts)


def _rows(cur):
    """A DuckDB result's rows, a batch at a time (a first run writes every message: no list of them all)."""
    while batch := cur.fetchmany(10_000):
        yield from batch


def _stage_offsets(stage: Path, rows: Iterable[tuple]) -> None:
    """How far this run read each file, for r95_record_offsets.sql to record in the run's last transaction."""
    with closing(sqlite3.connect(stage, isolation_level=None)) as con:
        con.execute("CREATE TABLE transcript_files (path TEXT PRIMARY KEY, size INTEGER, sha256 TEXT, lines INTEGER, "
                    "messages INTEGER, tip TEXT, header_id TEXT, version INTEGER, session_id TEXT, key_by TEXT, "
                    "held_by TEXT)")
        con.execute("BEGIN")   # one transaction: a row each committed on its own cost 10,000 windows seconds
        con.executemany("INSERT INTO transcript_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        con.execute("COMMIT")


def _origin(t: Transcript) -> dict:
    """A transcript's kind (file / window / archive) and, for a store window, how OpenClaw's own path compares."""
    if isinstance(t.origin, StoreWindow):
        return {"kind": "window", "window": t.origin.session_id, "session_key": t.origin.session_key,
                "projection": t.report.projection, **({"cold": t.origin.cold} if t.origin.cold else {})}
    if isinstance(t.origin, PendingOrigin):
        return {"kind": "pending input", "window": t.origin.input.session_id, "session_key": t.origin.session_key,
                "pending_state": t.origin.input.state}
    return {"kind": "archive" if t.origin is not None else "file"}


def _plan_counts(con, report: RunReport, read: Reading) -> array:
    """The plan's counts into the report, and per transcript (by read order, five to a transcript): its messages
    already held, new, matched by entry id, by identity, as a rewrite."""
    m = report.messages
    m.inserted = con.execute("SELECT count(*) FROM write_messages").fetchone()[0]
    m.already_present = con.execute("SELECT count(*) FROM jsonl_plan WHERE NOT is_new").fetchone()[0]
    report.parts.inserted, report.parts.already_present = con.execute(
        "SELECT count(*) FILTER (WHERE w.message_id IS NOT NULL), count(*) FILTER (WHERE NOT j.is_new) FROM jsonl_parts p "
        "JOIN jsonl_plan j USING (message_id) LEFT JOIN write_messages w USING (message_id)").fetchone()
    report.sessions_touched = [r[0] for r in con.execute("SELECT session_id FROM session_work ORDER BY 1").fetchall()]
    report.boundary_events = len(report.sessions_touched)
    report.extra["rewritten_in_place"] = con.execute("SELECT count(*) FROM jsonl_plan WHERE rewritten").fetchone()[0]
    off_path(con, report.extra)
    per_file = array("q", bytes(8 * PER_FILE * len(read.transcripts)))
    cur = con.execute("""
        SELECT file_order, count(*) FILTER (WHERE NOT is_new), count(*) FILTER (WHERE is_new),
               count(*) FILTER (WHERE matched_by = 'entry id'), count(*) FILTER (WHERE matched_by = 'identity'),
               count(*) FILTER (WHERE matched_by = 'rewrite')
        FROM jsonl_plan GROUP BY 1""")
    for r in _rows(cur):
        per_file[PER_FILE * r[0]:PER_FILE * (r[0] + 1)] = array("q", r[1:])
    return per_file


def off_path(con, extra: dict) -> None:
    """The target's rows of the run's sessions off the active path (kept, marked: r25_off_path.sql), and how many
    marks this run sets and removes."""
    extra["off_path"], extra["off_path_marked"], extra["back_on_path"] = con.execute(
        "SELECT count(*) FILTER (WHERE off), count(*) FILTER (WHERE off AND NOT marked), "
        "count(*) FILTER (WHERE marked AND NOT off) FROM off_path").fetchone()


def _fill_files(report: RunReport, read: Reading, per_file: array) -> None:
    """The report's entry per transcript read, and what they add up to."""
    transcripts = read.transcripts
    m = report.messages
    files = []
    names: dict[Path, str] = {}   # a store's windows share its name: one string, not one an entry
    by_where: dict[str, int] = {}
    for order, t in enumerate(transcripts):
        where = where_kind(t)
        by_where[where] = by_where.get(where, 0) + 1
        present, new, by_id, by_identity, rewrites = per_file[PER_FILE * order:PER_FILE * (order + 1)]
        r = t.report
        mark = t.mark
        appended = decide.from_record(t)
        if appended and mark is not None:   # the messages before the offset: reconciled by the run that recorded it
            present += mark.messages - t.count()
            m.already_present += mark.messages - t.count()
        files.append({"file": names.setdefault(t.path, str(t.path)), "session_id": t.header_id, **_origin(t),
                      "messages_on_path": mark.messages if mark else t.count(),
                      "read": "appended" if appended else "whole", "why": None if appended else t.why_whole,
                      "read_from_offset": mark.read_from if mark else 0,
                      "lines_read": mark.lines_read if mark else r.lines_total,
                      "already_present": present, "imported": new, "matched_by_entry_id": by_id,
                      "matched_by_identity": by_identity, "matched_as_rewrite": rewrites, "abandoned_branch_entries": r.abandoned_entries,
                      "skipped_lines": [{"line": n, "reason": why} for n, why in r.skipped_lines] or (),
                      "parent_gaps": list(r.gaps) or (), "replays": list(r.replays) or (),
                      "extra_headers": list(r.extra_headers) or (),
                      "unknown_entry_types": r.unknown_types})
        for n, why in r.skipped_lines:
            report.warnings.append(f"{t.path}:{n}: skipped line ({why})")
        for gap in r.gaps:
            report.warnings.append(f"{t.path}: entry {gap} points at a missing parent; the path continues with the "
                                   "entry before it")
    for f in read.findings():
        report.warnings.append(f"{f['kind']} {f['source_id']}" + (f" (window {f['session_id']})" if f["session_id"]
                                                                   else "") + f": {f['problem']}; {f['detail']}")
    report.extra["files"] = files
    report.extra["files_skipped"] = [{"file": str(p), "reason": why} for p, why in read.skipped]
    report.extra["stores"] = read.stores
    report.extra["archives"] = read.archives
    report.extra["transcripts_read"] = len(transcripts)
    report.extra["transcripts_by_where"] = by_where
    report.extra["lines_read"] = sum(f["lines_read"] for f in files)
    report.extra["files_read_from_offset"] = sum(f["read"] == "appended" for f in files)
    report.sync_decision = of_transcripts(files).as_dict()
