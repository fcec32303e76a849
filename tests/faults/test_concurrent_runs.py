"""Two migrations started at once on the same new target: one builds it, the other fails with one line.

A new target is built under a private name beside it (`.lcm.sqlite.lcm-etl-building`) from the start of
the run, and a run deletes a leftover of that name (a killed run's) before making its own. Two runs at once
must therefore never write into each other's file: the loser finds its building file replaced or the
target already linked, and says so; the winner's target is whole.
"""
from __future__ import annotations

import subprocess

import pytest

from faultlib import assert_sound, env_for, generate_source, one_error_line, read_content, run, LCM_ETL

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return generate_source(tmp_path_factory.mktemp("concurrent") / "lcm.db", messages=8000, sessions=12, seed=21)


@pytest.mark.parametrize("trial", range(3))
def test_two_runs_on_one_new_target_give_one_whole_target_and_one_clear_failure(source, tmp_path, trial):
    alone = tmp_path / "alone" / "lcm.sqlite"
    assert run("migrate", "--src", source, "--dest", alone, "-q", tmp=tmp_path / "t0").returncode == 0
    target = tmp_path / "shared" / "lcm.sqlite"
    procs = [subprocess.Popen([str(LCM_ETL), "migrate", "--src", str(source), "--dest", str(target), "-q"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=env_for(tmp_path / f"t{i + 1}")) for i in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0, results
    for code, stderr in results:
        if code:
            assert code == 1, stderr
            line = one_error_line(stderr)
            assert ("another run is building the same new target" in line
                    or "target appeared while it was being built" in line), line
    assert_sound(target)
    assert read_content(target) == read_content(alone)
    assert sorted(p.name for p in target.parent.iterdir()) == ["lcm.sqlite"] + (
        ["lcm.sqlite-shm", "lcm.sqlite-wal"] if (target.parent / "lcm.sqlite-wal").exists() else [])
