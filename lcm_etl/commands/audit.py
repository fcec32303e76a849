"""`audit`: a read-only comparison of the sources with the target, for CI (exit 0 clean, 3 pending).

It runs the same plan as `migrate` (and `reconcile` for --sessions) on private copies of the source
and the target, so "what a run would write now" is exactly what the run would write; then the audit
queries of transforms/a10_audit_source.sql list every offending fact. Nothing is written anywhere:
a missing target holds nothing: everything is pending (exit 3, the finding named first); it is never created.
"""
from __future__ import annotations

import hashlib
import shlex
from lcm_etl.sqlite_runtime import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb

from lcm_etl import duck
from lcm_etl.sync import identity as source_identity
from lcm_etl.read.snapshot import runfolder
from lcm_etl.planning import plan
from lcm_etl.run_options import ReconcileOptions
from lcm_etl.read.findings import FINDING_KEYS
from lcm_etl.progress import Progress
from lcm_etl.planning.reconcile_plan import open_plan, plan_transcripts, read_all
from lcm_etl.report import RunReport, one_line_each, plural, unknown_lines
from lcm_etl.read.lcmdb.source_schema import detect_schema, normalized_views
from lcm_etl.read.snapshot.sqlite_copy import Snapshot, take_snapshot
from lcm_etl.sqlite_runtime import attach_all, has_table, private_file, quote_path, uri
from lcm_etl.steps.pipeline import AUDIT_SOURCE
from lcm_etl.steps.engine import run_stage
from lcm_etl.store.target import check_target, target_view

# Content is compared by hashes computed in SQLite (content_hashes below), joined here by key: DuckDB
# never reads a content column, so a value of any size stays out of its memory budget.
_DETAIL = {
    "tgt_detail": """SELECT t.id, t.role, h.content_hash, t.token_count, try_cast(t.created_at AS TIMESTAMPTZ) AS ts
                     FROM tgt.lcm_messages t LEFT JOIN hashes.tgt_message_hashes h ON h.id = t.id
                     WHERE t.id IN (SELECT tid_present FROM msg_plan)""",
    "tgt_part_keys": """SELECT message_id, ordinal FROM tgt.lcm_message_parts
                        WHERE message_id IN (SELECT tid_present FROM msg_plan)""",
    "tgt_summary_detail": """SELECT t.id, t.session_id, t.depth, t.parent_id, h.text_hash, t.token_count,
                                    t.msg_start, t.msg_end
                             FROM tgt.lcm_summary_nodes t LEFT JOIN hashes.tgt_summary_hashes h ON h.id = t.id""",
    "tgt_provenance_summaries": "SELECT summary_id, session_id FROM tgt.lcm_etl_summaries",
    "tgt_skipped": "SELECT source_id FROM tgt.lcm_etl_skipped WHERE kind = 'summary'",
}
_DETAIL_EMPTY = {
    "tgt_detail": "SELECT NULL::BIGINT AS id, NULL::VARCHAR AS role, NULL::VARCHAR AS content_hash, "
                  "NULL::BIGINT AS token_count, NULL::TIMESTAMPTZ AS ts WHERE false",
    "tgt_part_keys": "SELECT NULL::BIGINT AS message_id, NULL::BIGINT AS ordinal WHERE false",
    "tgt_summary_detail": "SELECT NULL::VARCHAR AS id, NULL::VARCHAR AS session_id, NULL::BIGINT AS depth, "
                          "NULL::VARCHAR AS parent_id, NULL::VARCHAR AS text_hash, NULL::BIGINT AS token_count, "
                          "NULL::BIGINT AS msg_start, NULL::BIGINT AS msg_end WHERE false",
    "tgt_provenance_summaries": "SELECT NULL::VARCHAR AS summary_id, NULL::VARCHAR AS session_id WHERE false",
    "tgt_skipped": "SELECT NULL::VARCHAR AS source_id WHERE false",
}
_NEEDS = {"tgt_detail": "lcm_messages", "tgt_part_keys": "lcm_message_parts", "tgt_summary_detail": "lcm_summary_nodes",
          "tgt_provenance_summaries": "lcm_etl_summaries", "tgt_skipped": "lcm_etl_skipped"}


