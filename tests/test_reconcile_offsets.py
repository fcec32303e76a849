"""A reconcile re-run reads each transcript from where the previous complete run stopped: appended
lines only, after the recorded prefix is proved unchanged by its SHA-256; a rewritten file is read whole."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import ROOT, run_cli, target_rows
from test_reconcile import reconcile

SESSIONS = ROOT / "fixtures" / "sessions"


def lines_of(name: str) -> list[bytes]:
    return (SESSIONS / f"{name}.jsonl").read_bytes().splitlines(keepends=True)


def v1_lines() -> list[bytes]:
    """A v1 transcript: a header and three messages, none with an entry id."""
    return [b'{"type":"session","id":"old","timestamp":"2025-01-01T00:00:00Z","cwd":"/"}\n'] + [
        json.dumps({"type": "message", "timestamp": "2025-01-01T00:00:0%dZ" % i,
                    "message": {"role": "user", "content": f"t{i}", "timestamp": 1735689600000 + i}}).encode() + b"\n"
        for i in range(3)]


def write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(lines))
    return path


def the_file(report: dict) -> dict:
    (f,) = report["extra"]["files"]
    return f


def recorded(target: Path) -> list[tuple]:
    con = sqlite3.connect(target)
    try:
        return con.execute("SELECT path, size, lines, messages FROM lcm_etl_transcript_files").fetchall()
    finally:
        con.close()


def held(target: Path) -> list[tuple]:
    """What the target holds of transcripts, by content: (role, content, entry id), in turn order."""
    return [(r["role"], r["content"], json.loads(r["metadata"]).get("transcript_entry_id")) for r in target_rows(target)]


def test_a_re_run_after_lines_were_appended_reads_only_the_new_lines(tmp_path):
    lines = lines_of("tool-heavy")
    jsonl = write(tmp_path / "s.jsonl", lines[:20])
    target = tmp_path / "t.sqlite"
    first = the_file(reconcile("--sessions", jsonl, "--dest", target))
    assert (first["read"], first["read_from_offset"], first["lines_read"]) == ("whole", 0, 20)
    assert recorded(target) == [(str(jsonl), len(b"".join(lines[:20])), 20, first["messages_on_path"])]
    write(jsonl, lines)
    again = reconcile("--sessions", jsonl, "--dest", target)
    f = the_file(again)
    assert (f["read"], f["read_from_offset"], f["lines_read"]) == ("appended", len(b"".join(lines[:20])), 8)
    assert again["messages"]["inserted"] == f["imported"] == 7   # lines 21-27 are messages, 28 a marker
    assert f["messages_on_path"] == 21 and again["extra"]["lines_read"] == 8
    once = tmp_path / "once.sqlite"
    reconcile("--sessions", SESSIONS / "tool-heavy.jsonl", "--dest", once)
    assert held(target) == held(once)


def test_a_re_run_of_an_unchanged_file_reads_no_line(tmp_path):
    jsonl = write(tmp_path / "s.jsonl", lines_of("tool-heavy"))
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", jsonl, "--dest", target)
    again = reconcile("--sessions", jsonl, "--dest", target)
    f = the_file(again)
    assert (f["read"], f["lines_read"], f["read_from_offset"]) == ("appended", 0, jsonl.stat().st_size)
    assert (again["messages"]["inserted"], again["boundary_events"]) == (0, 0)
    assert len(target_rows(target)) == 21


def test_a_file_rewritten_to_the_same_size_is_read_whole(tmp_path):
    lines = lines_of("plain-chat")
    jsonl = write(tmp_path / "s.jsonl", lines)
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", jsonl, "--dest", target)
    at = lines[7].index(b'"text":"') + len(b'"text":"')   # one letter of a reply, changed in place
    lines[7] = lines[7][:at] + (b"Z" if lines[7][at:at + 1] != b"Z" else b"Y") + lines[7][at + 1:]
    data = b"".join(lines)
    assert len(data) == jsonl.stat().st_size and data != jsonl.read_bytes()
    jsonl.write_bytes(data)
    f = the_file(reconcile("--sessions", jsonl, "--dest", target))
    assert (f["read"], f["read_from_offset"], f["lines_read"]) == ("whole", 0, 16)
    assert f["messages_on_path"] == 8 and f["already_present"] == 8   # entry ids still match
    assert the_file(reconcile("--sessions", jsonl, "--dest", target))["lines_read"] == 0   # recorded anew


def test_a_shortened_file_is_read_whole_and_nothing_is_lost(tmp_path):
    lines = lines_of("tool-heavy")
    jsonl = write(tmp_path / "s.jsonl", lines)
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", jsonl, "--dest", target)
    write(jsonl, lines[:12])   # removeTrailingEntries
    report = reconcile("--sessions", jsonl, "--dest", target)
    f = the_file(report)
    assert (f["read"], f["lines_read"]) == ("whole", 12)
    assert report["messages"]["inserted"] == 0 and len(target_rows(target)) == 21   # the target is the archive
    assert recorded(target)[0][1:3] == (len(b"".join(lines[:12])), 12)


def test_a_branch_appended_after_the_recorded_offset_makes_the_file_read_whole(tmp_path):
    lines = lines_of("branched")
    jsonl = write(tmp_path / "s.jsonl", lines[:10])
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", jsonl, "--dest", target)
    write(jsonl, lines)   # line 11 goes back to the first reply: a branch, not an append
    f = the_file(reconcile("--sessions", jsonl, "--dest", target))
    assert (f["read"], f["lines_read"]) == ("whole", 15)
    once = tmp_path / "once.sqlite"
    reconcile("--sessions", SESSIONS / "branched.jsonl", "--dest", once)
    assert {e for _, _, e in held(once)} <= {e for _, _, e in held(target)}   # the final path is all there


def test_a_dry_run_reads_from_the_offset_but_records_nothing(tmp_path):
    lines = lines_of("tool-heavy")
    jsonl = write(tmp_path / "s.jsonl", lines[:20])
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", jsonl, "--dest", target)
    before = recorded(target)
    write(jsonl, lines)
    dry = reconcile("--sessions", jsonl, "--dest", target, "--dry-run")
    assert (the_file(dry)["read"], the_file(dry)["lines_read"], dry["messages"]["inserted"]) == ("appended", 8, 7)
    assert recorded(target) == before
    assert the_file(reconcile("--sessions", jsonl, "--dest", target))["lines_read"] == 8


def test_after_an_undo_of_the_recording_run_the_file_is_read_whole_again(tmp_path):
    jsonl = write(tmp_path / "s.jsonl", lines_of("tool-heavy"))
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", jsonl, "--dest", target)
    second = reconcile("--sessions", jsonl, "--dest", target)
    assert run_cli("undo", second["run_id"], "--dest", target, "-q").returncode == 0
    f = the_file(reconcile("--sessions", jsonl, "--dest", target))
    assert (f["read"], f["lines_read"]) == ("whole", 28)
    assert len(target_rows(target)) == 21


def test_a_transcript_reconciled_as_it_grows_line_by_line_ends_as_one_reconcile_of_the_whole_file(tmp_path):
    """channel-telegram repeats messages (delivery mirrors, heartbeat turns): appended messages are matched by
    entry id only, never taken for an earlier one with the same identity."""
    lines = lines_of("channel-telegram")
    jsonl = tmp_path / "s.jsonl"
    target = tmp_path / "t.sqlite"
    reads = []
    for cut in (8, 11, 14, 17, 20, len(lines)):
        write(jsonl, lines[:cut])
        reads.append(the_file(reconcile("--sessions", jsonl, "--dest", target))["read"])
    assert reads == ["whole"] + ["appended"] * 5
    once = tmp_path / "once.sqlite"
    reconcile("--sessions", SESSIONS / "channel-telegram.jsonl", "--dest", once)
    assert held(target) == held(once)
