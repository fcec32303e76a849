"""reconcile: crash recovery from JSONL transcripts, alone and together with migrate (docs/mapping.md, JSONL transcripts)."""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, folder_state, run_cli, target_rows

SESSIONS = ROOT / "fixtures" / "sessions"
# OpenClaw's active-path message counts (fixtures/sessions/README.md, "OpenClaw branch")
ACTIVE_PATH = {"plain-chat": 8, "tool-heavy": 21, "branched": 4, "compaction": 14, "unicode": 12,
               "channel-telegram": 18, "rewritten": 8}


def build_pair(name: str, folder: Path) -> dict:
    """An OpenClaw state dir whose lcm.db fell behind the transcript (fixtures/build_crash_pair.py)."""
    out = subprocess.run([sys.executable, str(ROOT / "fixtures" / "build_crash_pair.py"), name, str(folder)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def reconcile(*args) -> dict:
    proc = run_cli("reconcile", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def migrate(src: Path, dest: Path) -> dict:
    proc = run_cli("migrate", "--src", src, "--dest", dest, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", sorted(ACTIVE_PATH))
def test_a_fresh_reconcile_imports_exactly_the_active_path(tmp_path, name):
    target = tmp_path / "t.sqlite"
    report = reconcile("--sessions", SESSIONS / f"{name}.jsonl", "--dest", target)
    assert report["messages"]["inserted"] == ACTIVE_PATH[name]
    got = target_rows(target)
    assert len(got) == ACTIVE_PATH[name]
    assert [r["turn_index"] for r in got] == list(range(len(got)))
    metas = [json.loads(r["metadata"]) for r in got]
    assert {m["source"] for m in metas} == {"openclaw-jsonl"}
    ids = [m.get("transcript_entry_id") for m in metas]
    assert len(set(ids)) == len(ids)
    con = sqlite3.connect(target)
    assert con.execute("INSERT INTO lcm_messages_fts(lcm_messages_fts) VALUES('integrity-check')") is not None
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    events = con.execute("SELECT tokens_before, tokens_after, msg_before FROM lcm_compaction_events").fetchall()
    total = sum(r["token_count"] for r in got)
    assert events == [(total, total, len(got))]


def test_reconciling_twice_imports_nothing_the_second_time(tmp_path):
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", SESSIONS / "tool-heavy.jsonl", "--dest", target)
    again = reconcile("--sessions", SESSIONS / "tool-heavy.jsonl", "--dest", target)
    assert again["messages"]["inserted"] == 0 and again["boundary_events"] == 0
    assert again["messages"]["already_present"] == ACTIVE_PATH["tool-heavy"]
    assert len(target_rows(target)) == ACTIVE_PATH["tool-heavy"]


def test_token_counts_and_identity_hashes_agree_with_lossless_claws_backfill(tmp_path):
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", SESSIONS / "channel-telegram.jsonl", "--dest", target)
    expected = json.loads((SESSIONS / "expected" / "channel-telegram.expected.json").read_text())
    want = [(m["role"], m["token_count"], m["identity_hash"]) for m in expected["db"]["messages"]]
    got = [(r["role"], r["token_count"], json.loads(r["metadata"])["identity_hash"]) for r in target_rows(target)]
    assert got == want


def test_image_data_stays_in_the_part_payload_not_in_content(tmp_path):
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", SESSIONS / "tool-heavy.jsonl", "--dest", target)
    con = sqlite3.connect(target)
    files = con.execute("SELECT m.content, p.payload FROM lcm_message_parts p JOIN lcm_messages m "
                        "ON m.id = p.message_id WHERE p.kind = 'file'").fetchall()
    assert files, "the tool result with an image has a file part"
    for content, payload in files:
        data = json.loads(payload)["data"]
        assert data.startswith("iVBORw0KGgo") and data not in content


@pytest.mark.parametrize("name", ["tool-heavy", "channel-telegram", "rewritten"])
@pytest.mark.parametrize("order", ["migrate-first", "reconcile-first"])
def test_migrate_and_reconcile_in_either_order_leave_each_message_once(tmp_path, name, order):
    pair = build_pair(name, tmp_path / "state")
    src, sessions = tmp_path / "state" / "lcm.db", tmp_path / "state" / "agents" / "main" / "sessions"
    target = tmp_path / "remnic" / "lcm.sqlite"
    steps = [lambda: migrate(src, target), lambda: reconcile("--sessions", sessions, "--src", src, "--dest", target)]
    if order == "reconcile-first":
        steps.reverse()
    for step in steps * 2:  # either order, more than once
        step()
    got = target_rows(target)
    assert len(got) == ACTIVE_PATH[name], [json.loads(r["metadata"]).get("transcript_entry_id") for r in got]
    assert [r["turn_index"] for r in got] == list(range(len(got)))
    # every database row is in the target once, and the transcript's tail came from the transcript
    sources = Counter(json.loads(r["metadata"])["source"] for r in got)
    assert sources["lossless-claw"] == pair["db_messages"]
    assert sources["openclaw-jsonl"] == ACTIVE_PATH[name] - pair["db_messages"]


def test_a_reconcile_with_the_database_imports_only_the_tail(tmp_path):
    pair = build_pair("tool-heavy", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    report = reconcile("--sessions", pair["transcript"], "--src", tmp_path / "state" / "lcm.db", "--dest", target)
    assert report["messages"]["inserted"] == ACTIVE_PATH["tool-heavy"] - pair["db_messages"]
    assert report["messages"]["already_present"] == pair["db_messages"]
    (f,) = report["extra"]["files"]
    assert f["matched_by_entry_id"] == pair["db_messages"] and f["imported"] == 12


def test_a_copy_on_write_rewrite_is_not_imported_twice(tmp_path):
    """lossless-claw's backfill inserts 2 duplicates here (expected/rewritten.crash-recovery.expected.json)."""
    build_pair("rewritten", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    report = reconcile("--sessions", tmp_path / "state" / "agents" / "main" / "sessions",
                       "--src", tmp_path / "state" / "lcm.db", "--dest", target)
    (f,) = report["extra"]["files"]
    assert f["matched_as_rewrite"] == 3
    assert f["abandoned_branch_entries"] == 4
    assert report["messages"]["inserted"] == 3


def test_the_branched_transcript_reports_its_abandoned_entries(tmp_path):
    report = reconcile("--sessions", SESSIONS / "branched.jsonl", "--dest", tmp_path / "t.sqlite")
    (f,) = report["extra"]["files"]
    assert f["messages_on_path"] == 4 and f["abandoned_branch_entries"] == 6


def test_the_5000_message_transcript_imports_whole_and_then_is_all_present(tmp_path):
    jsonl = tmp_path / "large.jsonl"
    jsonl.write_bytes(gzip.decompress((SESSIONS / "large-5k.jsonl.gz").read_bytes()))
    target = tmp_path / "t.sqlite"
    assert reconcile("--sessions", jsonl, "--dest", target)["messages"]["inserted"] == 5000
    again = reconcile("--sessions", jsonl, "--dest", target)
    assert again["messages"]["inserted"] == 0 and again["messages"]["already_present"] == 5000


def write(path: Path, lines: list) -> Path:
    path.write_text("".join((json.dumps(x) if not isinstance(x, str) else x) + "\n" for x in lines))
    return path


def small_transcript() -> list:
    return [{"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-06-01T00:00:00.000Z"},
            {"type": "message", "id": "a1", "parentId": None, "timestamp": "2026-06-01T00:00:01.000Z",
             "message": {"role": "user", "content": "hello there", "timestamp": 1780272001000}},
            {"type": "message", "id": "a2", "parentId": "a1", "timestamp": "2026-06-01T00:00:02.000Z",
             "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}],
                         "timestamp": 1780272002000}}]


def test_an_unparsable_line_is_skipped_and_reported_with_its_line_number(tmp_path):
    lines = small_transcript()
    lines.insert(2, '{"type":"message","id":"cut')
    f = write(tmp_path / "sess-1.jsonl", lines)
    report = reconcile("--sessions", f, "--dest", tmp_path / "t.sqlite")
    (info,) = report["extra"]["files"]
    assert [s["line"] for s in info["skipped_lines"]] == [3]
    assert report["messages"]["inserted"] == 2
    assert any(w.startswith(f"{f}:3: skipped line") for w in report["warnings"])


def test_strict_makes_an_unparsable_line_an_error_and_writes_nothing(tmp_path):
    lines = small_transcript()
    lines.append("not json at all")
    f = write(tmp_path / "sess-1.jsonl", lines)
    proc = run_cli("reconcile", "--sessions", f, "--dest", tmp_path / "t.sqlite", "--strict")
    assert proc.returncode == 2
    assert proc.stderr.startswith("lcm-etl: error: not a readable transcript: ")
    assert "line 4" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t.sqlite").exists()


def test_a_file_that_is_not_a_transcript_is_named_and_nothing_is_written(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    write(folder / "sess-1.jsonl", small_transcript())
    write(folder / "notes.jsonl", [{"hello": "world"}, {"a": 1}])
    proc = run_cli("reconcile", "--sessions", folder / "sess-1.jsonl", "--sessions", folder / "notes.jsonl",
                   "--dest", tmp_path / "t.sqlite")
    assert proc.returncode == 2
    assert "notes.jsonl" in proc.stderr and "nothing was written" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "t.sqlite").exists()


def test_a_missing_transcript_path_is_bad_input(tmp_path):
    proc = run_cli("reconcile", "--sessions", tmp_path / "nope.jsonl", "--dest", tmp_path / "t.sqlite")
    assert proc.returncode == 2
    assert proc.stderr.startswith("lcm-etl: error: transcript path not found: ")


def test_a_sessions_folder_skips_checkpoints_and_trajectories_and_reads_archives(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    write(folder / "sess-1.jsonl", small_transcript())
    for name in ("sess-1.checkpoint.0a1b.jsonl", "sess-1.trajectory.jsonl",
                 "sess-1.jsonl.reset.2026-08-01T08-25-10.924Z"):
        write(folder / name, small_transcript())
    (folder / "sessions.json").write_text(json.dumps({"agent:main:main": {"sessionId": "sess-1"}}))
    report = reconcile("--sessions", folder, "--dest", tmp_path / "t.sqlite")
    assert report["extra"]["transcripts_read"] == 2   # the live file and its reset archive
    skipped = {Path(s["file"]).name for s in report["extra"]["files_skipped"]}
    assert {"sess-1.checkpoint.0a1b.jsonl", "sess-1.trajectory.jsonl"} <= skipped
    # an archive is listed as one, and read: the same entries as the live file, held once
    assert [(a["archive"], a["reason"], a["imported"]) for a in report["extra"]["archives"]] == [
        ("sess-1.jsonl.reset.2026-08-01T08-25-10.924Z", "reset", True)]
    assert report["messages"]["inserted"] == 2 and report["messages"]["already_present"] == 0   # the archive's copies: held once


def test_key_by_session_key_takes_the_key_from_sessions_json(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    write(folder / "sess-1.jsonl", small_transcript())
    (folder / "sessions.json").write_text(json.dumps({"agent:main:main": {"sessionId": "sess-1"}}))
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", folder, "--dest", target, "--key-by", "session-key")
    assert {r["session_id"] for r in target_rows(target)} == {"agent:main:main"}


def test_a_dry_run_reports_what_the_real_run_does_and_creates_nothing(tmp_path):
    target = tmp_path / "out" / "t.sqlite"
    dry = reconcile("--sessions", SESSIONS / "compaction.jsonl", "--dest", target, "--dry-run")
    assert not (tmp_path / "out").exists()
    real = reconcile("--sessions", SESSIONS / "compaction.jsonl", "--dest", target)
    for kind in ("messages", "parts"):
        assert dry[kind]["inserted"] == real[kind]["inserted"]
    assert dry["boundary_events"] == real["boundary_events"] == 1
    before = folder_state(tmp_path / "out")
    again = reconcile("--sessions", SESSIONS / "compaction.jsonl", "--dest", target, "--dry-run")
    assert again["messages"]["inserted"] == 0
    assert folder_state(tmp_path / "out") == before


def test_an_unknown_session_filter_is_bad_input(tmp_path):
    proc = run_cli("reconcile", "--sessions", SESSIONS / "plain-chat.jsonl", "--dest", tmp_path / "t.sqlite",
                   "--session-filter", "nope")
    assert proc.returncode == 2
    assert proc.stderr.startswith("lcm-etl: error: unknown --session-filter 'nope'")


def test_transcripts_are_never_modified(tmp_path):
    f = tmp_path / "s" / "rewritten.jsonl"
    f.parent.mkdir()
    shutil.copyfile(SESSIONS / "rewritten.jsonl", f)
    before = folder_state(f.parent)
    reconcile("--sessions", f, "--dest", tmp_path / "t.sqlite")
    assert folder_state(f.parent) == before