@dataclass
class AuditOptions:
    target: Path
    src: Path | None
    sessions: list[str] = field(default_factory=list)
    session_filter: list[str] = field(default_factory=list)
    key_by: str = "session-id"
    memory_limit: str = duck.DEFAULT_MEMORY_LIMIT
    # --sessions without --src: the lcm.db the other commands default to. Read when it exists (the target must
    # hold its messages too); when it does not, the transcripts are audited alone and the report says so.
    default_src: Path | None = None
    # read the transcripts reconcile reads by default (every agent's store and legacy JSONL under
    # $OPENCLAW_STATE_DIR) although --sessions names none: `audit` run with no input named audits the installation
    default_transcripts: bool = False
    exclude_deleted: bool = False
    strict: bool = False   # an unparsable line or a finding of the transcripts' read is bad input (exit 2)
    progress: bool = False   # a terminal's ticker while the transcripts are read, and the planning after


# extra's "<kind> kept, no longer in the source": rows the source deleted that the target keeps (counted, not findings)
KEPT = " kept, no longer in the source"


@dataclass
class Audited:
    report: RunReport
    findings: list[dict]
    sessions: set[str] = field(default_factory=set)   # every session audited, clean or not (audit --junit)

    def as_dict(self) -> dict:
        return {**self.report.as_dict(), "differences": self.findings}

    def as_text(self) -> str:
        return as_text(self.report, self.findings)


def audit(opts: AuditOptions) -> Audited:
    t0 = time.monotonic()
    if opts.src is None and opts.default_src is not None:
        opts = replace(opts, src=opts.default_src if opts.default_src.exists() else None)
    report = RunReport(command="audit", dry_run=True, source=str(opts.src) if opts.src else None,
                       target=str(opts.target))
    existed = check_target(opts.target, open_it=False)
    snaps = []
    findings: list[dict] = []
    sessions: set[str] = set()
    try:
        view = target_view(opts.target, existed, private=True)
        if view:
            snaps.append(view)
        target_db = view.path if view else None
        if opts.src is None and opts.default_src is not None:
            report.extra["lcm_db_not_found"] = str(opts.default_src)
        source = take_snapshot(opts.src, "source") if opts.src else None
        if source is not None:
            snaps.append(source)
            findings += _audit_source(opts, source, target_db, report, sessions)
        if opts.sessions or opts.default_transcripts:
            findings += _audit_transcripts(opts, source, target_db, report, sessions)
        # a target that is not there holds none of it: everything is pending (exit 3), said first and named,
        # so that a wrong --dest reads as one
        if not existed:
            findings.insert(0, dict(zip(FINDING_KEYS, ("target", "target does not exist", None, str(opts.target),
                                                       "everything the sources hold is pending: check --dest, or run "
                                                       "reconcile or migrate first"))))
    except duckdb.Error as exc:
        raise duck.translate(exc, "inputs could not be read") from None
    finally:
        for s in snaps:
            s.close()
    report.extra["findings"] = len(findings)
    report.extra["findings_by_problem"] = dict(Counter(f"{f['kind']}: {f['problem']}" for f in findings))
    report.elapsed_s = time.monotonic() - t0
    return Audited(report, findings, sessions)


