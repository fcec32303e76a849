"""`lcm-etl undo RUN_ID` removes exactly what a run wrote and restores what it changed: the target's content
digest before a run equals its digest after the run and its undo (tests/undolib.py), for migrate into an
empty, a non-empty and a new target, reconcile, a sync re-run that changed rows in place, and a killed run.
It refuses (exit 2, one line, nothing changed) when later rows depend on the run, unless --force."""
from __future__ import annotations

import sqlite3
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import LCM_ETL, ROOT, copy_fixture, open_db
from test_sync import earlier
from undolib import (add_native_messages, cli_ok, digest, generate_source, kill_after_batches, native_target, refused,
                     runs, undo)

FIXTURE_SESSIONS = ROOT / "fixtures" / "sessions"


def migrate(src, target, *extra) -> dict:
    return cli_ok("migrate", "--src", src, "--dest", target, *extra)


def reconcile(target, transcript, *extra) -> dict:
    return cli_ok("reconcile", "--sessions", FIXTURE_SESSIONS / transcript, "--dest", target, *extra)


@pytest.mark.parametrize("name", ["basic-0.15.3.db", "multiparent-newest.db", "shared-session-newest.db"])
def test_undoing_a_migrate_into_a_target_holding_only_remnic_rows_leaves_it_as_it_was(tmp_path, name):
    src = copy_fixture(name, tmp_path / "src")
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    before = digest(target)
    run = migrate(src, target, "--batch-rows", 100)
    assert run["messages"]["inserted"] > 0 and digest(target) != before
    report = undo(target, run["run_id"])
    assert report["removed"]["messages"] == run["messages"]["inserted"]
    assert report["removed"]["parts"] == run["parts"]["inserted"]
    assert report["removed"]["summaries"] == run["summaries"]["inserted"]
    assert report["removed"]["boundary_events"] == run["boundary_events"]
    assert digest(target) == before


def test_undoing_a_second_migrate_keeps_the_first_import(tmp_path):
    target = tmp_path / "out" / "lcm.sqlite"
    migrate(copy_fixture("basic-0.15.3.db", tmp_path / "a"), target)
    before = digest(target)
    second = migrate(copy_fixture("multiparent-newest.db", tmp_path / "b"), target, "--batch-rows", 100)
    assert second["messages"]["inserted"] > 0
    undo(target, second["run_id"])
    assert digest(target) == before


def test_undoing_a_reconcile_removes_its_transcript_rows(tmp_path):
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    migrate(copy_fixture("basic-0.15.3.db", tmp_path / "src"), target)
    before = digest(target)
    run = reconcile(target, "tool-heavy.jsonl")
    assert run["messages"]["inserted"] > 0
    undo(target, run["run_id"])
    assert digest(target) == before


@pytest.mark.parametrize("shape", ["tail", "condense"])
def test_undoing_a_sync_re_run_restores_the_parents_it_updated(tmp_path, shape):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    earlier(src, tmp_path / "before.db", shape)
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    migrate(tmp_path / "before.db", target)
    before = digest(target)
    sync = migrate(src, target)
    assert sync["parents_updated"] > 0 and sync["summaries"]["inserted"] > 0
    report = undo(target, sync["run_id"])
    assert report["restored"]["summaries"] == sync["parents_updated"]
    assert digest(target) == before


