"""Transcripts with nothing to type the plan's columns by (issue 12, defect 1).

An empty file, a header-only file, an empty sessions folder and a folder of v1 files (no entry ids, so
every entry_id is NULL) leave some Arrow columns without a single value. Their types must still be the
declared ones: each of these is a successful run, for `reconcile` and for `audit --sessions`.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import empty_target, run_cli

HEADER = {"type": "session", "version": 3, "id": "hdr-only", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/w"}
V1 = [{"type": "session", "id": "old-1", "timestamp": "2025-01-01T00:00:00Z", "cwd": "/"},
      {"type": "message", "timestamp": "2025-01-01T00:00:01Z",
       "message": {"role": "user", "content": "hi", "timestamp": 1735689601000}},
      {"type": "message", "timestamp": "2025-01-01T00:00:02Z",
       "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}], "timestamp": 1735689602000}}]


def _lines(path: Path, entries: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def make_input(kind: str, base: Path) -> tuple[Path, int]:
    """(the --sessions path, how many messages it holds on its active paths)."""
    if kind == "an empty file":
        return _lines(base / "empty.jsonl", []), 0
    if kind == "a header-only file":
        return _lines(base / "hdr-only.jsonl", [HEADER]), 0
    if kind == "an empty sessions folder":
        folder = base / "agents" / "main" / "sessions"
        folder.mkdir(parents=True)
        return folder, 0
    if kind == "a folder of only v1 files":
        folder = base / "v1"
        _lines(folder / "old-1.jsonl", V1)
        _lines(folder / "old-2.jsonl", [{**V1[0], "id": "old-2"}, *V1[1:]])
        return folder, 4
    raise AssertionError(kind)


KINDS = ["an empty file", "a header-only file", "an empty sessions folder", "a folder of only v1 files"]


@pytest.mark.parametrize("kind", KINDS)
def test_reconcile_of_a_transcript_input_without_typed_values_succeeds(tmp_path, kind):
    sessions, held = make_input(kind, tmp_path / "in")
    target = tmp_path / "t.sqlite"
    proc = run_cli("reconcile", "--sessions", sessions, "--dest", target, "--json")
    assert (proc.returncode, proc.stderr) == (0, "")
    report = json.loads(proc.stdout)
    assert report["messages"]["inserted"] == held
    again = run_cli("reconcile", "--sessions", sessions, "--dest", target, "--json")
    assert (again.returncode, again.stderr) == (0, "")
    assert json.loads(again.stdout)["messages"]["inserted"] == 0


@pytest.mark.parametrize("kind", KINDS)
def test_audit_of_a_transcript_input_without_typed_values_succeeds(tmp_path, kind, monkeypatch):
    # audit --sessions without --src reads $OPENCLAW_STATE_DIR/lcm.db (else ~/.openclaw/lcm.db) when it exists:
    # point it at an empty folder, so a real OpenClaw state on the machine is never read
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("OPENCLAW_STATE_DIR", str(state))
    sessions, held = make_input(kind, tmp_path / "in")
    target = empty_target(tmp_path / "t.sqlite")
    proc = run_cli("audit", "--sessions", sessions, "--dest", target, "--json")
    assert (proc.returncode, proc.stderr) == (3 if held else 0, "")
    report = json.loads(proc.stdout)
    assert report["extra"]["transcript_messages_pending"] == held
    assert report["extra"]["lcm_db_not_found"] == str(state / "lcm.db")
    assert run_cli("reconcile", "--sessions", sessions, "--dest", target, "-q").returncode == 0
    proc = run_cli("audit", "--sessions", sessions, "--dest", target, "--json")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert json.loads(proc.stdout)["extra"]["transcript_messages_pending"] == 0
