"""Reconcile's plan of the transcripts (and audit's, with --sessions): the run file every transcript was read into
(lcm_etl/read/sessions/run_file.py) attached to DuckDB as `stage`, its identity columns viewed, the rows lcm.db and the
target already hold loaded beside them, and the steps r20/r60 run on them (the RECONCILE pipeline, lcm_etl/steps/pipeline.py). The command
(lcm_etl/commands/reconcile.py) stages and writes what this plans; audit reports what it would write.
"""
from __future__ import annotations

import functools
from contextlib import closing
from pathlib import Path

from lcm_etl import sqlite_runtime
from lcm_etl.errors import BadInput
from lcm_etl.run_options import ReconcileOptions
from lcm_etl.planning import plan
from lcm_etl.read.lcmdb.source_schema import detect_schema
from lcm_etl.read.lcmdb import subset
from lcm_etl.read.sessions import transcript_decision as decide
from lcm_etl.read.snapshot.sqlite_copy import Snapshot
from lcm_etl.read.sessions.transcript_reading import Reading, read_all as read_all   # the commands read through the plan
from lcm_etl.steps import pipeline
from lcm_etl.steps.engine import run_stage
from lcm_etl.store.target import REMNIC_TABLES

# read by the plan's steps only (r20, 57): dropped once it has run
DROPPED_AFTER_PLAN = ("held_lcm", "batch_input")
# what r05_target_state.sql reads of the target, and the sessions' rows of each
TARGET_ROWS = [(t.name, t.scope_rows) for t in REMNIC_TABLES if t.name in ("lcm_messages", "lcm_compaction_events")]
# the sessions of which this run read a line: read whole, or lines past a record (a pending input is read whole)
READ_SESSIONS = "SELECT DISTINCT session_id FROM transcripts WHERE read = 'whole' OR lines_read > 0 ORDER BY 1"
# the run file's columns the plan reads (identities; content stays in the file for r72/r80)
VIEWS = {"jsonl_messages": "message_id, file_order, path_index, session_id, entry_id, role, token_count, identity_hash, "
                           "created_iso, inner_ts",
         "jsonl_parts": "message_id, ordinal", "jsonl_abandoned": "file_order, session_id, entry_id, role, inner_ts"}
_HELD_LCM_EMPTY = ("SELECT NULL::VARCHAR AS session_id, NULL::VARCHAR AS conv_key, NULL::BIGINT AS seq, "
                   "NULL::VARCHAR AS entry_id, NULL::VARCHAR AS identity_hash WHERE false")


def open_plan(opts: ReconcileOptions, source: Snapshot | None, workdir: Path):
    """The plan database, with --src's views and its conversations keyed into sessions by 10_sessions.sql
    (`sessions`): settle reads that key (`source_sessions`) before plan_transcripts plans."""
    # the plan's tables in a compressed in-memory database, compressed at each checkpoint: uncompressed, a
    # re-run's tables grew with the new rows (1 % appended to a 5,000,000-event store: 41 MB against 10 at 500,000)
    con = plan.duck.connect(workdir, opts.memory_limit, keeps_records=not opts.dry_run, compressed=True)
    try:
        if source is not None:
            schema = detect_schema(source.path, source.original)
            plan.duck.attach_sqlite(con, str(source.path), "src")
            for name, sql in plan.normalized_views(schema, "duckdb").items():
                con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {sql}")
            run_stage(pipeline.HELD_SESSIONS, con, {"key_by": opts.key_by, "ws": plan.WHITESPACE})
        return con
    except BaseException:
        con.close()
        raise


def source_sessions(con) -> list[tuple]:
    """Each --src conversation and the session 10_sessions.sql keyed it into (open_plan, with --src)."""
    return con.execute("SELECT conversation_id, session_id FROM sessions").fetchall()