def test_undoing_a_sync_that_rewrote_a_summary_and_message_metadata_restores_both_and_their_search_index(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    migrate(src, target)
    con = sqlite3.connect(src)
    with con:
        sid = con.execute("SELECT min(summary_id) FROM summaries").fetchone()[0]
        con.execute("UPDATE summaries SET content = 'Zanzibarquux repaired', token_count = 7 WHERE summary_id = ?", (sid,))
        con.execute("UPDATE messages SET identity_hash = 'rehashed-' || message_id WHERE conversation_id = 1")
        con.execute("UPDATE conversations SET archived_at = '2030-01-01 00:00:00', archive_cause = 'manual-reset' "
                    "WHERE conversation_id = 1")
    con.close()
    before = digest(target)
    sync = migrate(src, target)
    assert (sync["summaries"]["updated"], sync["messages"]["updated"], sync["conversations_changed"]) == (1, 41, 1)
    report = undo(target, sync["run_id"])
    assert report["restored"] == {"summaries": 1, "messages": 41, "boundary_events": 0, "provenance_rows": 1}
    assert digest(target) == before
    con = open_db(target)
    assert con.execute("SELECT count(*) FROM lcm_summaries_fts WHERE lcm_summaries_fts MATCH 'Zanzibarquux'").fetchone()[0] == 0
    con.close()


def test_undo_then_re_run_gives_the_same_target_as_the_first_run(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    first = migrate(src, target, "--batch-rows", 100)
    after_first = digest(target)
    undo(target, first["run_id"])
    again = migrate(src, target, "--batch-rows", 100)
    assert again["messages"]["inserted"] == first["messages"]["inserted"]
    assert digest(target) == after_first   # ids included: the sequences went back with the undo


def test_undoing_the_run_that_created_a_new_target_empties_it_and_a_re_run_fills_it_the_same(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    first = migrate(src, target)   # a new target: built aside from the source ids, linked into place
    after_first = digest(target, ids=False)
    report = undo(target, first["run_id"])
    assert report["removed"]["messages"] == first["messages"]["inserted"]
    con = open_db(target)
    assert [con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in
            ("lcm_messages", "lcm_message_parts", "lcm_summary_nodes", "lcm_compaction_events", "lcm_etl_summaries",
             "lcm_etl_conversations", "lcm_messages_fts_docsize", "lcm_summaries_fts_docsize")] == [0] * 8
    con.close()
    migrate(src, target)
    assert digest(target, ids=False) == after_first


def test_undoing_a_killed_run_removes_the_batches_it_committed(tmp_path):
    src = generate_source(tmp_path / "src" / "lcm.db", messages=6000, sessions=30, seed=3)
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    before = digest(target)
    proc = subprocess.Popen([str(LCM_ETL), "migrate", "--src", str(src), "--dest", str(target), "--batch-rows", "100",
                             "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    kill_after_batches(proc, target)
    (killed,) = [r for r in runs(target) if r["command"] == "migrate"]
    assert killed["status"] == "killed"   # its row says `running`, but no run holds the target's lock
    report = undo(target, killed["run_id"])
    assert report["status"] == "killed"    # the undo holds the run lock: a run still `running` is dead
    assert report["removed"]["messages"] > 0
    assert digest(target) == before


def test_a_dry_run_undo_reports_what_would_go_and_changes_nothing(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    run = migrate(src, target)
    con = open_db(target)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    files = sorted(p.name for p in target.parent.iterdir())
    image = target.read_bytes()
    report = undo(target, run["run_id"], "--dry-run")
    assert report["dry_run"] and report["undo_run_id"] is None
    assert report["removed"]["messages"] == run["messages"]["inserted"]
    assert target.read_bytes() == image and sorted(p.name for p in target.parent.iterdir()) == files
    real = undo(target, run["run_id"])
    assert {k: v for k, v in real.items() if k not in ("dry_run", "undo_run_id", "elapsed_s")} == \
           {k: v for k, v in report.items() if k not in ("dry_run", "undo_run_id", "elapsed_s")}


def test_undo_refuses_when_remnic_appended_messages_after_the_imported_turns_and_force_leaves_them(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    before = digest(target)
    run = migrate(src, target)
    session = run["sessions_touched"][0]
    con = sqlite3.connect(target, isolation_level=None)
    native = add_native_messages(con, session, 2)
    con.close()
    after_native = digest(target)
    line = refused(target, run["run_id"])
    assert line == (f"lcm-etl: error: run {run['run_id']} cannot be undone: Remnic wrote rows after it that depend "
                    f"on it (2 messages appended after its imported turns; session {session}); --force removes the "
                    "run's rows and leaves those")
    assert digest(target) == after_native
    report = undo(target, run["run_id"], "--force")
    assert report["left"] == [f"2 Remnic messages appended after its imported turns (session {session}): they keep "
                              "their turn numbers; Remnic appends after a session's highest turn, so nothing collides"]
    con = open_db(target)
    assert [r[0] for r in con.execute("SELECT id FROM lcm_messages WHERE session_id = ? ORDER BY id", (session,))] == native
    con.execute("DELETE FROM lcm_messages WHERE id IN (?, ?)", native)
    con.close()
    assert {k: v for k, v in digest(target).items() if not k.startswith(("fts_", "sqlite_"))} == \
           {k: v for k, v in before.items() if not k.startswith(("fts_", "sqlite_"))}


def test_undo_refuses_when_a_remnic_summary_covers_the_imported_turns_or_has_an_imported_parent(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    run = migrate(src, target)
    con = sqlite3.connect(target, isolation_level=None)
    sid, session, top = con.execute("SELECT id, session_id, msg_end FROM lcm_summary_nodes ORDER BY depth DESC, id "
                                    "LIMIT 1").fetchone()
    con.execute("INSERT INTO lcm_summary_nodes (id, session_id, depth, parent_id, summary_text, token_count, msg_start, "
                "msg_end, escalation, created_at) VALUES ('native-leaf', ?, 0, ?, 'remnic leaf', 3, ?, ?, 0, "
                "'2026-01-01T00:00:00.000Z')", (session, sid, top, top))
    con.close()
    line = refused(target, run["run_id"])
    assert line == (f"lcm-etl: error: run {run['run_id']} cannot be undone: Remnic wrote rows after it that depend "
                    f"on it (1 summary covering its turns, 1 summary whose parent is one of its summaries; session "
                    f"{session}); --force removes the run's rows and leaves those")
    report = undo(target, run["run_id"], "--force")
    assert report["left"][-1] == ("1 Remnic summary whose parent is one of its summaries, made roots (parent_id NULL): "
                                  "a summary no other summary covers, as Remnic makes them")
    con = open_db(target)
    assert [tuple(r) for r in con.execute("SELECT id, parent_id FROM lcm_summary_nodes")] == [("native-leaf", None)]
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    con.close()


def test_undo_refuses_to_take_out_a_run_a_later_run_built_on_until_that_one_is_undone(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    earlier(src, tmp_path / "before.db", "condense")
    target = tmp_path / "out" / "lcm.sqlite"
    first = migrate(tmp_path / "before.db", target)
    sync = migrate(src, target)
    started = [r for r in runs(target) if r["run_id"] == sync["run_id"]][0]["started_at"]
    assert refused(target, first["run_id"]) == (
        f"lcm-etl: error: run {first['run_id']} cannot be undone: the later run {sync['run_id']} (migrate, started "
        f"{started}) changed or built on its rows; undo that run first")
    assert refused(target, first["run_id"], "--force").endswith("undo that run first")
    undo(target, sync["run_id"])
    undo(target, first["run_id"])
    con = open_db(target)
    assert con.execute("SELECT count(*) FROM lcm_messages").fetchone()[0] == 0
    con.close()


def test_undo_names_what_it_cannot_undo(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    run = migrate(src, target)
    assert refused(target, "feedface") == (f"lcm-etl: error: no run in the ledger of {target} matches 'feedface' "
                                           f"(`lcm-etl runs --dest {target}` lists them)")
    done = undo(target, run["run_id"][:8])   # a unique prefix names the run
    assert refused(target, run["run_id"]) == (f"lcm-etl: error: run {run['run_id']} was already undone (by run "
                                              f"{done['undo_run_id']})")
    assert refused(target, done["undo_run_id"]) == (f"lcm-etl: error: run {done['undo_run_id']} is an undo; it cannot "
                                                    "itself be undone (re-run the undone command)")
    assert refused(tmp_path / "none.sqlite", "abc") == f"lcm-etl: error: no target at {tmp_path / 'none.sqlite'}: nothing to undo"


# One step of a random history: a run (migrate of a fixture, or of the earlier state of a growing source;
# reconcile of a transcript) or an undo of the latest run not undone yet.
STEPS = st.lists(st.sampled_from(["basic", "before", "grown", "multiparent", "reconcile", "undo"]), min_size=1, max_size=5)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_any_sequence_of_runs_and_undos_of_the_latest_run_walks_back_exactly(tmp_path_factory, steps):
    base = tmp_path_factory.mktemp("history")
    grown = copy_fixture("basic-0.15.3.db", base / "src")
    earlier(grown, base / "before.db", "condense")
    sources = {"basic": copy_fixture("basic-0.5.0.db", base / "b"), "before": base / "before.db", "grown": grown,
               "multiparent": copy_fixture("multiparent-newest.db", base / "m")}
    target = native_target(base / "out" / "lcm.sqlite")
    history = []   # (run_id, digest before it) of the runs not undone, oldest first
    for step in steps:
        if step == "undo":
            if history:
                run_id, before = history.pop()
                undo(target, run_id)
                assert digest(target) == before, (steps, step)
            continue
        before = digest(target)
        report = (reconcile(target, "tool-heavy.jsonl", "--batch-rows", 200) if step == "reconcile" else
                  migrate(sources[step], target, "--batch-rows", 200, "--full"))
        history.append((report["run_id"], before))
    while history:   # then everything, newest first, back to the target Remnic had
        run_id, before = history.pop()
        undo(target, run_id)
        assert digest(target) == before, steps
    assert all(r["status"] == "undone" for r in runs(target) if r["command"] != "undo")
