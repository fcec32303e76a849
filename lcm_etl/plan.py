"""The plan: DuckDB reads the source snapshot and the target's current state and runs the plan steps of
`transforms/` (sessions, turn_index, message_parts, summaries, parent_collapse, batches).

The plan decides everything that is decided by identity and order: which rows are new, their rank in
each session, summary ranges and parents, batches. It never touches content: the write steps copy
content inside SQLite. Dry-run reports come straight from the plan, so they are what a real run does.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
from tqdm import tqdm

from . import duck
from .errors import BadInput
from .report import RunReport
from .sources import SourceSchema, normalized_views
from .steps import run_step, step_named

PLAN_STEPS = ("20_", "30_", "40_", "50_", "55_", "57_", "60_")   # after 10_sessions and the session filter
NEW_TARGET_STEPS = ("20_", "30_", "40_", "50_", "56_", "60_")      # one transaction: one batch
WHITESPACE = " \t\n\r\x0b\x0c\u00a0\ufeff"

# The target's state as the plan sees it. Only rows imported from lossless-claw carry a source identity.
_TARGET_STATE = {
    "tgt_messages": """
        SELECT session_id, conversation_id, source_seq, min(id) AS id, arg_min(turn_index, id) AS turn_index,
               count(*) AS copies, CAST(min(id) AS VARCHAR) || CASE WHEN count(*) > 1
                                        THEN ',' || CAST(max(id) AS VARCHAR) ELSE '' END AS ids
        FROM (SELECT id, session_id, turn_index, v[2] AS conversation_id, try_cast(v[3] AS BIGINT) AS source_seq
              FROM (SELECT id, session_id, turn_index,
                           json_extract_string(metadata, ['$.source', '$.conversation_id', '$.source_seq']) AS v
                    FROM tgt.lcm_messages
                    WHERE metadata LIKE '%lossless-claw%' AND json_valid(metadata))
              WHERE v[1] = 'lossless-claw')
        GROUP BY session_id, conversation_id, source_seq""",
    "tgt_entries": """
        SELECT session_id, entry_id, min(id) AS id, arg_min(turn_index, id) AS turn_index
        FROM (SELECT id, session_id, turn_index, json_extract_string(metadata, '$.transcript_entry_id') AS entry_id
              FROM tgt.lcm_messages
              WHERE metadata LIKE '%openclaw-jsonl%' AND json_valid(metadata)
                AND json_extract_string(metadata, '$.source') = 'openclaw-jsonl')
        WHERE entry_id IS NOT NULL
        GROUP BY session_id, entry_id""",
    "tgt_max_turn": "SELECT session_id, max(turn_index) AS max_turn FROM tgt.lcm_messages GROUP BY session_id",
    "tgt_parts": """SELECT p.message_id, p.ordinal FROM tgt.lcm_message_parts p
                    WHERE p.message_id IN (SELECT id FROM tgt_messages UNION ALL SELECT id FROM tgt_entries)""",
    "tgt_summaries": "SELECT id FROM tgt.lcm_summary_nodes",
    "tgt_boundaries": """SELECT DISTINCT session_id FROM tgt.lcm_compaction_events
                         WHERE tokens_before = tokens_after""",
}
_EMPTY_STATE = {
    "tgt_messages": "SELECT NULL::VARCHAR AS session_id, NULL::VARCHAR AS conversation_id, NULL::BIGINT AS source_seq, "
                    "NULL::BIGINT AS id, NULL::BIGINT AS turn_index, NULL::BIGINT AS copies, NULL::VARCHAR AS ids "
                    "WHERE false",
    "tgt_entries": "SELECT NULL::VARCHAR AS session_id, NULL::VARCHAR AS entry_id, NULL::BIGINT AS id, "
                   "NULL::BIGINT AS turn_index WHERE false",
    "tgt_max_turn": "SELECT NULL::VARCHAR AS session_id, NULL::BIGINT AS max_turn WHERE false",
    "tgt_parts": "SELECT NULL::BIGINT AS message_id, NULL::BIGINT AS ordinal WHERE false",
    "tgt_summaries": "SELECT NULL::VARCHAR AS id WHERE false",
    "tgt_boundaries": "SELECT NULL::VARCHAR AS session_id WHERE false",
}


@dataclass
class PlannedRun:
    con: duckdb.DuckDBPyConnection
    batches: list[int]
    has_work: bool


def open_source(snapshot_path: Path, schema: SourceSchema, original: Path,
                memory_limit: str = duck.DEFAULT_MEMORY_LIMIT) -> duckdb.DuckDBPyConnection:
    """DuckDB with the snapshot attached and the normalised views over it. A source DuckDB cannot read
    (a damaged page met already here) is the same one-line error as one met while planning."""
    con = duck.connect(snapshot_path.parent, memory_limit)   # the snapshot's private folder holds the plan database
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


def load_target_state(con: duckdb.DuckDBPyConnection, target_db: Path | None) -> None:
    """Materialise the target's identities once; a missing or empty target is an empty state."""
    tables: set[str] = set()
    if target_db is not None:
        duck.attach_sqlite(con, str(target_db), "tgt", read_only=True)
        tables = {r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = 'tgt'").fetchall()}
    have_all = {"lcm_messages", "lcm_message_parts", "lcm_summary_nodes", "lcm_compaction_events"} <= tables
    for name in _TARGET_STATE:
        sql = _TARGET_STATE[name] if have_all else _EMPTY_STATE[name]
        con.execute(f"CREATE OR REPLACE TABLE {name} AS {sql}")
    if target_db is not None:
        con.execute("DETACH tgt")


def build(con: duckdb.DuckDBPyConnection, key_by: str, session_filter: list[str], budget: int,
          report: RunReport, source_label: str, progress: bool = False, new_target: bool = False) -> PlannedRun:
    params = {"key_by": key_by, "ws": WHITESPACE, "budget": budget}
    run_step(step_named("10_"), con, params)
    _select_sessions(con, session_filter, source_label)
    for prefix in tqdm(NEW_TARGET_STEPS if new_target else PLAN_STEPS, desc="planning", unit="step",
                       disable=not progress, leave=False):
        run_step(step_named(prefix), con, params)
    _fill_report(con, report, filtered=bool(session_filter))
    batches = all_batches(con)
    return PlannedRun(con, batches, has_work=bool(batches))


def all_batches(con) -> list[int]:
    """Every batch that holds a write: a large session's early chunks as well as sessions' last batches."""
    return [r[0] for r in con.execute("SELECT batch FROM write_messages UNION SELECT batch FROM session_work "
                                      "ORDER BY 1").fetchall()]


def _select_sessions(con, session_filter: list[str], source_label: str) -> None:
    con.execute("CREATE OR REPLACE TABLE selected (session_id VARCHAR)")
    if session_filter:
        wanted = sorted(set(session_filter))
        con.executemany("INSERT INTO selected VALUES (?)", [[s] for s in wanted])
        unknown = [r[0] for r in con.execute(
            "SELECT session_id FROM selected WHERE session_id NOT IN (SELECT session_id FROM sessions) "
            "ORDER BY 1").fetchall()]
        if unknown:
            raise BadInput(f"unknown --session-filter {', '.join(repr(u) for u in unknown)}: no such session in "
                           f"{source_label} (list them with `lcm-etl inspect --src {source_label}`)")
    else:
        con.execute("INSERT INTO selected SELECT DISTINCT session_id FROM sessions")


def _one(con, sql: str) -> int:
    row = con.execute(sql).fetchone()
    return int(row[0] or 0) if row else 0


def _fill_report(con, report: RunReport, filtered: bool) -> None:
    m = report.messages
    m.inserted = _one(con, "SELECT count(*) FROM write_messages")
    m.already_present = _one(con, "SELECT count(*) FROM msg_plan WHERE NOT is_new")
    if not filtered:
        m.skip("its conversation is not in the source",
               _one(con, "SELECT count(*) FROM src_messages WHERE message_id NOT IN (SELECT message_id FROM src_msgs)"))
    p = report.parts
    p.inserted = _one(con, "SELECT count(*) FROM part_plan")
    in_selected, orphans = con.execute("SELECT in_selected, orphans FROM part_counts").fetchone()
    p.already_present = int(in_selected or 0) - p.inserted
    if not filtered:
        p.skip("its message is not in the source (or not in any conversation)", int(orphans or 0))
    s = report.summaries
    s.inserted = _one(con, "SELECT count(*) FROM write_summaries")
    s.already_present = _one(con, "SELECT count(*) FROM sum_plan WHERE status = 'present'")
    scope = "session_id IN (SELECT session_id FROM selected)" + ("" if filtered else " OR session_id IS NULL")
    for reason, n in con.execute(f"SELECT reason, count(*) FROM sum_plan WHERE status = 'skipped' AND ({scope}) "
                                 "GROUP BY reason ORDER BY reason").fetchall():
        s.skip(reason, n)
    report.skipped_summaries = [
        {"summary_id": sid, "session_id": sess, "reason": reason, "foreign_messages": foreign}
        for sid, sess, reason, foreign in con.execute(
            f"SELECT summary_id, session_id, reason, foreign_msgs FROM sum_plan WHERE status = 'skipped' AND ({scope}) "
            "ORDER BY summary_id").fetchall()]
    report.cross_session_links_in_skipped = sum(s["foreign_messages"] for s in report.skipped_summaries)
    report.collapsed_parents = _one(con, "SELECT count(*) FROM write_summaries WHERE candidates > 1")
    report.dropped_parent_edges = _one(
        con, "SELECT count(*) FROM sum_edges WHERE NOT kept AND source_id IN (SELECT summary_id FROM write_summaries)")
    report.cross_session_links = _one(con, "SELECT sum(foreign_msgs) FROM write_summaries")
    report.sessions_touched = [r[0] for r in con.execute(
        "SELECT session_id FROM session_work ORDER BY session_id").fetchall()]
    report.boundary_events = len(report.sessions_touched)
    report.batches = len(all_batches(con))


def stage(con: duckdb.DuckDBPyConnection, stage_path: Path) -> None:
    duck.attach_sqlite(con, str(stage_path), "stage", read_only=False)
    run_step(step_named("65_"), con)
    con.execute("DETACH stage")
