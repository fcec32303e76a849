"""Cost follows the change (SPEC §8): a re-run re-plans only what changed since the previous run.

Every complete `migrate` over the whole source stores marks in the target (`lcm_etl_marks`, written by
95_write_provenance.sql in the run's last transaction): a digest per source conversation of every value
the plan reads or lossless-claw can change in place (03_source_marks.sql), one for the rows of no
conversation and the source's schema, and per target session its figures after the run
(04_target_marks.sql). The next run of the same source with the same options computes the marks again
and re-plans only the conversations and sessions whose marks differ, closed over the sessions they share
(08_sync_scope.sql): everything else is proved unchanged by value, never assumed. The plan then reads
only those conversations' rows and those sessions' target rows; the steps after it are the usual ones.

Whatever is not growth within a few sessions is a full plan, as before: a different schema or different
orphan rows, a previous run that stored no marks (an older version, `--session-filter`, a failed run,
another command since), or a scope holding most of the source's messages (`FULL_PLAN_SHARE`).
"""
from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

from .sources import SourceSchema
from . import pipeline
from .steps import run_stage

# above this share of the source's messages in scope, reading the scope costs about a full plan
FULL_PLAN_SHARE = 1.0

# the normalised views (sources.normalized_views) narrowed to the scope, in dependency order; message
# content is never read by the plan, so the narrowed messages do not carry it
_SCOPED_VIEWS = (
    ("src_conversations", "SELECT * FROM src_conversations WHERE CAST(conversation_id AS VARCHAR) IN "
                          "(SELECT conv_key FROM scope_convs)"),
    ("src_messages", "SELECT * REPLACE (CAST(NULL AS VARCHAR) AS content, CAST(NULL AS VARCHAR) AS large_content) "
                     "FROM src_messages WHERE CAST(conversation_id AS VARCHAR) IN (SELECT conv_key FROM scope_convs)"),
    ("src_parts", "SELECT * FROM src_parts WHERE message_id IN (SELECT message_id FROM scoped_src_messages)"),
    ("src_summaries", "SELECT * FROM src_summaries WHERE CAST(conversation_id AS VARCHAR) IN "
                      "(SELECT conv_key FROM scope_convs)"),
    ("src_summary_messages", "SELECT * FROM src_summary_messages WHERE summary_id IN "
                             "(SELECT summary_id FROM scoped_src_summaries)"),
    ("src_summary_parents", "SELECT * FROM src_summary_parents WHERE summary_id IN "
                            "(SELECT summary_id FROM scoped_src_summaries) OR parent_summary_id IN "
                            "(SELECT summary_id FROM scoped_src_summaries)"),
    ("src_large_files", "SELECT * FROM src_large_files WHERE CAST(conversation_id AS VARCHAR) IN "
                        "(SELECT conv_key FROM scope_convs)"),
)


@dataclass
class Recorded:
    """The marks the previous run stored, and that run's id."""
    run_id: str
    marks: list[tuple[str, str, str]]   # (kind, key, mark)


@dataclass
class Scope:
    """What a sync re-run plans: the sessions it re-reads, out of how many."""
    since_run: str
    sessions: int
    sessions_total: int
    conversations_changed: int


def schema_signature(schema: SourceSchema) -> str:
    return hashlib.sha1(orjson.dumps(schema.columns, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def mark_source(con: duckdb.DuckDBPyConnection, schema: SourceSchema) -> None:
    run_stage(pipeline.SOURCE_MARKS, con, {"schema_sig": schema_signature(schema)})


def recorded(target_db: Path | None, source_label: str, opts_key: list) -> Recorded | None:
    """The marks of the last `migrate` of this source into the target, if they can be trusted: that run
    completed, planned the whole source with the same options and stored marks."""
    if target_db is None:
        return None
    try:
        con = sqlite3.connect(f"file:{target_db}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = con.execute("SELECT status, counts FROM lcm_etl_runs WHERE command = 'migrate' AND source_path = ? "
                          "ORDER BY rowid DESC LIMIT 1", (source_label,)).fetchone()
        if not row or row[0] != "complete":
            return None
        counts = orjson.loads(row[1])
        marks_run = counts.get("marks_run")
        if not marks_run or counts.get("options_key") != opts_key:
            return None
        marks = con.execute("SELECT kind, key, mark FROM lcm_etl_marks WHERE source_path = ? AND run_id = ?",
                            (source_label, marks_run)).fetchall()
        return Recorded(marks_run, marks) if marks else None
    except (sqlite3.Error, orjson.JSONDecodeError, AttributeError):
        return None
    finally:
        con.close()


def narrow(con: duckdb.DuckDBPyConnection, rec: Recorded, params: dict) -> Scope | None:
    """Compare the marks (03, 04 have run; 06 too), decide the scope and narrow the source views to it.
    None: plan everything (nothing here was changed)."""
    cols = list(zip(*rec.marks))
    con.register("recorded_marks_rows", pa.table({"kind": pa.array(cols[0], pa.string()),
                                                  "key": pa.array(cols[1], pa.string()),
                                                  "mark": pa.array(cols[2], pa.string())}))
    try:
        con.execute("CREATE OR REPLACE TABLE recorded_marks AS SELECT * FROM recorded_marks_rows")
    finally:
        con.unregister("recorded_marks_rows")
    was = next((m for kind, _, m in rec.marks if kind == "global"), None)
    if was is None or was != con.execute("SELECT mark FROM source_global").fetchone()[0]:
        return None
    run_stage(pipeline.SYNC_SCOPE, con, params)
    in_scope, total = con.execute(
        "SELECT sum(n) FILTER (WHERE conversation_id IN (SELECT conv_key FROM scope_convs)), sum(n) "
        "FROM (SELECT conversation_id, CAST(split_part(mark, ':', 2) AS BIGINT) AS n FROM source_marks)").fetchone()
    if total and (in_scope or 0) > FULL_PLAN_SHARE * total:
        return None
    for view, sql in _SCOPED_VIEWS:
        con.execute(f"CREATE OR REPLACE TABLE scoped_{view} AS {sql}")
        con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM scoped_{view}")
    sessions, changed = con.execute("SELECT (SELECT count(*) FROM scope_sessions), "
                                    "(SELECT count(*) FROM changed_convs)").fetchone()
    return Scope(rec.run_id, sessions, con.execute("SELECT count(DISTINCT session_id) FROM sessions").fetchone()[0],
                 changed)
