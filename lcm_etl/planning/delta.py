"""The marks, and a sync re-run's scope once decided (lcm_etl/sync/lcm_db.py decides it; docs/design.md, "Sync").

Every complete `migrate` over the whole source stores marks in the target (named figures, a table per kind:
lcm_etl/store/marks.py; written by 95_write_provenance.sql in the run's last transaction): per source
conversation, figures of every value the plan reads or lossless-claw can change in place (03_source_marks.sql),
per source the schema and its rows of no conversation (02), and per target session its figures after the run
(04_target_marks.sql). Here: computing the source's marks (mark_source, content_marks), loading the recorded
ones (recorded_tables), narrowing the plan to the scope's rows (enter_scope: small copies,
lcm_etl/read/lcmdb/subset.py; the steps after it are the usual ones) and the report's figures for what the scope left
out (add_unchanged).
"""
from __future__ import annotations

import hashlib
from lcm_etl.sqlite_runtime import sqlite3
import zlib
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import duckdb
import orjson

from lcm_etl.read.lcmdb.source_schema import SourceSchema, normalized_views
from lcm_etl import duck
from lcm_etl.steps import pipeline
from lcm_etl.store import marks
from lcm_etl.read.lcmdb import subset
from lcm_etl.steps.engine import run_stage

@dataclass
class Scope:
    """What a sync re-run plans (lcm_etl/sync/lcm_db.py decides it): the sessions of scope_sessions."""
    since_run: str
    source_subset: Path   # the scope's rows (lcm_etl/read/lcmdb/subset.py): what the plan reads, and the writer reads
    carry_marks: bool     # the changed conversations are the kept snapshot's: the others' marks are carried (09)

    @classmethod
    def copied(cls, since_run: str, snapshot: Path, into: Path, conversations: list[str], carry_marks: bool) -> Scope:
        subset.source_subset(snapshot, into, conversations)
        return cls(since_run, into, carry_marks)


def schema_signature(schema: SourceSchema) -> str:
    return hashlib.sha1(orjson.dumps(schema.columns, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def mark_source(con: duckdb.DuckDBPyConnection, schema: SourceSchema, source_db: Path) -> None:
    content_marks(con, source_db)
    run_stage(pipeline.SOURCE_MARKS, con, {"schema_sig": schema_signature(schema)})


def content_marks(con: duckdb.DuckDBPyConnection, source_db: Path) -> None:
    """content_marks(conversation_id, digest): per conversation, its messages' count and the sum of a CRC-32 of
    each one's id and stored content bytes, for its mark (03_source_marks.sql). lossless-claw never edits content,
    but a row edited by hand is another message (04_superseded_rows.sql), and a re-run without the previous
    snapshot to compare pages with must see it. SQLite reads the bytes: DuckDB never reads a content column (its
    scanner refuses a value stored as another type, and a value of any size stays out of its memory budget).
    About 0.2 s for 200k messages (23 MB of content)."""
    with closing(sqlite3.connect(f"file:{source_db}?mode=ro", uri=True)) as lite:
        lite.create_function("content_crc", 2, _content_crc, deterministic=True)
        rows = lite.execute("SELECT CAST(conversation_id AS TEXT), count(*) || '.' || "
                            "sum(content_crc(message_id, CAST(content AS BLOB))) FROM messages "
                            "GROUP BY conversation_id").fetchall()
    duck.table_of_strings(con, "content_marks", ["conversation_id", "digest"], rows)


def _content_crc(message_id: object, content: bytes | None) -> int:
    seed = message_id & 0xFFFFFFFF if isinstance(message_id, int) else zlib.crc32(str(message_id).encode())
    return zlib.crc32(content or b"", seed)


def recorded_tables(con: duckdb.DuckDBPyConnection, recorded: marks.Marks) -> None:
    """The marks the previous run stored, as tables of the columns of the steps' own (recorded_source_marks
    as 03's source_marks, recorded_source_global as 02's source_global, recorded_target_marks as 04's
    target_marks): 08 and 09 compare and copy whole rows."""
    for name, kind, rows in (("recorded_source_marks", marks.CONVERSATION, recorded.conversations),
                             ("recorded_source_global", marks.SOURCE, [recorded.source]),
                             ("recorded_target_marks", marks.SESSION, recorded.sessions)):
        duck.table_of_strings(con, name, kind.duck_types(), rows)


def enter_scope(con: duckdb.DuckDBPyConnection, scope: Scope, schema: SourceSchema) -> None:
    """From here on `src` is the scope's rows only (lcm_etl/read/lcmdb/subset.py): the views and the steps are the
    same."""
    rows = scope.source_subset
    con.execute("DETACH src")
    duck.attach_sqlite(con, str(rows), "src")
    for view in normalized_views(schema, "duckdb"):   # read once: the steps read the views many times over
        con.execute(f"CREATE OR REPLACE TABLE scoped_{view} AS SELECT * FROM {view}")
        con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM scoped_{view}")
    if scope.carry_marks:   # the scope's marks now; the rest are the recorded ones, proved unchanged
        content_marks(con, rows)
        run_stage(pipeline.CARRIED_MARKS, con, {"schema_sig": schema_signature(schema)})


def add_unchanged(con: duckdb.DuckDBPyConnection, report, target_db: Path, source_key: str) -> None:
    """A sync re-run planned only its scope; the report still speaks of the whole source. The rows of the
    conversations it did not re-read are where the previous runs left them: counted by their marks (every
    message and part of a conversation is imported; a summary is unless lcm_etl_skipped says why not), and
    the rows of no conversation by the global mark (02_source_global.sql)."""
    counts = duck.one(
        con, "SELECT coalesce(sum(messages), 0), coalesce(sum(parts), 0), coalesce(sum(summaries), 0) "
             "FROM source_marks WHERE conversation_id NOT IN (SELECT conv_key FROM scope_convs)")
    sessions = {r[0] for r in con.execute("SELECT session_id FROM scope_sessions").fetchall()}
    with sqlite3.connect(f"file:{target_db}?mode=ro", uri=True) as lite:
        skipped = [r for r in lite.execute(
            "SELECT source_id, session_id, reason, detail FROM lcm_etl_skipped WHERE source_path = ? "
            "AND kind = 'summary' ORDER BY source_id", (source_key,)) if r[1] not in sessions]
    lite.close()
    report.messages.already_present += counts[0]
    report.parts.already_present += counts[1]
    report.summaries.already_present += counts[2] - len(skipped)
    for summary_id, session_id, reason, detail in skipped:
        report.summaries.skip(reason)
        foreign = (orjson.loads(detail) if detail else {}).get("foreign_messages", 0)
        report.skipped_summaries.append({"summary_id": summary_id, "session_id": session_id, "reason": reason,
                                         "foreign_messages": foreign})
        report.cross_session_links_in_skipped += foreign
    report.skipped_summaries.sort(key=lambda s: s["summary_id"])
    orphans = duck.one(con, "SELECT orphan_messages, orphan_parts FROM source_global")
    report.messages.skip("its conversation is not in the source", int(orphans[0]))
    report.parts.skip("its message is not in the source (or not in any conversation)", int(orphans[1]))
