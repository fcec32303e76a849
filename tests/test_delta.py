"""Cost follows the change (docs/design.md, lcm_etl/planning/delta.py): a re-run re-plans only the sessions whose marks
differ from those the previous run stored, and proves the others unchanged. Each test changes a migrated
source (or its target) the way lossless-claw (or another writer) does, re-runs, and checks what was
re-planned, what was written, and that the result is what a full plan gives (lcmcheck, audit)."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from conftest import ROOT, copy_fixture, migrate_json, open_db, run_cli

FIXTURE = "basic-0.15.3.db"   # three conversations, one session each
LCMCHECK = ROOT / "tests" / "tools" / "lcmcheck.py"


@pytest.fixture
def synced(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    first = migrate_json(src, target)
    return src, target, first["run_id"]


def change(db, *statements) -> None:
    con = sqlite3.connect(db)
    with con:
        for sql, *args in statements:
            con.execute(sql, *args)
    con.close()


def converged(src, target) -> None:
    """What a full plan of the source as it is now gives: the contract's checker and audit agree."""
    check = subprocess.run([sys.executable, str(LCMCHECK), str(src), str(target)], capture_output=True, text=True)
    assert check.returncode == 0 and "lcmcheck: 0 problems" in check.stdout, check.stdout + check.stderr
    audit = run_cli("audit", "--src", src, "--dest", target, "--json")
    assert audit.returncode == 0, audit.stdout


APPEND = ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
          "SELECT conversation_id, max(seq) + 1, 'user', 'and one more thing', 5, '2026-11-23 09:00:00' "
          "FROM messages WHERE conversation_id = 2",)


def test_a_message_appended_to_one_conversation_re_plans_only_its_session(synced):
    src, target, first_run = synced
    change(src, APPEND)
    report = migrate_json(src, target)
    assert report["sync_decision"]["since_run"] == first_run
    assert report["sync_decision"]["line"].endswith("; 1 of 3 sessions re-planned (1 conversations changed); --full re-plans "
                                           "everything")
    assert report["messages"]["inserted"] == 1
    converged(src, target)


def test_a_re_run_after_a_sync_re_plans_nothing_and_writes_nothing(synced):
    src, target, _ = synced
    change(src, APPEND)
    second = migrate_json(src, target)["run_id"]
    third = migrate_json(src, target)   # a sync stores the whole source's totals: the no-op shortcut
    assert third["sync_decision"]["line"].startswith(f"no-op: source unchanged and target untouched since run {second}")
    os.utime(src)   # the file looks changed, its rows are not: proved unchanged, nothing re-planned
    fourth = migrate_json(src, target)
    assert fourth["sync_decision"]["since_run"] == second
    assert fourth["sync_decision"]["line"].endswith("; 0 of 3 sessions re-planned (0 conversations changed); --full re-plans "
                                           "everything")
    for report in (third, fourth):
        assert (report["messages"]["inserted"], report["parts"]["inserted"], report["summaries"]["inserted"]) == (0, 0, 0)
        assert report["messages"]["already_present"] == 123


def test_an_entry_id_re_stamped_in_place_is_found_by_its_mark_and_updated(synced):
    src, target, _ = synced
    # transcript re-stamp: an id → another id, nothing else changes
    change(src, ("UPDATE messages SET transcript_entry_id = 'restamped-1' WHERE message_id = "
                 "(SELECT min(message_id) FROM messages WHERE conversation_id = 3)",))
    report = migrate_json(src, target)
    assert "(1 conversations changed)" in report["sync_decision"]["line"]
    assert report["messages"]["updated"] == 1 and report["messages"]["inserted"] == 0
    converged(src, target)


def test_a_session_another_writer_changed_in_the_target_is_re_planned(synced):
    src, target, _ = synced
    con = open_db(target)
    with con:   # a message of session 1 removed behind lcm-etl's back (an undo, a hand edit)
        gone = con.execute("SELECT max(id) FROM lcm_messages WHERE session_id = "
                           "(SELECT min(session_id) FROM lcm_messages)").fetchone()[0]
        con.execute("DELETE FROM lcm_message_parts WHERE message_id = ?", (gone,))
        con.execute("INSERT INTO lcm_messages_fts (lcm_messages_fts, rowid, content) "
                    "SELECT 'delete', id, content FROM lcm_messages WHERE id = ?", (gone,))
        con.execute("DELETE FROM lcm_messages WHERE id = ?", (gone,))
    con.close()
    report = migrate_json(src, target)
    assert "1 of 3 sessions re-planned (0 conversations changed" in report["sync_decision"]["line"]
    assert report["messages"]["inserted"] == 1
    converged(src, target)


def test_a_run_over_some_sessions_stores_no_marks_so_the_next_run_plans_everything(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    con = sqlite3.connect(src)
    session = con.execute("SELECT session_id FROM conversations ORDER BY conversation_id LIMIT 1").fetchone()[0]
    con.close()
    migrate_json(src, target, "--session-filter", session)
    assert "sync" not in migrate_json(src, target)["extra"]
    change(src, APPEND)
    assert migrate_json(src, target)["sync_decision"]["sessions_replanned"] is not None   # the full run stored marks


def test_rows_of_no_conversation_are_a_change_that_only_a_full_plan_handles(synced):
    src, target, _ = synced
    change(src, ("PRAGMA foreign_keys = OFF",),
           ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
            "VALUES (999, 0, 'user', 'orphan', 1, '2026-11-23 09:00:00')",))
    report = migrate_json(src, target)
    assert "sync" not in report["extra"]
    assert report["messages"]["skipped"] == {"its conversation is not in the source": 1}


