"""The plan: DuckDB reads the source snapshot and the target's current state and runs the plan steps of
`transforms/` (sessions, turn_index, message_parts, summaries, parent_collapse, batches).

The plan decides everything that is decided by identity and order: which rows are new, their rank in
each session, summary ranges and parents, batches. It never touches content: the write steps copy
content inside SQLite. Dry-run reports come straight from the plan, so they are what a real run does.
"""
from __future__ import annotations

from lcm_etl.sqlite_runtime import sqlite3
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import duckdb
import orjson

from lcm_etl import duck, sqlite_runtime
from lcm_etl.steps import pipeline
from lcm_etl.read.lcmdb import subset
from lcm_etl.store import marks
from lcm_etl.errors import BadInput
from lcm_etl.progress import Progress
from lcm_etl.report import RunReport
from lcm_etl.read.lcmdb.source_schema import WHITESPACE, SourceSchema, normalized_views
from lcm_etl.store.target import REMNIC_TABLE_NAMES, REMNIC_TABLES, apply_schema
from lcm_etl.steps.engine import run_stage, run_step, step

_TARGET_TABLES = set(REMNIC_TABLE_NAMES)


@dataclass
class PlannedRun:
    batches: list[int]


def open_source(snapshot_path: Path, schema: SourceSchema, original: Path,
                memory_limit: str = duck.DEFAULT_MEMORY_LIMIT,
                warm: duck.Warmup | None = None, workdir: Path | None = None,
                keeps_records: bool = True) -> duckdb.DuckDBPyConnection:
    """DuckDB with the snapshot attached and the normalised views over it. A source DuckDB cannot read
    (a damaged page met already here) is the same one-line error as one met while planning. keeps_records=False:
    a command that writes nothing (duck.connect)."""
    # the run's private folder (by default the snapshot's) holds what the plan spills: never the cache folder
    # a kept snapshot lives in, which outlasts the run
    workdir = workdir or snapshot_path.parent
    con = warm.take(workdir) if warm else duck.connect(workdir, memory_limit, keeps_records)
    try:
        duck.attach_sqlite(con, str(snapshot_path), "src", read_only=True)
        for name, sql in normalized_views(schema, "duckdb").items():
            con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {sql}")
    except duckdb.Error as exc:
        con.close()
        raise duck.translate(exc, unreadable_source(original)) from None
    return con


def unreadable_source(original: Path | str) -> str:
    return f"source could not be read as lossless-claw data: {original}"


@dataclass(frozen=True)
class SourceRows:
    """The source snapshot as SQLite reads it: its file and its normalised views (source_schema, 'sqlite')."""
    path: Path
    views: dict[str, str]


