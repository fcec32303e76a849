"""`lcm-etl runs` lists the ledger; a run's ledger row is written when its first batch commits (`running`)
and becomes `complete` or `failed`; lcm-etl's tables carry a layout version, and a target whose lcm-etl tables
have another layout is refused in one line, untouched."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time

import pytest

from conftest import LCM_ETL, copy_fixture, open_db, run_cli
from lcm_etl.store import ledger
from lcm_etl.store.runlock import target_lock
from undolib import (NATIVE_SESSION, cli_ok, digest, generate_source, kill_after_batches, native_target, runs, undo)


def test_runs_lists_every_run_with_its_command_times_status_source_options_and_counts(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    first = cli_ok("migrate", "--src", src, "--dest", target)
    again = cli_ok("migrate", "--src", src, "--dest", target)   # the no-op shortcut is a run too
    listed = cli_ok("runs", "--dest", target)
    assert listed["ledger_schema_version"] == ledger.SCHEMA_VERSION and listed["target"] == str(target)
    assert [(r["run_id"], r["command"], r["status"]) for r in listed["runs"]] == [
        (first["run_id"], "migrate", "complete"), (again["run_id"], "migrate", "complete")]
    run = listed["runs"][0]
    # the source's path as people name it, and its key: the real path and the database there (lcm_etl/sync/identity.py)
    assert run["source_path"] == os.path.realpath(src) and run["options"]["key_by"] == "session-id"
    assert run["source_key"].startswith(f"{os.path.realpath(src)}#")
    assert run["counts"]["written"]["messages_inserted"] == first["messages"]["inserted"]
    assert run["started_at"] <= run["finished_at"]
    text = run_cli("runs", "--dest", target)
    assert text.returncode == 0 and text.stderr == ""
    lines = text.stdout.splitlines()
    assert lines[0] == f"lcm-etl runs: {target}"
    assert lines[2].split()[:3] == [first["run_id"][:12], "migrate", "complete"]   # undo takes a prefix
    assert f"messages {first['messages']['inserted']}," in lines[2]
    assert "nothing changed" in lines[3]


def test_no_op_runs_in_a_row_share_one_ledger_row_with_their_count_and_the_last_time(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    first = cli_ok("migrate", "--src", src, "--dest", target)
    noops = [cli_ok("migrate", "--src", src, "--dest", target) for _ in range(3)]
    assert all(r["sync_decision"]["how"] == "no-op" for r in noops)
    listed = runs(target)
    assert [(r["run_id"], r["times"]) for r in listed] == [(first["run_id"], 1), (noops[0]["run_id"], 3)]
    assert {r["run_id"] for r in noops} == {noops[0]["run_id"]}   # each no-op run reports the row that records it
    row = listed[1]
    assert row["started_at"] < row["finished_at"] and row["finished_at"] > listed[0]["finished_at"]
    line = run_cli("runs", "--dest", target).stdout.splitlines()[3]
    assert line.endswith(f"nothing changed from {src} (3 runs in a row: started is the first's, finished the last's)")
    # a run that is not a no-op ends the streak: the no-op after it is a row of its own
    assert cli_ok("migrate", "--src", src, "--dest", target, "--full")["sync_decision"]["how"] != "no-op"
    cli_ok("migrate", "--src", src, "--dest", target)
    assert [r["times"] for r in runs(target)] == [1, 3, 1, 1]


def test_runs_of_a_missing_target_is_one_line_and_exit_2(tmp_path):
    proc = run_cli("runs", "--dest", tmp_path / "none.sqlite")
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"lcm-etl: error: no target at "
                                                                  f"{tmp_path / 'none.sqlite'}: no runs\n")


def test_a_run_interrupted_after_its_first_batch_is_recorded_as_failed_and_its_rows_can_be_undone(tmp_path):
    src = generate_source(tmp_path / "src" / "lcm.db", messages=6000, sessions=30, seed=5)
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    before = digest(target)
    proc = subprocess.Popen([str(LCM_ETL), "migrate", "--src", str(src), "--dest", str(target), "--batch-rows", "100",
                             "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600

    def status() -> str | None:
        con = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT status FROM lcm_etl_runs").fetchone()
            return row and row[0]
        except sqlite3.OperationalError:   # no ledger before the first batch commits
            return None
        finally:
            con.close()

    while status() is None and proc.poll() is None:
        assert time.monotonic() < deadline, "the run wrote no ledger row"
        time.sleep(0.01)
    assert status() == "running"   # written with the first batch, before the run ends
    proc.send_signal(signal.SIGINT)   # Ctrl-C: the run stops between statements and says so
    assert proc.wait(timeout=600) == 130, proc.stderr.read()
    (run,) = runs(target)
    assert (run["status"], run["command"]) == ("failed", "migrate") and run["finished_at"]
    undo(target, run["run_id"])
    assert digest(target) == before


def test_runs_after_a_killed_run_says_killed_and_what_its_committed_batches_hold_as_undo_would_remove(tmp_path):
    src = generate_source(tmp_path / "src" / "lcm.db", messages=6000, sessions=30, seed=4)
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    proc = subprocess.Popen([str(LCM_ETL), "migrate", "--src", str(src), "--dest", str(target), "--batch-rows", "100",
                             "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    kill_after_batches(proc, target)
    (killed,) = runs(target)
    would = undo(target, killed["run_id"], "--dry-run")["removed"]
    con = open_db(target)
    imported = con.execute("SELECT count(*) FROM lcm_messages WHERE session_id != ?", (NATIVE_SESSION,)).fetchone()[0]
    con.close()
    assert killed["status"] == "killed" and killed["finished_at"] is None
    assert killed["committed"]["messages"] == would["messages"] == imported > 0
    assert {k: killed["committed"][k] for k in ("parts", "summaries", "boundary_events")} == {
        k: would[k] for k in ("parts", "summaries", "boundary_events")}
    text = run_cli("runs", "--dest", target).stdout.splitlines()
    assert text[2].split()[:3] == [killed["run_id"][:12], "migrate", "killed"]
    assert f"committed messages {imported}, parts {would['parts']}" in text[2]
    with target_lock(target, 10.0):   # a live run holds the lock: its row is a running run's
        assert runs(target)[0]["status"] == "running"
    cli_ok("migrate", "--src", src, "--dest", target)   # the next run records the killed run as such
    assert [(r["status"], r["committed"] is None) for r in runs(target)] == [("killed", False), ("complete", True)]


@pytest.mark.parametrize("layout", ["no version", "version 3"])
def test_a_target_whose_lcm_etl_tables_have_another_layout_is_refused_in_one_line_untouched(tmp_path, layout):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    cli_ok("migrate", "--src", src, "--dest", target)
    con = open_db(target)
    with con:
        if layout == "no version":   # as an lcm-etl before its first release left it
            con.execute("DROP TABLE lcm_etl_meta")
        else:
            con.execute("UPDATE lcm_etl_meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    before = digest(target)
    said = "no schema version recorded" if layout == "no version" else "schema version 3"
    for args in (("migrate", "--src", src, "--dest", target), ("migrate", "--src", src, "--dest", target, "--full"),
                 ("runs", "--dest", target)):
        proc = run_cli(*args)
        assert (proc.returncode, proc.stderr) == (2, (
            f"lcm-etl: error: target's lcm-etl tables have a layout this lcm-etl does not know ({said}; it knows "
            "version 1): migrate into a new target\n"))
    assert digest(target) == before
