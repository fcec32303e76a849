"""`migrate --watch` and `reconcile --watch`: a real watcher process, real files, real signals."""
from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys

from conftest import FIXTURE_DIR, ROOT, copy_fixture, fixture_rows, run_cli
from test_json_schemas import validator
from watchlib import Watcher, append_turns, counts, integrity

SESSIONS = ROOT / "fixtures" / "sessions"


def assert_every_line_matches_the_watch_schema(lines: list[dict]) -> None:
    """docs/schemas/watch.schema.json describes every line a watch prints under --json, a failed sync's too."""
    check = validator("watch")
    assert lines
    for line in lines:
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in check.iter_errors(line)]
        assert errors == [], line
        assert not check.is_valid({**line, "unexpected": 1})   # closed, as every schema


def one_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.stdout == ""
    lines = proc.stderr.strip("\n").split("\n")
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_watch_with_dry_run_or_manifest_and_interval_without_watch_are_one_line_usage_errors(tmp_path):
    src, dest = FIXTURE_DIR / "basic-0.15.3.db", tmp_path / "t.sqlite"
    manifest = tmp_path / "pairs.txt"
    manifest.write_text(f"{src} {dest}\n")
    cases = [
        (("migrate", "--src", src, "--dest", dest, "--watch", "--dry-run"),
         "lcm-etl: error: --watch cannot be combined with --dry-run: a watch keeps one target in step"),
        (("migrate", "--manifest", manifest, "--watch"),
         "lcm-etl: error: --watch cannot be combined with --manifest: a watch keeps one target in step"),
        (("reconcile", "--sessions", SESSIONS / "plain-chat.jsonl", "--dest", dest, "--watch", "--dry-run"),
         "lcm-etl: error: --watch cannot be combined with --dry-run: a watch keeps one target in step"),
        (("migrate", "--src", src, "--dest", dest, "--interval", "1"),
         "lcm-etl: error: --interval applies only with --watch"),
    ]
    for args, message in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2, proc.stderr
        assert one_error(proc) == message
    assert not dest.exists()


def test_a_bad_source_at_the_first_sync_ends_the_watch_with_that_error_and_exit_2(tmp_path):
    proc = run_cli("migrate", "--src", tmp_path / "missing.db", "--dest", tmp_path / "t.sqlite", "--watch",
                   "--json", timeout=60)
    assert proc.returncode == 2
    message = f"source not found: {tmp_path / 'missing.db'} (pass --src with the path of lossless-claw's lcm.db)"
    assert proc.stderr == f"lcm-etl: error: {message}\n"
    assert json.loads(proc.stdout) == {"error": message, "exit_code": 2}   # --json: the error as JSON too
    assert not (tmp_path / "t.sqlite").exists()


def test_migrate_watch_imports_everything_then_each_append_and_stops_on_sigint_with_a_whole_target(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "openclaw")
    target = tmp_path / "remnic" / "lcm.sqlite"
    w = Watcher("migrate", "--src", src, "--dest", target, "--interval", "0.2", tmp=tmp_path / "tmp")
    try:
        first = w.next_sync()
        assert (first["sync"], first["messages"]["inserted"], first["summaries"]["inserted"]) == (1, 122, 15)
        assert first["timestamp"].endswith("Z") and first["run_id"]
        added = append_turns(src, 2)
        second = w.next_sync()
        assert (second["sync"], second["messages"]["inserted"], second["summaries"]["inserted"]) == (2, added, 2)
        # only the session the turns went to is re-planned (lcm_etl/planning/delta.py); the others are proved unchanged
        assert "1 of 3 sessions re-planned (1 conversations changed" in second["sync_decision"]["line"]
        # the report still speaks of the whole source (delta.add_unchanged)
        assert second["messages"]["already_present"] == 122
        # the sync only extends the rows the first one left at the session's end: its seam moves there
        assert (second["boundary_events"], second["boundaries_moved"]) == (0, 1)
        code, err = w.stop(signal.SIGINT)
    finally:
        w.kill()
    assert code == 0, err
    assert err == ""   # under --json the only output is the sync objects
    assert_every_line_matches_the_watch_schema(w.seen)
    assert integrity(target) == "ok"
    assert counts(target) == {"lcm_messages": 122 + added, "lcm_message_parts": 194, "lcm_summary_nodes": 17,
                              "lcm_compaction_events": 3}
    assert not list((tmp_path / "tmp").iterdir()), "a sync left its snapshot folder behind"


def test_the_text_output_is_one_line_per_sync_and_sigterm_also_exits_0(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "openclaw")
    target = tmp_path / "lcm.sqlite"
    w = Watcher("migrate", "--src", src, "--dest", target, "--interval", "0.2", tmp=tmp_path / "tmp", as_json=False)
    try:
        first = w.next_sync()
        messages, parts = fixture_rows("multiparent-newest.db"), fixture_rows("multiparent-newest.db", "message_parts")
        assert first.split(" ", 1)[1].startswith(f"sync 1: +{messages} messages, +{parts} parts, +15 summaries, "
                                                 "+2 boundary events ("), first
        src.touch()   # a new signature with nothing new in it
        assert " sync 2: nothing new (" in w.next_sync()
        code, err = w.stop(signal.SIGTERM)
    finally:
        w.kill()
    assert code == 0, err
    assert err == "lcm-etl: watching (polling every 0.2 s; Ctrl-C stops)\n"
    assert integrity(target) == "ok" and counts(target)["lcm_messages"] == messages


