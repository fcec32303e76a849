"""A re-run that reads a few of many sessions reads the target's rows of those sessions from one copy
(reconcile_plan.target_rows, lcm_etl/read/lcmdb/subset.py): settle's check for rows without entry ids and the plan
(r05_target_state.sql) read that copy, and it is taken again when settle sends more sessions to be read whole."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from conftest import ROOT, run_cli
from lcm_etl import sqlite_runtime
from lcm_etl.planning.reconcile_plan import TARGET_ROWS
from lcm_etl.read.lcmdb import subset
from lcm_etl.read.sessions import transcript_decision as decide
from test_reconcile_decision import reconcile, whys, without_entry_ids
from test_reconcile_offsets import write

SESSIONS = ROOT / "fixtures" / "sessions"
OTHERS = ("plain-chat.jsonl", "unicode.jsonl", "branched.jsonl")   # sessions the re-runs below leave unchanged


def folder_with_others(tmp_path: Path) -> Path:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name in OTHERS:
        shutil.copyfile(SESSIONS / name, folder / name)
    return folder


def messages(target: Path) -> dict[str, int]:
    with sqlite3.connect(target) as con:
        rows = dict(con.execute("SELECT session_id, count(*) FROM lcm_messages GROUP BY 1").fetchall())
    con.close()
    return rows


def test_a_session_read_among_many_whose_target_rows_lack_entry_ids_is_read_again_whole(tmp_path):
    """One session of four read past its record: its rows come from the copy, whose id-less rows settle still finds."""
    transcript, lcm_db, lines = without_entry_ids(tmp_path)
    folder = folder_with_others(tmp_path)
    moved = folder / transcript.name
    shutil.copyfile(transcript, moved)
    target = tmp_path / "t.sqlite"
    assert run_cli("migrate", "--src", lcm_db, "--dest", target).returncode == 0
    reconcile("--sessions", folder, "--dest", target)
    write(moved, lines)   # appended: its new messages are matched against the session's held rows
    report = reconcile("--sessions", folder, "--dest", target)
    assert whys(report) == {moved.name: "re-read: its session holds rows without entry ids",
                            **{name: None for name in OTHERS}}


def test_a_session_settle_sends_to_be_read_whole_is_planned_against_its_target_rows(tmp_path):
    """The copy is taken before settle, of the sessions read past their records (none here); the session whose
    target rows were lost is read whole after it, and the copy is taken again with it: only its lost row is written."""
    folder = folder_with_others(tmp_path)
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", folder, "--dest", target)
    before = messages(target)
    with sqlite3.connect(target) as con:   # a row of one session lost from the target (Remnic's cleanup)
        con.execute("DELETE FROM lcm_messages WHERE id = (SELECT max(id) FROM lcm_messages)")
    con.close()
    report = reconcile("--sessions", folder, "--dest", target)
    assert sorted(why for why in whys(report).values() if why) == [
        "re-read: the target no longer holds its session's rows as recorded"]
    assert report["messages"]["inserted"] == 1
    assert messages(target) == before


def test_the_copy_of_the_sessions_rows_is_read_through_its_indexes_not_row_by_row_again(tmp_path):
    """The copy is read once, as it is made; settle's check of its id-less rows (_BARE_TARGET) then searches the index
    built with it, and r05's last turn per session (tgt_max_turn, a scan of indexed columns) reads the session index
    the copy carries from the target, as SQLite's plans say."""
    folder = folder_with_others(tmp_path)
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", folder, "--dest", target)
    session = sorted(messages(target))[0]
    copy = subset.target_subset(target, tmp_path / "copy.sqlite", [session], TARGET_ROWS, decide.BARE_INDEX)
    con = sqlite_runtime.sqlite3.connect(":memory:")   # the SQLite lcm-etl runs on
    con.execute("CREATE TABLE transcripts (session_id, read, read_count)")
    con.execute("INSERT INTO transcripts VALUES (?, 'appended', 1)", (session,))
    con.execute("CREATE TEMP TABLE bare (session_id)")
    con.execute("ATTACH ? AS target_rows", (str(copy),))
    plans = {sql: " | ".join(r[3] for r in con.execute(f"EXPLAIN QUERY PLAN {sql}"))
             for sql in (decide._BARE_TARGET, "SELECT session_id, turn_index FROM target_rows.lcm_messages")}
    con.close()
    assert "SEARCH target_rows.lcm_messages USING INDEX bare_rows (session_id=?)" in plans[decide._BARE_TARGET]
    assert plans["SELECT session_id, turn_index FROM target_rows.lcm_messages"] == (
        "SCAN target_rows.lcm_messages USING COVERING INDEX idx_lcm_messages_session")
