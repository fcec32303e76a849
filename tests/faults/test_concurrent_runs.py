"""Two runs on one target at once (a cron run overlapping a manual one, issue 12 defect 2).

A writing run holds the target's run lock (`.lcm.sqlite.lcm-etl-lock`, lcm_etl/store/runlock.py) from before it
decides whether the target exists until the target is written. A second run waits for it (--lock-timeout),
then finds the first run's target and adds nothing: both exit 0 and the target is exactly one run's.
Each race starts the second run at a different point of the first: at once, once it holds the lock, once
it is building, once its target is linked, and at seeded random instants.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from faultlib import (HERE, LCM_ETL, PATIENCE_S, ROOT, assert_sound, connect, env_for, generate_source,
                      one_error_line, read_content, run, wait_until)

pytestmark = pytest.mark.slow

PATIENT = ("--lock-timeout", "600")   # the later run waits for the first however loaded the machine is
SEED = int(os.environ.get("FAULT_SEED", random.SystemRandom().randrange(1 << 30)))


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return generate_source(tmp_path_factory.mktemp("concurrent") / "lcm.db", messages=8000, sessions=12, seed=21)


@pytest.fixture(scope="module")
def alone(source, tmp_path_factory):
    """What one run alone makes of the source, and how long it took (to spread the random starts over)."""
    base = tmp_path_factory.mktemp("alone")
    t0 = time.monotonic()
    proc = run("migrate", "--src", source, "--dest", base / "lcm.sqlite", "--json", tmp=base / "tmp")
    assert proc.returncode == 0, proc.stderr
    return read_content(base / "lcm.sqlite"), json.loads(proc.stdout), time.monotonic() - t0


def migrate(source, target, tmp) -> subprocess.Popen:
    return subprocess.Popen([str(LCM_ETL), "migrate", "--src", str(source), "--dest", str(target), "--json",
                             *PATIENT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(tmp))


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=PATIENCE_S)
    return proc.returncode, out, err


def listing(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


STARTS = ("together", "holds the lock", "is building", "has linked the target", "random", "random", "random")


@pytest.mark.parametrize("trial", range(len(STARTS)))
def test_two_runs_racing_on_one_new_target_both_succeed_and_the_later_one_adds_nothing(source, alone, tmp_path,
                                                                                         trial):
    content, report, duration = alone
    target = tmp_path / "shared" / "lcm.sqlite"
    start = STARTS[trial]
    first = migrate(source, target, tmp_path / "t1")
    if start == "holds the lock":
        wait_until(lambda: target.with_name(".lcm.sqlite.lcm-etl-lock").exists(), "the lock", first)
    elif start == "is building":
        wait_until(lambda: target.with_name(".lcm.sqlite.lcm-etl-building").exists(), "the building file", first)
    elif start == "has linked the target":
        wait_until(target.exists, "the target", first)
    elif start == "random":
        delay = random.Random(f"{SEED}-{trial}").uniform(0, duration)
        start = f"random, {delay:.3f} s after the first (seed {SEED})"
        try:
            first.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            pass
    second = migrate(source, target, tmp_path / "t2")
    results = [finish(first), finish(second)]

    assert [code for code, _, _ in results] == [0, 0], (start, [err for _, _, err in results])
    assert all(err == "" for _, _, err in results), (start, results)
    assert_sound(target)
    assert read_content(target) == content, start
    inserted = sorted((r["messages"]["inserted"], r["parts"]["inserted"], r["summaries"]["inserted"])
                      for r in (json.loads(out) for _, out, _ in results))
    whole = (report["messages"]["inserted"], report["parts"]["inserted"], report["summaries"]["inserted"])
    assert inserted == [(0, 0, 0), whole], start
    con = connect(target)
    try:
        assert con.execute("SELECT count(*) FROM lcm_etl_runs").fetchone()[0] == 2
    finally:
        con.close()
    assert listing(target.parent) in (["lcm.sqlite"], ["lcm.sqlite", "lcm.sqlite-shm", "lcm.sqlite-wal"]), start


class RunLockHolder:
    """Another lcm-etl run, as far as the run lock goes: holds it until released or killed."""

    def __init__(self, target):
        self.proc = subprocess.Popen([sys.executable, str(HERE / "actors.py"), "run-lock-holder",
                                      str(target.with_name(f".{target.name}.lcm-etl-lock"))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=PATIENCE_S) == 0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=PATIENCE_S)
        self.proc.stdin.close()


def test_a_run_that_cannot_get_the_run_lock_in_time_fails_with_one_line_naming_the_target_and_writes_nothing(
        source, tmp_path):
    target = tmp_path / "remnic" / "lcm.sqlite"
    target.parent.mkdir()
    holder = RunLockHolder(target)
    try:
        proc = run("migrate", "--src", source, "--dest", target, "--lock-timeout", "1", tmp=tmp_path / "tmp")
    finally:
        holder.release()
    assert proc.returncode == 1, proc.stderr
    assert one_error_line(proc.stderr) == (
        f"lcm-etl: error: another lcm-etl run holds the target: {target} (waited 1 s for it to finish; re-run "
        "later or raise --lock-timeout); nothing was written")
    assert proc.stdout == ""
    assert listing(target.parent) == [".lcm.sqlite.lcm-etl-lock"]   # the holder's own


def test_reconcile_waits_for_the_run_lock_too(tmp_path):
    target = tmp_path / "remnic" / "lcm.sqlite"
    target.parent.mkdir()
    holder = RunLockHolder(target)
    try:
        proc = run("reconcile", "--sessions", ROOT / "fixtures" / "sessions" / "plain-chat.jsonl", "--dest", target,
                   "--lock-timeout", "1", tmp=tmp_path / "tmp")
    finally:
        holder.release()
    assert proc.returncode == 1, proc.stderr
    assert "another lcm-etl run holds the target" in one_error_line(proc.stderr)
    assert listing(target.parent) == [".lcm.sqlite.lcm-etl-lock"]


def test_a_dry_run_neither_waits_for_the_run_lock_nor_creates_it(source, tmp_path):
    target = tmp_path / "remnic" / "lcm.sqlite"
    target.parent.mkdir()
    holder = RunLockHolder(target)
    try:
        proc = run("migrate", "--src", source, "--dest", target, "--dry-run", "--lock-timeout", "1",
                   tmp=tmp_path / "tmp")
    finally:
        holder.release()
    assert proc.returncode == 0, proc.stderr
    alone = tmp_path / "new" / "lcm.sqlite"
    proc = run("migrate", "--src", source, "--dest", alone, "--dry-run", tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert not alone.parent.exists()


def test_a_run_lock_left_by_a_killed_run_does_not_hold_up_the_next_run(source, alone, tmp_path):
    target = tmp_path / "remnic" / "lcm.sqlite"
    target.parent.mkdir()
    holder = RunLockHolder(target)
    holder.kill()
    assert listing(target.parent) == [".lcm.sqlite.lcm-etl-lock"]   # the file stays; its lock died with it
    proc = run("migrate", "--src", source, "--dest", target, "--lock-timeout", "1", tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert read_content(target) == alone[0]
    assert ".lcm.sqlite.lcm-etl-lock" not in listing(target.parent)


def test_a_failed_first_run_leaves_neither_a_lock_file_nor_the_folders_it_made(tmp_path):
    src = tmp_path / "bad.db"
    src.write_bytes((ROOT / "fixtures" / "lossless-claw").joinpath("multiparent-newest.db").read_bytes()[:100]
                    + b"\0" * 8192)
    target = tmp_path / "new" / "deeper" / "lcm.sqlite"
    proc = run("migrate", "--src", src, "--dest", target, tmp=tmp_path / "tmp")
    assert proc.returncode == 2, proc.stderr
    one_error_line(proc.stderr)
    assert not (tmp_path / "new").exists()