@dataclass
class TargetReader:
    """The target as planning reads it, in two steps with the sync decision between them (lcm_etl/sync/): its
    marks and provenance, then the state of what the run plans. A missing target, or one without Remnic's
    tables yet, reads as an empty target: a file with the schema, made in `scratch`."""
    con: duckdb.DuckDBPyConnection
    target_db: Path | None
    scratch: Path

    def __post_init__(self) -> None:
        self.tables: set[str] = set()
        if self.target_db is not None:
            with closing(sqlite_runtime.connect(self.target_db)) as lite:
                self.tables = {r[0] for r in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    @property
    def holds_rows(self) -> bool:
        return self.target_db is not None and _TARGET_TABLES <= self.tables

    def _read(self, alias: str, stage: pipeline.Stage, needs: set[str], params: dict | None = None,
              db: Path | None = None) -> None:
        db = db or (self.target_db if self.target_db is not None and needs <= self.tables
                    else empty_target(self.scratch))
        duck.attach_sqlite(self.con, str(db), alias, read_only=True)
        try:
            run_stage(stage, self.con, params)
        finally:
            self.con.execute(f"DETACH {alias}")

    def provenance(self) -> None:
        """The target's marks (04) and what its provenance says of the sources' conversations (06)."""
        marks_db = self.target_db if self.holds_rows and self.target_db else empty_target(self.scratch)
        with closing(sqlite_runtime.connect(marks_db)) as lite:
            run_stage(pipeline.TARGET_MARKS, lite)
            target_marks = lite.execute("SELECT * FROM temp.target_marks").fetchall()
        duck.table_of_strings(self.con, "target_marks", marks.SESSION.duck_types(), target_marks)
        self._read("prov", pipeline.TARGET_PROVENANCE, {"lcm_etl_conversations"})
        self.con.execute("CREATE OR REPLACE TABLE scope_sessions (session_id VARCHAR)")

    def state(self, scoped: bool = False, source: SourceRows | None = None) -> None:
        """The target's identities (transforms/05_target_state.sql). `scoped`: only the sessions of
        scope_sessions (a sync re-run), found through the target's indexes (lcm_etl/read/lcmdb/subset.py). `source`
        (migrate, audit): the lcm.db whose rows the target's imported rows are compared with
        (04_superseded_rows.sql); without it (reconcile) none is superseded."""
        subset_db = None
        if scoped and self.holds_rows:
            assert self.target_db is not None
            sessions = [r[0] for r in self.con.execute("SELECT session_id FROM scope_sessions").fetchall()]
            subset_db = subset.target_subset(self.target_db, self.scratch / "scope-target.sqlite", sessions,
                                             [(t.name, t.scope_rows) for t in REMNIC_TABLES])
        held = subset_db or (self.target_db if self.holds_rows else None)
        duck.table_of_strings(self.con, "superseded_rows", ["id", "differs"],
                              superseded_rows(held, source) if held is not None and source is not None else [])
        self._read("tgt", pipeline.TARGET_STATE, _TARGET_TABLES, None, subset_db)


def superseded_rows(target_db: Path, source: SourceRows) -> list[tuple]:
    """The ids of imported rows whose source message holds other values now (04_superseded_rows.sql)."""
    with closing(sqlite_runtime.connect(target_db)) as lite:
        lite.execute("ATTACH ? AS src", (sqlite_runtime.uri(source.path),))
        for name, sql in source.views.items():
            lite.execute(f"CREATE TEMP VIEW {name} AS {sql}")
        run_stage(pipeline.SUPERSEDED, lite)
        return lite.execute("SELECT id, differs FROM temp.superseded_rows ORDER BY id").fetchall()


def empty_target(folder: Path) -> Path:
    """An empty target with Remnic's schema and lcm-etl's tables, private to the run."""
    path = folder / "empty-target.sqlite"
    if not path.exists():
        with closing(sqlite3.connect(path, isolation_level=None)) as con:
            con.execute("BEGIN")
            apply_schema(con)
            con.execute("COMMIT")
    return path


def build(con: duckdb.DuckDBPyConnection, key_by: str, session_filter: list[str], budget: int,
          source_key: str, progress: bool = False, new_target: bool = False, label: str = "") -> PlannedRun:
    """`source_key`: the source's identity (lcm_etl/sync/identity.py); `label`: its path as the user gave it."""
    params = plan_params(key_by, budget, source_key)
    run_stage(pipeline.SESSIONS, con, params)
    run_stage(pipeline.KEPT_SESSIONS, con, params)
    _select_sessions(con, session_filter, label or source_key)
    stage = pipeline.NEW_TARGET_PLAN if new_target else pipeline.PLAN
    with Progress(progress) as bars:
        bars.phase("planning", len(stage.steps))
        run_stage(stage, con, params, after_each=bars.step)
    return PlannedRun(all_batches(con))


def plan_params(key_by: str, budget: int, source_key: str) -> dict:
    return {"key_by": key_by, "ws": WHITESPACE, "budget": budget, "source_path": source_key}


def all_batches(con) -> list[int]:
    """Every batch that holds a write: a large session's early chunks as well as sessions' last batches."""
    return [r[0] for r in con.execute("SELECT batch FROM write_messages UNION SELECT batch FROM session_work "
                                      "ORDER BY 1").fetchall()]


def boundaries_moving(target_db: Path | None, sessions: list[str], placed_by: str) -> int:
    """How many of these sessions' last seams the run moves rather than adds (88_movable_boundaries.sql, run over the
    target as it is before the write, with no row new yet): what the write's 89 moves, so a dry run says it too."""
    if target_db is None or not sessions:
        return 0
    with closing(sqlite_runtime.connect(target_db)) as lite:
        if not all(sqlite_runtime.has_table(lite, t) for t in (*REMNIC_TABLE_NAMES, "lcm_etl_runs")):   # else the write says
            return 0
        lite.execute("ATTACH ':memory:' AS plan")
        lite.execute("CREATE TABLE plan.plan_sessions AS SELECT value AS session_id, 0 AS batch, 1 AS needs_boundary "
                     "FROM json_each(?)", (orjson.dumps(sessions).decode(),))
        lite.execute("CREATE TEMP TABLE _new (id INTEGER)")
        run_step(step("88_movable_boundaries"), lite, {"lo": 0, "hi": 0, "placed_by": placed_by})
        return lite.execute("SELECT count(*) FROM _movable").fetchone()[0]


def _select_sessions(con, session_filter: list[str], source_label: str) -> None:
    con.execute("CREATE OR REPLACE TABLE selected (session_id VARCHAR)")
    if session_filter:
        wanted = sorted(set(session_filter))
        con.execute("CREATE OR REPLACE TEMP TABLE wanted (session_id VARCHAR)")
        con.executemany("INSERT INTO wanted VALUES (?)", [[s] for s in wanted])
        unknown = [r[0] for r in con.execute(
            "SELECT session_id FROM wanted WHERE session_id NOT IN (SELECT session_id FROM sessions) "
            "AND session_id NOT IN (SELECT rule_session FROM sessions) ORDER BY 1").fetchall()]
        if unknown:
            raise BadInput(f"unknown --session-filter {', '.join(repr(u) for u in unknown)}: no such session in "
                           f"{source_label} (list them with `lcm-etl inspect --src {source_label}`)")
        # a conversation kept in the session it was first imported into (15_kept_sessions.sql) is also
        # found by the session id it has now
        con.execute("INSERT INTO selected SELECT DISTINCT session_id FROM sessions "
                    "WHERE session_id IN (SELECT session_id FROM wanted) OR rule_session IN (SELECT session_id FROM wanted)")
    else:
        con.execute("INSERT INTO selected SELECT DISTINCT session_id FROM sessions")


def _one(con, sql: str) -> int:
    row = con.execute(sql).fetchone()
    return int(row[0] or 0) if row else 0


# the report's counts, one query: each is a few milliseconds of DuckDB's overhead on its own, a sync re-run's
# plan is small, and these were 16 of its 130 statements
_COUNTS = {
    "inserted_messages": "SELECT count(*) FROM write_messages",
    "present_messages": "SELECT count(*) FROM msg_plan WHERE NOT is_new",
    "inserted_parts": "SELECT count(*) FROM part_plan",
    "parts_in_selected": "SELECT in_selected FROM part_counts",
    "orphan_parts": "SELECT orphans FROM part_counts",
    "inserted_summaries": "SELECT count(*) FROM write_summaries",
    "present_summaries": "SELECT count(*) FROM sum_plan WHERE status = 'present'",
    "collapsed_parents": "SELECT count(*) FROM write_summaries WHERE candidates > 1",
    "dropped_parent_edges": "SELECT count(*) FROM sum_edges WHERE NOT kept AND source_id IN "
                            "(SELECT summary_id FROM write_summaries)",
    "cross_session_links": "SELECT sum(foreign_msgs) FROM write_summaries",
    "boundary_events": "SELECT count(*) FROM session_work WHERE needs_boundary",
    # in place (52_in_place_changes.sql): what lossless-claw changed in rows an earlier run imported
    "updated_messages": "SELECT count(*) FROM message_refresh",
    # new messages whose identity an imported row holds with other values: written beside it (04_superseded_rows)
    "superseded_messages": "SELECT count(*) FROM msg_plan WHERE is_new AND sup_tid IS NOT NULL",
    "updated_summaries": "SELECT count(*) FROM summary_refresh",
    "parents_updated": "SELECT count(*) FROM parent_updates",
    "conversations_changed": "SELECT count(*) FROM sessions WHERE session_id IN (SELECT session_id FROM selected) "
                             "AND conversation_id NOT IN (SELECT conversation_id FROM conversation_same)",
    "sessions_kept": "SELECT count(*) FROM sessions WHERE session_id <> rule_session",
}


def report_plan(con: duckdb.DuckDBPyConnection, report: RunReport, planned: PlannedRun, filtered: bool) -> None:
    """What the plan does, into the report (a dry run's report is this). `filtered`: a session filter, or a
    sync re-run (lcm_etl/planning/delta.py) that planned some sessions: no totals over the rest."""
    row = duck.one(con, "SELECT " + ", ".join(f"({sql}) AS {name}" for name, sql in _COUNTS.items()))
    n = {name: int(v or 0) for name, v in zip(_COUNTS, row)}
    m, p, s = report.messages, report.parts, report.summaries
    m.inserted, m.already_present = n["inserted_messages"], n["present_messages"]
    p.inserted = n["inserted_parts"]
    p.already_present = n["parts_in_selected"] - p.inserted
    s.inserted, s.already_present = n["inserted_summaries"], n["present_summaries"]
    if not filtered:
        m.skip("its conversation is not in the source",
               _one(con, "SELECT count(*) FROM src_messages WHERE message_id NOT IN (SELECT message_id FROM src_msgs)"))
        p.skip("its message is not in the source (or not in any conversation)", n["orphan_parts"])
    selection = "session_id IN (SELECT session_id FROM selected)" + ("" if filtered else " OR session_id IS NULL")
    report.skipped_summaries = [
        {"summary_id": sid, "session_id": sess, "reason": reason, "foreign_messages": foreign}
        for sid, sess, reason, foreign in con.execute(
            f"SELECT summary_id, session_id, reason, foreign_msgs FROM sum_plan WHERE status = 'skipped' AND ({selection}) "
            "ORDER BY summary_id").fetchall()]
    for reason, count in sorted(Counter(k["reason"] for k in report.skipped_summaries).items()):
        s.skip(reason, count)
    report.cross_session_links_in_skipped = sum(k["foreign_messages"] for k in report.skipped_summaries)
    report.collapsed_parents = n["collapsed_parents"]
    report.dropped_parent_edges = n["dropped_parent_edges"]
    report.cross_session_links = n["cross_session_links"]
    report.sessions_touched = [r[0] for r in con.execute(
        "SELECT session_id FROM session_work ORDER BY session_id").fetchall()]
    report.boundary_events = n["boundary_events"]
    m.updated, s.updated = n["updated_messages"], n["updated_summaries"]
    report.messages_superseded = n["superseded_messages"]
    report.parents_updated = n["parents_updated"]
    report.changes = {what: k for what, k in con.execute(
        "SELECT what, count(*) FROM (SELECT unnest(string_split(changed, ', ')) AS what FROM message_refresh) "
        "GROUP BY what ORDER BY what"
    ).fetchall()}
    report.conversations_changed = n["conversations_changed"]
    report.sessions_kept = n["sessions_kept"]
    report.batches = len(planned.batches)


def stage(con: duckdb.DuckDBPyConnection, stage_path: Path, record_marks: bool = False) -> None:
    duck.attach_sqlite(con, str(stage_path), "stage", read_only=False)
    # one transaction: the stage file is committed (and synced) once, not once per table (0.074 -> 0.038 s on
    # a sync re-run, where the tables are small and the commits were the cost)
    con.execute("BEGIN")
    run_stage(pipeline.HANDOFF, con, {"record_marks": record_marks})
    con.execute("COMMIT")
    con.execute("DETACH stage")