def test_full_re_plans_every_session_and_stores_marks_again(synced):
    src, target, _ = synced
    change(src, APPEND)
    full = migrate_json(src, target, "--full")
    assert "sync" not in full["extra"] and full["messages"]["already_present"] == 122
    con = open_db(target)
    runs = {r[0] for table in ("lcm_etl_conversation_marks", "lcm_etl_source_marks", "lcm_etl_session_marks")
            for r in con.execute(f"SELECT DISTINCT run_id FROM {table}")}
    con.close()
    assert runs == {full["run_id"]}
    assert json.loads(run_cli("migrate", "--src", src, "--dest", target, "--json").stdout)["messages"]["inserted"] == 0


def test_a_new_conversation_is_re_planned_alone(synced):
    src, target, first_run = synced
    # /new: lossless-claw starts a conversation for a new session and ingests a turn into it
    change(src, ("INSERT INTO conversations (conversation_id, session_id, created_at, updated_at) "
                 "VALUES (4, 'fresh-session', '2026-11-23 09:00:00', '2026-11-23 09:00:00')",),
           ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
            "VALUES (4, 0, 'user', 'a new start', 3, '2026-11-23 09:00:01')",))
    report = migrate_json(src, target)
    assert report["sync_decision"]["since_run"] == first_run
    assert report["sync_decision"]["line"].endswith("; 1 of 4 sessions re-planned (1 conversations changed); --full re-plans "
                                           "everything")
    assert report["messages"]["inserted"] == 1
    converged(src, target)


def stored_and_read_marks(target) -> tuple[dict, dict]:
    """The session marks the last run stored, and those 04_target_marks.sql reads from the target now."""
    from lcm_etl.steps import engine, pipeline
    con = open_db(target)
    try:
        figures = "messages, max_message_id, summaries, boundary_events"
        stored = {r[0]: r[1:] for r in con.execute(f"SELECT session_id, {figures} FROM lcm_etl_session_marks")}
        engine.run_stage(pipeline.TARGET_MARKS, con)
        return stored, {r[0]: r[1:] for r in con.execute(f"SELECT session_id, {figures} FROM temp.target_marks")}
    finally:
        con.close()


def test_the_session_marks_a_run_stores_are_those_04_reads_from_the_target_it_leaves(synced):
    """94 reads again only the sessions a run wrote and carries the others: the marks stored are still the
    whole target's, after a first run, a sync that appends, one that adds a session, and one after another
    writer changed a session in the target."""
    src, target, _ = synced
    stored, read = stored_and_read_marks(target)
    assert stored == read and len(read) == 3
    change(src, APPEND)
    migrate_json(src, target)
    assert stored_and_read_marks(target)[0] == stored_and_read_marks(target)[1] != read
    change(src, ("INSERT INTO conversations (conversation_id, session_id, created_at, updated_at) "
                 "VALUES (4, 'fresh-session', '2026-11-23 09:00:00', '2026-11-23 09:00:00')",),
           ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
            "VALUES (4, 0, 'user', 'a new start', 3, '2026-11-23 09:00:01')",))
    migrate_json(src, target)
    stored, read = stored_and_read_marks(target)
    assert stored == read and len(read) == 4
    con = open_db(target)
    with con:   # another writer: a boundary event in the first session
        con.execute("INSERT INTO lcm_compaction_events (session_id, fired_at, msg_before, tokens_before, "
                    "tokens_after) SELECT min(session_id), '2026-11-23T09:00:00Z', 0, 0, 0 FROM lcm_messages")
    con.close()
    change(src, APPEND)
    migrate_json(src, target)
    stored, read = stored_and_read_marks(target)
    assert stored == read and len(read) == 4


@pytest.mark.parametrize("name", ["basic-0.15.3.db", "shared-session-newest.db", "multiparent-newest.db"])
def test_a_sync_re_run_reports_the_whole_source_as_a_full_plan_does(tmp_path, name):
    src = copy_fixture(name, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    migrate_json(src, target)
    change(src, ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                 "SELECT conversation_id, max(seq) + 1, 'user', 'and one more thing', 5, '2026-11-23 09:00:00' "
                 "FROM messages WHERE conversation_id = (SELECT min(conversation_id) FROM conversations)",))
    synced = migrate_json(src, target)
    assert synced["sync_decision"]["sessions_replanned"] is not None
    full = migrate_json(src, target, "--full", "--dry-run")
    for kind in ("messages", "parts", "summaries"):
        assert synced[kind]["inserted"] + synced[kind]["already_present"] == full[kind]["already_present"], kind
        assert synced[kind]["skipped"] == full[kind]["skipped"], kind
    assert synced["skipped_summaries"] == full["skipped_summaries"]
    assert synced["cross_session_links_in_skipped"] == full["cross_session_links_in_skipped"]

