"""Paths holding what a SQLite URI reads as syntax (`#`, `?`, `%`, a space): every file is opened through its
as_uri() (lcm_etl/sqlite_runtime.py), so `a#b/lcm.db` is that file, not `a`, and `p%20c` is not `p c`. Each command
runs from an empty working folder, which must stay empty."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import LCM_ETL, ROOT, copy_fixture, fixture_rows
from storelib import expected, state_copy
from test_reconcile import build_pair

FOLDERS = ["a#b", "q?x", "p%20c", "s p"]


def cli(cwd: Path, *args) -> dict:
    proc = subprocess.run([str(LCM_ETL), *map(str, args), "--json"], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    return json.loads(proc.stdout)


@pytest.fixture
def cwd(tmp_path):
    """An empty working folder: a path read as a URI would create its stray file here (`a` for `a#b/...`)."""
    folder = tmp_path / "cwd"
    folder.mkdir()
    yield folder
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("name", FOLDERS)
def test_migrate_and_its_re_run_read_and_write_a_folder_named_with_uri_syntax(tmp_path, cwd, name):
    src = copy_fixture("basic-0.15.3.db", tmp_path / name / "src")
    dest = tmp_path / name / "out" / "lcm.sqlite"
    messages = fixture_rows("basic-0.15.3.db")
    first = cli(cwd, "migrate", "--src", src, "--dest", dest)
    assert (first["messages"]["inserted"], first["messages"]["already_present"]) == (messages, 0)
    again = cli(cwd, "migrate", "--src", src, "--dest", dest)
    assert (again["messages"]["inserted"], again["messages"]["already_present"]) == (0, messages)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["cwd", name])


@pytest.mark.parametrize("name", FOLDERS)
def test_reconcile_and_its_re_run_read_src_sessions_and_dest_in_folders_named_with_uri_syntax(tmp_path, cwd, name):
    pair = build_pair("tool-heavy", tmp_path / name / "state")
    sessions, src = Path(pair["transcript"]).parent, tmp_path / name / "state" / "lcm.db"
    dest = tmp_path / name / "out" / "lcm.sqlite"
    on_path = len(json.loads((ROOT / "fixtures" / "sessions" / "expected" /
                              "tool-heavy.crash-recovery.expected.json").read_text())["step2_db"]["messages"])
    first = cli(cwd, "reconcile", "--src", src, "--sessions", sessions, "--dest", dest)
    assert (first["messages"]["inserted"], first["messages"]["already_present"]) == (on_path - pair["db_messages"],
                                                                                     pair["db_messages"])
    again = cli(cwd, "reconcile", "--src", src, "--sessions", sessions, "--dest", dest)
    assert (again["messages"]["inserted"], again["messages"]["already_present"]) == (0, on_path)
    assert again["extra"]["files"][0]["read"] == "appended"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["cwd", name])


@pytest.mark.parametrize("name", FOLDERS)
def test_reconcile_and_its_re_run_read_an_openclaw_store_in_a_folder_named_with_uri_syntax(tmp_path, cwd, name):
    state = state_copy("native", tmp_path / name / "state")
    dest = tmp_path / name / "out" / "lcm.sqlite"
    active = sum(len(e["activePath"]) for e in expected("native", source=None))
    first = cli(cwd, "reconcile", "--sessions", state, "--dest", dest)
    assert first["messages"]["inserted"] == active
    again = cli(cwd, "reconcile", "--sessions", state, "--dest", dest)
    held = first["messages"]["inserted"] + first["messages"]["already_present"]
    assert (again["messages"]["inserted"], again["messages"]["already_present"]) == (0, held)