def _audit_source(opts: AuditOptions, source: Snapshot, target_db: Path | None, report: RunReport,
                  sessions: set[str]) -> list[dict]:
    schema = detect_schema(source.path, source.original)
    report.source_schema = schema.generation
    report.unknown_in_source = schema.unknown()
    hashes = content_hashes(source.folder / "hashes.sqlite", source.path, schema, target_db)
    con = plan.open_source(source.path, schema, source.original, opts.memory_limit, keeps_records=False)
    try:
        identity = source_identity.of_snapshot(source.original, source.path)
        reader = plan.TargetReader(con, target_db, source.folder)
        reader.provenance()
        reader.state(source=plan.SourceRows(source.path, normalized_views(schema, "sqlite")))
        planned = plan.build(con, opts.key_by, opts.session_filter, 50_000, identity.key, label=str(source.original))
        plan.report_plan(con, report, planned, filtered=bool(opts.session_filter))
        duck.attach_sqlite(con, str(hashes), "hashes")
        for name in ("src_message_hashes", "src_summary_hashes"):
            con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM hashes.{name}")
        tables: set[str] = set()
        if target_db is not None:
            duck.attach_sqlite(con, str(target_db), "tgt")
            tables = {r[0] for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'tgt'").fetchall()}
        for name, sql in _DETAIL.items():
            con.execute(f"CREATE OR REPLACE TABLE {name} AS "
                        f"{sql if _NEEDS[name] in tables else _DETAIL_EMPTY[name]}")
        if target_db is not None:
            con.execute("DETACH tgt")
        con.execute("DETACH hashes")
        run_stage(AUDIT_SOURCE, con)
        for kind, n in con.execute("SELECT kind, n FROM audit_archive WHERE n > 0 ORDER BY kind").fetchall():
            report.extra[f"{kind}{KEPT}"] = n
        sessions.update(r[0] for r in con.execute("SELECT session_id FROM selected").fetchall())
        rows = con.execute("SELECT * FROM audit_findings ORDER BY kind, session_id, source_id").fetchall()
        return [dict(zip(FINDING_KEYS, r)) for r in rows] + _unknown_history(schema, source.original)
    finally:
        con.close()


def _unknown_history(schema, src: Path) -> list[dict]:
    """A table a newer lossless-claw added that holds message or conversation ids: what lcm-etl leaves out of it may
    be history, so it is a finding, not only the report's "not kept" line."""
    ids = {"message_id", "conversation_id", "session_id", "summary_id"}
    return [dict(zip(FINDING_KEYS, ("source table", "unknown, holds conversation rows: not kept", None,
                                    f"{src}#{table}", f"columns {', '.join(sorted(ids & set(schema.columns[table])))}; "
                                                      "a newer lossless-claw's: lcm-etl does not know it")))
            for table in schema.unknown()["tables_not_kept"] if ids & set(schema.columns[table])]


def content_hashes(path: Path, src_db: Path, schema, target_db: Path | None) -> Path:
    """A file of SHA-256 hashes of every source and target message content and summary text, computed by
    SQLite one row at a time (a value of N MB costs a few times N), keyed by source id as text and by
    target id. Both sides hash the stored bytes (CAST AS BLOB), so no text is decoded on the way."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        con.create_function("sha256_hex", 1, _sha256_hex, deterministic=True)
        private_file(con, cache_kib=2048)
        attach_all(con, {"src": src_db}, normalized_views(schema, "sqlite"))
        con.execute("CREATE TABLE src_message_hashes (message_key TEXT, content_hash TEXT)")
        con.execute("INSERT INTO src_message_hashes SELECT CAST(message_id AS TEXT), "
                    "sha256_hex(CAST(content AS BLOB)) FROM src_messages")
        con.execute("CREATE TABLE src_summary_hashes (summary_key TEXT, text_hash TEXT)")
        con.execute("INSERT INTO src_summary_hashes SELECT CAST(summary_id AS TEXT), "
                    "sha256_hex(CAST(content AS BLOB)) FROM src_summaries")
        held: set[str] = set()
        if target_db is not None:
            con.execute(f"ATTACH '{quote_path(target_db)}' AS tgt")
            held = {r[0] for r in con.execute("SELECT name FROM tgt.sqlite_master WHERE type = 'table'")}
        message_rows = ("SELECT id, sha256_hex(CAST(content AS BLOB)) FROM tgt.lcm_messages"
                        if "lcm_messages" in held else "SELECT NULL, NULL WHERE 0")
        summary_rows = ("SELECT id, sha256_hex(CAST(summary_text AS BLOB)) FROM tgt.lcm_summary_nodes"
                        if "lcm_summary_nodes" in held else "SELECT NULL, NULL WHERE 0")
        con.execute("CREATE TABLE tgt_message_hashes (id INTEGER PRIMARY KEY, content_hash TEXT)")
        con.execute(f"INSERT INTO tgt_message_hashes {message_rows}")
        con.execute("CREATE TABLE tgt_summary_hashes (id TEXT PRIMARY KEY, text_hash TEXT)")
        con.execute(f"INSERT INTO tgt_summary_hashes {summary_rows}")
    finally:
        con.close()
    return path


def _sha256_hex(value: bytes | None) -> str | None:
    return None if value is None else hashlib.sha256(value).hexdigest()


def _audit_transcripts(opts: AuditOptions, source: Snapshot | None, target_db: Path | None,
                       report: RunReport, sessions: set[str]) -> list[dict]:
    ropts = ReconcileOptions(sessions=opts.sessions, target=opts.target, src=opts.src, dry_run=True,   # read-only
                             session_filter=opts.session_filter, key_by=opts.key_by, memory_limit=opts.memory_limit,
                             exclude_deleted=opts.exclude_deleted, strict=opts.strict, content=True)
    bars = Progress(opts.progress)
    try:
        reading = read_all(ropts, bars=bars)
        bars.phase("planning")
    except BaseException:
        bars.close()
        raise
    work = runfolder.Held()
    con = None
    try:
        con = plan_transcripts(open_plan(ropts, source, Path(work.name)), ropts, reading, target_db, Path(work.name))
        bars.close()
        report.extra["transcripts_read"] = reading.run.count
        report.extra["stores"] = reading.stores
        report.extra["archives"] = reading.archives
        # each missing message says where its history lives (a cold window, an archive, a pending input...)
        rows = con.execute("""
            SELECT 'transcript message', 'missing in target', p.session_id,
                   t.path || ':' || coalesce(m.entry_id, '#' || (p.path_index + 1)), m.role, t.where_kind
            FROM jsonl_plan p JOIN jsonl_messages m USING (message_id) JOIN stage.transcripts t ON t.file_order = p.file_order
            WHERE p.is_new ORDER BY p.session_id, p.file_order, p.path_index""").fetchall()
        if rows:
            report.extra["transcript_messages_pending_by_where"] = dict(Counter(r[5] for r in rows))
        rows = [(*r[:4], f"{r[4]}, {r[5]}") for r in rows]
        report.extra["transcript_messages_pending"] = len(rows)
        if rows:   # what a reconcile would import, this reconcile imports (a re-run reads whole what the target lost)
            report.extra["repair"] = repair_command(opts)
        # rows a branch left after they were imported: kept (the target is the archive), never missing
        report.extra["transcript_rows_off_path"] = con.execute(
            "SELECT count(*) FILTER (WHERE off) FROM off_path").fetchone()[0]
        sessions.update(r[0] for r in con.execute("SELECT DISTINCT session_id FROM jsonl_plan").fetchall())
        rows += _stored_as_read(reading.run, target_db)
        # history a source holds and no run can read (a cold archive missing or failing verification): never clean
        return [dict(zip(FINDING_KEYS, r)) for r in rows] + reading.findings()
    finally:
        bars.close()
        if con is not None:
            con.close()
        reading.close()
        work.cleanup()


# each message a transcript holds with an entry id is in the target once, as read: an entry id twice in a session is
# a duplicate; a row whose content is not its transcript's first copy's (the one a reconcile lands), although the
# row's identity is still the transcript's (OpenClaw rewriting an entry in place changes both: that row is kept as
# imported, r20_match.sql), was changed in the target. Compared in SQLite, on the run file: the content never goes
# through Python or DuckDB.
_STORED_AS_READ = """
WITH held AS MATERIALIZED (   -- the target's transcript rows, their metadata read once for both checks
  SELECT id, session_id, json_extract(metadata, '$.transcript_entry_id') AS entry_id,
         json_extract(metadata, '$.identity_hash') AS identity_hash
  FROM target.lcm_messages
  WHERE json_valid(metadata) AND json_extract(metadata, '$.source') = 'openclaw-jsonl'),   -- an lcm.db row's twin: a10's finding
first AS (SELECT min(message_id) AS message_id FROM main.jsonl_messages WHERE entry_id IS NOT NULL
          GROUP BY session_id, entry_id)
SELECT 'transcript message', 'duplicated in target', session_id, entry_id,
       count(*) || ' rows: ' || group_concat(id, ', ')
FROM held WHERE entry_id IS NOT NULL GROUP BY session_id, entry_id HAVING count(*) > 1   -- every session's: one
UNION ALL                                                                               -- whose source is unreadable too
SELECT 'transcript message', 'changed in target', m.session_id, tr.path || ':' || m.entry_id,
       'row ' || t.id || ': its content is not the transcript''s'
FROM first JOIN main.jsonl_messages m USING (message_id) JOIN main.jsonl_content c USING (message_id)
JOIN main.transcripts tr USING (file_order)
JOIN held h ON h.session_id = m.session_id AND h.entry_id = m.entry_id AND h.identity_hash IS m.identity_hash
JOIN target.lcm_messages t ON t.id = h.id
WHERE CAST(t.content AS BLOB) IS NOT CAST(c.content AS BLOB)
ORDER BY 3, 4"""


def _stored_as_read(run, target_db: Path | None) -> list[tuple]:
    if target_db is None:
        return []
    run.flush()
    con = run.con
    con.execute("ATTACH ? AS target", (uri(target_db),))
    try:
        if not has_table(con, "lcm_messages", "target"):
            return []
        return con.execute(_STORED_AS_READ).fetchall()
    finally:
        con.execute("DETACH target")


def repair_command(opts: AuditOptions) -> str:
    """The reconcile that imports what this audit found missing: the same sources, target and options."""
    args = ["lcm-etl", "reconcile", *(a for p in opts.sessions for a in ("--sessions", str(p)))]
    args += ["--src", str(opts.src)] if opts.src is not None and opts.default_src is None else []
    args += ["--dest", str(opts.target)]
    args += ["--key-by", opts.key_by] if opts.key_by != "session-id" else []
    args += [a for f in opts.session_filter for a in ("--session-filter", f)]
    args += ["--exclude-deleted"] if opts.exclude_deleted else []
    return shlex.join(args)


def as_text(report: RunReport, findings: list[dict], per_kind: int = 5) -> str:
    lines = [f"lcm-etl audit: {'CLEAN - the target holds every source fact' if not findings else 'PENDING'}"]
    if report.source:
        lines.append(f"  source:  {report.source}" + (f"  [{report.source_schema}]" if report.source_schema else ""))
    if "lcm_db_not_found" in report.extra:
        lines.append(f"  lcm.db:  none at {report.extra['lcm_db_not_found']} (pass --src to audit one elsewhere); "
                     "transcripts audited alone")
    lines.append(f"  target:  {report.target}")
    if report.source:
        lines.append(f"  a migrate would write: {plural(report.messages.inserted, 'message')}, "
                     f"{plural(report.parts.inserted, 'part')}, {plural(report.summaries.inserted, 'summary', 'summaries')}, "
                     f"{plural(report.boundary_events, 'boundary event')}")
    if "transcript_messages_pending" in report.extra:
        by_where = report.extra.get("transcript_messages_pending_by_where", {})
        lines.append(f"  a reconcile would import: {plural(report.extra['transcript_messages_pending'], 'transcript message')}"
                     + (" (" + ", ".join(f"{w}: {n}" for w, n in sorted(by_where.items())) + ")" if by_where else ""))
    if "repair" in report.extra:
        lines.append(f"  repair:  {report.extra['repair']}")
    if report.extra.get("transcript_rows_off_path"):
        lines.append(f"  rows off the active path (kept, marked off_path by reconcile): "
                     f"{report.extra['transcript_rows_off_path']}")
    lines += [f"  {key}: {n}" for key, n in sorted(report.extra.items()) if key.endswith(KEPT)]
    shown: dict[str, int] = {}
    for f in findings:
        key = f"{f['kind']}: {f['problem']}"
        shown[key] = shown.get(key, 0) + 1
        if shown[key] <= per_kind:
            lines.append(f"  {key}  " + (f"session {f['session_id']}  " if f["session_id"] else "") + f"{f['source_id']}" +
                         (f"  ({f['detail']})" if f["detail"] else ""))
    for key, n in sorted(report.extra.get("findings_by_problem", {}).items()):
        if n > per_kind:
            lines.append(f"  {key}: {n - per_kind} more (see --json)")
    lines += unknown_lines(report.unknown_in_source)
    lines += [f"  warning: {w}" for w in report.warnings]
    lines.append(f"  {plural(len(findings), 'finding')}; elapsed {report.elapsed_s:.2f} s")
    return one_line_each(lines)