def test_a_later_sync_that_fails_is_reported_and_retried_until_it_succeeds(tmp_path):
    """A target locked by another writer: exit-1 failure, one stderr line and one JSON error record;
    the watch goes on and retries without a further change once the lock is gone."""
    src = copy_fixture("basic-0.15.3.db", tmp_path / "openclaw")
    target = tmp_path / "lcm.sqlite"
    w = Watcher("migrate", "--src", src, "--dest", target, "--interval", "0.2", "--lock-timeout", "0.2",
                tmp=tmp_path / "tmp")
    holder = None
    try:
        assert w.next_sync()["messages"]["inserted"] == fixture_rows("basic-0.15.3.db")
        holder = subprocess.Popen([sys.executable, str(ROOT / "tests" / "faults" / "actors.py"), "lock-holder",
                                   str(target), "3"], stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "locked"
        added = append_turns(src, 1)
        failed = w.next_sync()
        assert failed["sync"] == 2 and failed["exit_code"] == 1 and "locked" in failed["error"], failed
        assert set(failed) == {"schema_version", "timestamp", "started_at", "sync", "error", "exit_code", "elapsed_s"}
        done = w.sync_until(lambda s: "error" not in s)
        assert done["messages"]["inserted"] == added
        code, err = w.stop()
    finally:
        w.kill()
        if holder is not None:
            holder.wait(timeout=60)
            holder.stdout.close()
    assert code == 0
    failures = [s for s in w.seen if "error" in s]
    assert err.strip("\n").split("\n") == [
        f"lcm-etl: error: {s['error']} (sync {s['sync']}; the watch goes on)" for s in failures]
    assert_every_line_matches_the_watch_schema(w.seen)
    assert integrity(target) == "ok" and counts(target)["lcm_messages"] == fixture_rows("basic-0.15.3.db") + added


def test_reconcile_watch_imports_an_appended_line_and_a_new_transcript_in_the_folder(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    lines = (SESSIONS / "plain-chat.jsonl").read_text().splitlines(keepends=True)
    last_message = max(i for i, ln in enumerate(lines) if '"type":"message"' in ln)
    chat = folder / "plain-chat.jsonl"
    chat.write_text("".join(lines[:last_message]))   # the last message comes later
    target = tmp_path / "lcm.sqlite"
    w = Watcher("reconcile", "--sessions", folder, "--dest", target, "--interval", "0.2", tmp=tmp_path / "tmp")
    try:
        first = w.next_sync()
        assert first["messages"]["inserted"] == 7 and first["extra"]["transcripts_read"] == 1
        with open(chat, "a") as fh:
            fh.writelines(lines[last_message:])
        assert w.next_sync()["messages"]["inserted"] == 1
        shutil.copyfile(SESSIONS / "tool-heavy.jsonl", folder / "tool-heavy.jsonl")
        third = w.next_sync()
        assert third["messages"]["inserted"] == 21 and third["extra"]["transcripts_read"] == 2
        code, err = w.stop()
    finally:
        w.kill()
    assert code == 0, err
    assert integrity(target) == "ok" and counts(target)["lcm_messages"] == 8 + 21
    assert_every_line_matches_the_watch_schema(w.seen)


def test_a_watchs_later_sync_checks_the_target_rows_of_the_sessions_it_reads_new_lines_of_and_a_run_checks_all(
        tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    lines = (SESSIONS / "plain-chat.jsonl").read_text().splitlines(keepends=True)
    last_message = max(i for i, ln in enumerate(lines) if '"type":"message"' in ln)
    chat = folder / "plain-chat.jsonl"
    chat.write_text("".join(lines[:last_message]))
    shutil.copyfile(SESSIONS / "tool-heavy.jsonl", folder / "tool-heavy.jsonl")
    target = tmp_path / "lcm.sqlite"
    w = Watcher("reconcile", "--sessions", folder, "--dest", target, "--interval", "0.2", tmp=tmp_path / "tmp")
    try:
        assert w.next_sync()["messages"]["inserted"] == 7 + 21
        with sqlite3.connect(target) as con:   # a row of each session lost from the target (Remnic's cleanup)
            sessions = sorted(r[0] for r in con.execute("SELECT DISTINCT session_id FROM lcm_messages"))
            for sid in sessions:
                con.execute("DELETE FROM lcm_messages WHERE id = (SELECT max(id) FROM lcm_messages WHERE session_id = ?)",
                            (sid,))
        con.close()
        with open(chat, "a") as fh:
            fh.writelines(lines[last_message:])
        later = w.next_sync()
        code, err = w.stop()
    finally:
        w.kill()
    assert code == 0, err
    # the session read past its record is checked, re-read whole and repaired; the unchanged one is not read
    assert later["messages"]["inserted"] == 1 + 1
    assert "1 re-read: the target no longer holds its session's rows as recorded" in later["sync_decision"]["line"]
    assert counts(target)["lcm_messages"] == 8 + 21 - 1
    run = json.loads(run_cli("reconcile", "--sessions", folder, "--dest", target, "--json").stdout)
    assert run["messages"]["inserted"] == 1 and counts(target)["lcm_messages"] == 8 + 21
