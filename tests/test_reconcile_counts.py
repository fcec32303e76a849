"""reconcile's report: the parts of messages already held are counted as already present, in text and --json, whether
the transcript is read whole or from its record (the parts before the offset are the record's)."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import run_cli
from test_reconcile import build_pair, reconcile


def test_a_re_run_read_whole_counts_the_parts_of_the_messages_already_held(tmp_path):
    pair = build_pair("tool-heavy", tmp_path / "state")
    sessions = Path(pair["transcript"]).parent
    target = tmp_path / "t.sqlite"
    first = reconcile("--sessions", sessions, "--dest", target)
    assert first["parts"]["inserted"] > 0
    # another --src: the transcript is read whole again, and everything in it is held
    proc = run_cli("reconcile", "--sessions", sessions, "--dest", target, "--src", tmp_path / "state" / "lcm.db")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^  sync:\s+offsets: 0 of 1 transcripts read from where the last run stopped; 1 read whole: 1 "
                     "recorded under another --key-by or --src$", proc.stdout, re.M)
    assert re.search(rf"^  parts\s+inserted\s+0\s+already present\s+{first['parts']['inserted']}\s", proc.stdout, re.M)
    again = reconcile("--sessions", sessions, "--dest", target)   # and back: whole again
    assert again["extra"]["files"][0]["read"] == "whole"
    assert again["messages"]["already_present"] == first["messages"]["inserted"]
    assert (again["parts"]["inserted"], again["parts"]["already_present"]) == (0, first["parts"]["inserted"])


def test_a_re_run_read_from_its_records_counts_the_parts_before_the_offset_as_already_present(tmp_path):
    pair = build_pair("tool-heavy", tmp_path / "state")
    sessions = Path(pair["transcript"]).parent
    target = tmp_path / "t.sqlite"
    first = reconcile("--sessions", sessions, "--dest", target)
    proc = run_cli("reconcile", "--sessions", sessions, "--dest", target)   # nothing new: from the record
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^  sync:\s+offsets: 1 of 1 transcripts read from where the last run stopped", proc.stdout, re.M)
    assert re.search(rf"^  parts\s+inserted\s+0\s+already present\s+{first['parts']['inserted']}\s", proc.stdout, re.M)
    again = reconcile("--sessions", sessions, "--dest", target)
    assert again["extra"]["files"][0]["read"] == "appended"
    assert (again["parts"]["inserted"], again["parts"]["already_present"]) == (0, first["parts"]["inserted"])
