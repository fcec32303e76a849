"""The densest planning steps on small hand-written tables: transforms/40_summaries.sql (each summary's session,
range and fate) and 50_parent_collapse.sql (the one parent each summary keeps), run through lcm_etl.steps.engine on a
DuckDB connection exactly as the pipeline runs them; every output row is spelled out."""
from __future__ import annotations

import duckdb
import pytest

from lcm_etl.steps.engine import run_step, step


@pytest.fixture
def con():
    c = duckdb.connect(":memory:")
    yield c
    c.close()


def load(con, table: str, columns: str, rows: list[tuple]) -> None:
    con.execute(f"CREATE TABLE {table} ({columns})")
    if rows:
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def test_40_summaries_gives_each_summary_its_own_session_range_and_the_reason_it_is_skipped(con):
    # conversations 1, 2, 3 are sessions A, B, C; messages 1-3 are A's, 4 is B's, 6 is C's; message 5 is gone
    load(con, "sessions", "conversation_id INT, session_id TEXT", [(1, "A"), (2, "B"), (3, "C")])
    load(con, "selected", "session_id TEXT", [("A",), ("B",)])   # C is filtered out
    load(con, "src_msgs", "message_id INT, session_id TEXT", [(1, "A"), (2, "A"), (3, "A"), (4, "B"), (6, "C")])
    load(con, "msg_plan", "message_id INT, plan_turn INT", [(1, 0), (2, 1), (3, 2), (4, 0), (6, 0)])
    load(con, "src_summaries", "summary_id TEXT, conversation_id INT, depth INT, kind TEXT, created_at TEXT, "
         "latest_at TEXT, earliest_at TEXT", [
             ("L1", 1, 0, "leaf", "2026-01-02 03:04:05", None, None),
             ("L2", 1, 0, "leaf", None, "2026-01-03T00:00:00Z", None),
             ("C1", 1, 1, "condensed", None, None, None),
             ("L3", 2, 0, "leaf", None, None, None),
             ("L4", 1, 0, "leaf", None, None, None),
             ("C2", 1, 1, "condensed", None, None, None),
             ("L5", 9, 0, "leaf", None, None, None),
             ("L6", 2, 0, "leaf", None, None, None),
             ("L7", 3, 0, "leaf", None, None, None)])
    load(con, "src_summary_messages", "summary_id TEXT, message_id INT", [
        ("L1", 1), ("L1", 2),
        ("L2", 3), ("L2", 4),      # one own message and one of session B
        ("L3", 1),                 # B's summary over A's message only
        ("L6", 5),                 # a message the source no longer has
        ("L7", 6)])
    # C1 condensed L1 and L2; C2 condensed L4, which links nothing
    load(con, "src_summary_parents", "summary_id TEXT, parent_summary_id TEXT, ordinal INT",
         [("C1", "L1", 0), ("C1", "L2", 1), ("C2", "L4", 0)])
    load(con, "tgt_summaries", "id TEXT", [("C1",)])   # imported by an earlier run

    run_step(step("40_summaries"), con)

    got = con.execute("""SELECT summary_id, session_id, status, reason, lo_msg, hi_msg, lo_turn, hi_turn,
                                own_msgs, foreign_msgs, dangling_msgs FROM sum_plan ORDER BY summary_id""").fetchall()
    assert got == [
        ("C1", "A", "present", None, 1, 3, 0, 2, 3, 1, 0),
        ("C2", "A", "skipped", "no leaf with linked messages beneath it", None, None, None, None, 0, 0, 0),
        ("L1", "A", "new", None, 1, 2, 0, 1, 2, 0, 0),
        ("L2", "A", "new", None, 3, 3, 2, 2, 1, 1, 0),
        ("L3", "B", "skipped", "every message beneath it belongs to another session",
         None, None, None, None, 0, 1, 0),
        ("L4", "A", "skipped", "no linked messages (no summary_messages rows)", None, None, None, None, 0, 0, 0),
        ("L5", None, "skipped", "its conversation is not in the source", None, None, None, None, 0, 0, 0),
        ("L6", "B", "skipped", "the messages it links are missing from the source", None, None, None, None, 0, 0, 1),
        ("L7", "C", "filtered", None, 6, 6, 0, 0, 1, 0, 0)]
    times = dict(con.execute("SELECT summary_id, created_iso FROM sum_plan WHERE summary_id IN ('L1', 'L2')").fetchall())
    # its own created_at first, else latest_at; Remnic's ISO form with milliseconds
    assert times == {"L1": "2026-01-02T03:04:05.000Z", "L2": "2026-01-03T00:00:00.000Z"}
    assert con.execute("SELECT top, sid FROM sum_closure WHERE top = 'C1' ORDER BY sid").fetchall() == [
        ("C1", "C1"), ("C1", "L1"), ("C1", "L2")]


def test_50_parent_collapse_keeps_the_lowest_ordinal_importable_cover_in_the_same_session(con):
    load(con, "sum_plan", "summary_id TEXT, session_id TEXT, status TEXT", [
        ("S1", "A", "new"), ("S2", "A", "new"), ("S3", "A", "new"),
        ("C1", "A", "new"), ("C2", "A", "present"), ("C3", "A", "new"), ("C4", "A", "new"),
        ("R", "A", "new"), ("X", "B", "new"), ("K", "A", "skipped")])
    # (summary_id = the covering C, parent_summary_id = the S it condensed, ordinal)
    load(con, "src_summary_parents", "summary_id TEXT, parent_summary_id TEXT, ordinal INT", [
        ("C1", "S1", 1), ("C2", "S1", 0),                    # the lower ordinal wins
        ("C4", "S2", 0), ("C3", "S2", 0),                    # a tie goes to the smaller id
        ("X", "S3", 0), ("K", "S3", 1), ("Z", "S3", 2),      # no cover S3 can keep
        ("R", "C2", 0)])                                     # C2 itself is covered: S1 sits two below R

    run_step(step("50_parent_collapse"), con)

    assert con.execute("SELECT cover_id, source_id, ordinal, kept, reason FROM sum_edges "
                       "ORDER BY source_id, cover_id").fetchall() == [
        ("R", "C2", 0, True, None),
        ("C1", "S1", 1, False, "collapsed: another covering summary has a lower ordinal"),
        ("C2", "S1", 0, True, None),
        ("C3", "S2", 0, True, None),
        ("C4", "S2", 0, False, "collapsed: another covering summary has a lower ordinal"),
        ("K", "S3", 1, False, "covering summary is not imported"),
        ("X", "S3", 0, False, "covering summary is in another session"),
        ("Z", "S3", 2, False, "covering summary missing from the source")]
    assert con.execute("SELECT source_id, parent_id, candidates FROM sum_parent ORDER BY source_id").fetchall() == [
        ("C2", "R", 1), ("S1", "C2", 2), ("S2", "C3", 2), ("S3", None, 0)]
    # roots first: every parent is written before its children; a skipped summary has no level
    assert con.execute("SELECT summary_id, lvl FROM sum_level ORDER BY summary_id").fetchall() == [
        ("C1", 0), ("C2", 1), ("C3", 0), ("C4", 0), ("R", 0), ("S1", 2), ("S2", 1), ("S3", 0), ("X", 0)]