def plan_transcripts(con, opts: ReconcileOptions, reading: Reading, target_db: Path | None, workdir: Path,
                     appended: frozenset[str] | set[str] = frozenset(), rows: Path | None = None):
    """The held rows loaded into the plan database (open_plan) beside the run file (attached as `stage`, its
    identity columns viewed as jsonl_messages, jsonl_parts, jsonl_abandoned), and the plan steps r20/r60 run on them.

    target_db is the target to read (callers pass a private snapshot when nothing may be written, e.g.
    dry-run and audit); `rows`, its rows of the sessions read (target_rows), when taken since the run file last
    changed. Returns the connection, holding jsonl_plan, write_messages and session_work.
    """
    reading.run.flush()
    checkpoint = functools.partial(plan.duck.checkpoint, con)
    try:
        # views, not tables: the steps read the run file's rows where they are (never its content)
        plan.duck.attach_sqlite(con, str(reading.run.path), "stage", read_only=False)
        for name, cols in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS SELECT {cols} FROM stage.{name}")
        con.execute("CREATE TABLE jsonl_sessions AS SELECT DISTINCT session_id FROM jsonl_messages")
        con.execute("CREATE TABLE jsonl_appended (session_id VARCHAR)")
        # every session of which this run read a line (within --session-filter), new messages or none: its rows
        # marked off the active path are counted and marked again (r05_target_state.sql, r25_off_path.sql). A
        # session every transcript of which is unchanged since its record has the path it had: nothing to mark
        con.execute("CREATE TABLE run_sessions (session_id VARCHAR PRIMARY KEY)")
        run_sessions = _run_sessions(reading, opts.session_filter)
        # one parameter each: a row each through executemany cost 1 s of a 1,000-window re-run
        for table, ids in (("run_sessions", run_sessions), ("jsonl_appended", sorted(appended))):
            con.execute(f"INSERT INTO {table} SELECT unnest(from_json($ids, '[\"VARCHAR\"]'))", {"ids": plan.duck.strings(ids)})
        _select(con, opts.session_filter)
        if opts.src:   # open_plan keyed its sessions
            con.execute("""CREATE TABLE held_lcm AS
                SELECT s.session_id, s.conv_key, m.seq, nullif(trim(m.transcript_entry_id), '') AS entry_id, m.identity_hash
                FROM src_messages m JOIN sessions s USING (conversation_id)
                WHERE s.session_id IN (SELECT session_id FROM jsonl_sessions)""")
        else:
            con.execute(f"CREATE TABLE held_lcm AS {_HELD_LCM_EMPTY}")
        # the plan needs the target only for the sessions read (their rows held, turns, boundaries)
        plan.duck.attach_sqlite(con, str(rows or target_rows(reading, target_db, workdir, opts.session_filter)), "tgt")
        run_stage(pipeline.RECONCILE_TARGET, con, after_each=checkpoint)
        con.execute("DETACH tgt")
        run_stage(pipeline.RECONCILE_PLAN, con, {"budget": opts.batch_rows}, after_each=checkpoint)
        for name in DROPPED_AFTER_PLAN:
            con.execute(f"DROP TABLE {name}")
        con.execute("DROP VIEW jsonl_abandoned")
        checkpoint()
        return con
    except BaseException:
        con.close()
        raise


def target_rows(reading: Reading, target_db: Path | None, workdir: Path, session_filter: list[str]) -> Path:
    """The target as the plan and settle read it: an empty Remnic schema when there is none yet (or no messages
    table); the rows of the sessions read (run_sessions, jsonl_sessions), with the index settle reads
    (decide.BARE_INDEX), when they are fewer than half the transcripts' sessions (a sync: DuckDB's scanner reads a
    table whole, 1.5 s of a 2.9 s sync at 500,000 events); else the whole target (a first run, an undo)."""
    if target_db is None:
        return plan.empty_target(workdir)
    with closing(sqlite_runtime.connect(target_db)) as lite:
        if not sqlite_runtime.has_table(lite, "lcm_messages"):
            return plan.empty_target(workdir)
    read = {*_run_sessions(reading, session_filter),
            *(r[0] for r in reading.run.query("SELECT DISTINCT session_id FROM transcripts WHERE read_count > 0"))}
    every = reading.run.query("SELECT count(DISTINCT session_id) FROM transcripts").fetchone()[0]
    if 2 * len(read) >= every + sum(map(len, reading.unchanged.values())):   # an unread window: a session of its own
        return target_db
    return subset.target_subset(target_db, workdir / "target-sessions.sqlite", sorted(read - {None}), TARGET_ROWS,
                                decide.BARE_INDEX)


def _run_sessions(reading: Reading, session_filter: list[str]) -> list[str]:
    wanted = set(session_filter)
    return [r[0] for r in reading.run.query(READ_SESSIONS) if not wanted or r[0] in wanted]


def _select(con, session_filter: list[str]) -> None:
    con.execute("CREATE OR REPLACE TABLE selected (session_id VARCHAR)")
    if not session_filter:
        # a session read without a message (a header-only transcript) too: r95 records it, else it is new every run
        con.execute("INSERT INTO selected SELECT session_id FROM jsonl_sessions UNION SELECT session_id FROM run_sessions")
        return
    con.executemany("INSERT INTO selected VALUES (?)", [[s] for s in sorted(set(session_filter))])
    # any transcript's session, read from its record with nothing new (no message in jsonl_sessions) or not
    unknown = [r[0] for r in con.execute("SELECT session_id FROM selected WHERE session_id NOT IN (SELECT "
                                         "session_id FROM stage.transcripts WHERE session_id IS NOT NULL) ORDER BY 1").fetchall()]
    if unknown:
        raise BadInput(f"unknown --session-filter {', '.join(repr(u) for u in unknown)}: no transcript holds that "
                       "session (ids are transcript header ids, or session keys with --key-by session-key)")
