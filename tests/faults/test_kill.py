"""SIGKILL `lcm-etl migrate` at random instants (docs/design.md, "Atomicity": atomic per session).

A generated source of a few thousand messages is migrated with a small --batch-rows, so that some
sessions fit in one batch and others are cut into chunks. Each trial kills a run at a random instant
between 0.1 s and the length of an uninterrupted run (one instant per equal slice of that window, so the
planning phase and the writing phase are both hit), checks what the kill left behind against the
uninterrupted run, then re-runs and requires the uninterrupted run's content exactly.

Reproduce a failing trial with FAULT_SEED=<seed printed in the failure>.
"""
from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path

import pytest

from faultlib import (PATIENCE_S, check_cut, file_copy, interrupt_checkpoint, copy_db, generate_source, kill_after,
                      leftovers, make_existing_target, read_content, run, source_weights, spawn, summary_line,
                      timed_run, wait_for_data)

pytestmark = pytest.mark.slow

BATCH_ROWS = 500
EXISTING_TRIALS = 20
FRESH_TRIALS = 12
SEED = int(os.environ.get("FAULT_SEED", random.SystemRandom().randrange(1 << 30)))

OUTCOMES: dict[str, list] = {"existing": [], "fresh": []}


class World:
    """One source, the target it starts from, and what an uninterrupted run makes of it."""

    def __init__(self, base):
        self.base = base
        self.src = generate_source(base / "src" / "lcm.db", messages=4000, sessions=24, seed=7)
        weights = source_weights(self.src)
        self.chunked = {s for s, w in weights.items() if w > BATCH_ROWS}
        assert self.chunked and set(weights) - self.chunked, "the source must mix whole and chunked sessions"
        self.initial = make_existing_target(base / "initial" / "lcm.sqlite")
        self.args = ("--batch-rows", BATCH_ROWS, "-q")

        # timed twice (the shorter counts: a moment of load elsewhere must not stretch the kill window)
        timings = []
        for i in range(2):
            existing = copy_db(self.initial, base / f"full-existing-{i}" / "lcm.sqlite")
            timings.append(timed_run("migrate", "--src", self.src, "--dest", existing, *self.args, tmp=base / "tmp",
                                     watch=existing.with_name("lcm.sqlite-wal")))
        self.existing_duration, self.existing_writes = min(timings)
        self.full_existing = read_content(existing)

        timings = []
        for i in range(2):
            fresh = base / f"full-fresh-{i}" / "lcm.sqlite"
            timings.append(timed_run("migrate", "--src", self.src, "--dest", fresh, *self.args, tmp=base / "tmp",
                                     watch=fresh.with_name(".lcm.sqlite.lcm-etl-building")))
        self.fresh_duration, self.fresh_writes = min(timings)
        self.fresh_target = fresh
        self.full_fresh = read_content(fresh)
        assert self.full_fresh.messages == {k: v for k, v in self.full_existing.messages.items()
                                            if k != "agent:main:main"}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return World(tmp_path_factory.mktemp("kill"))


def instant(kind: str, trial: int, trials: int, duration: float, writes_from: float) -> tuple[float, bool]:
    """(delay, anchored): a random instant in the trial's own slice of a window. The first half of the
    trials share [0.1 s, duration] from the start of the run; the second half share the writing phase,
    measured from the moment this very run begins writing (so load on the machine cannot move them)."""
    rng = random.Random(f"{SEED}-{kind}-{trial}")
    half = trials // 2
    if trial < half:
        width = (max(duration, 0.2) - 0.1) / half
        return 0.1 + width * (trial + rng.random()), False
    width = max(duration - writes_from, 0.05) / (trials - half)
    return width * (trial - half + rng.random()), True


def kill_a_run(world, target: Path, tmp_path: Path, kind: str, trial: int, trials: int, duration: float,
               writes_from: float, written: Path) -> tuple[bool, bool, str]:
    """Start migrate and SIGKILL it at this trial's instant (counted from when `written` first holds data,
    for trials anchored in the writing phase). Returns (killed, anchored, a context line for messages)."""
    delay, anchored = instant(kind, trial, trials, duration, writes_from)
    proc = spawn("migrate", "--src", world.src, "--dest", target, *world.args, tmp=tmp_path / "tmp")
    if anchored:
        wait_for_data(proc, written)
    killed = kill_after(proc, time.monotonic(), delay)
    ctx = (f"seed {SEED}, trial {trial}, kill {delay:.3f}s after {'writing began' if anchored else 'start'} "
           f"(uninterrupted: {duration:.2f}s, writing from {writes_from:.2f}s)")
    return killed, anchored, ctx


@pytest.mark.parametrize("trial", range(EXISTING_TRIALS))
def test_a_run_killed_while_appending_to_an_existing_target_leaves_clean_sessions_and_a_rerun_completes_it(
        world, tmp_path, trial):
    target = copy_db(world.initial, tmp_path / "t" / "lcm.sqlite")
    killed, anchored, ctx = kill_a_run(world, target, tmp_path, "existing", trial, EXISTING_TRIALS,
                                       world.existing_duration, world.existing_writes,
                                       target.with_name("lcm.sqlite-wal"))

    states = check_cut(target, world.full_existing, world.chunked, scratch=tmp_path / "inspect")
    OUTCOMES["existing"].append({"killed": killed, "anchored": anchored, "states": states})
    print(ctx, "killed" if killed else "finished first", summary_line(states))

    proc = run("migrate", "--src", world.src, "--dest", target, *world.args, tmp=tmp_path / "tmp")
    assert proc.returncode == 0, f"{ctx}: {proc.stderr}"
    after = read_content(target)
    assert after == world.full_existing, f"{ctx}: {after.diff(world.full_existing)}"
    check_cut(target, world.full_existing, set())


@pytest.mark.parametrize("trial", range(FRESH_TRIALS))
def test_a_run_killed_while_building_a_new_target_leaves_no_target_or_a_complete_one(world, tmp_path, trial):
    target = tmp_path / "t" / "lcm.sqlite"
    killed, anchored, ctx = kill_a_run(world, target, tmp_path, "fresh", trial, FRESH_TRIALS, world.fresh_duration,
                                       world.fresh_writes, target.with_name(".lcm.sqlite.lcm-etl-building"))

    existed = target.exists()
    if existed:
        check_cut(target, world.full_fresh, set(), scratch=tmp_path / "inspect")
    OUTCOMES["fresh"].append({"killed": killed, "target": existed,
                              "leftover": bool(target.parent.exists() and leftovers(target.parent))})
    print(ctx, "killed" if killed else "finished first", "target" if existed else "no target",
          leftovers(target.parent) if target.parent.exists() else [])

    proc = run("migrate", "--src", world.src, "--dest", target, *world.args, tmp=tmp_path / "tmp")
    assert proc.returncode == 0, f"{ctx}: {proc.stderr}"
    assert read_content(target) == world.full_fresh, ctx
    check_cut(target, world.full_fresh, set())
    if not existed:
        assert leftovers(target.parent) == [], ctx


def test_the_kill_trials_hit_both_the_planning_and_the_writing_phase(world):
    """Guards the trials above against becoming vacuous (e.g. a run so fast every kill lands too late)."""
    existing = OUTCOMES["existing"]
    if len(existing) < EXISTING_TRIALS:
        pytest.skip("run together with the existing-target kill trials")
    assert any(o["killed"] and o["anchored"] for o in existing), "no kill landed in the writing phase"
    assert any("prefix" in o["states"].values() for o in existing), "no kill cut a chunked session"
    fresh = OUTCOMES["fresh"]
    if len(fresh) == FRESH_TRIALS:
        assert any(o["killed"] and not o["target"] for o in fresh)
        assert any(o["leftover"] for o in fresh), "no kill left a half-built file behind"


def _leftover_files(world, folder):
    """What a run killed in the middle of building leaves: a half-written building file, and (killed while
    switching it to WAL) a -wal/-shm pair, here taken from another live WAL database."""
    folder.mkdir(parents=True, exist_ok=True)
    fresh = world.fresh_target
    building = folder / ".lcm.sqlite.lcm-etl-building"
    data = fresh.read_bytes()
    building.write_bytes(data[: len(data) // 2])
    import sqlite3

    other = folder.parent / "other.db"
    shutil.copyfile(fresh, other)
    con = sqlite3.connect(other)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("DELETE FROM lcm_messages WHERE turn_index % 2 = 0")
    con.commit()
    shutil.copyfile(str(other) + "-wal", str(building) + "-wal")
    shutil.copyfile(str(other) + "-shm", str(building) + "-shm")
    con.close()
    return building


def test_a_half_built_file_left_by_a_killed_run_does_not_break_the_next_run(world, tmp_path):
    target = tmp_path / "t" / "lcm.sqlite"
    _leftover_files(world, target.parent)
    proc = run("migrate", "--src", world.src, "--dest", target, *world.args, tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert read_content(target) == world.full_fresh
    check_cut(target, world.full_fresh, set())
    assert leftovers(target.parent) == []


def test_a_target_whose_checkpoint_was_interrupted_is_completed_by_the_next_run(world, tmp_path):
    import sqlite3

    # a target holding the first sessions, committed to its WAL by lcm-etl's own writer, then stopped
    # mid-checkpoint: the run is killed right after a batch, exactly when SQLite would checkpoint
    target = copy_db(world.initial, tmp_path / "t" / "lcm.sqlite")
    live = sqlite3.connect(target)
    live.execute("PRAGMA wal_autocheckpoint=0")
    live.execute("SELECT count(*) FROM lcm_messages").fetchone()    # hold the WAL open across the run
    proc = run("migrate", "--src", world.src, "--dest", target, *world.args, "--session-filter",
               sorted(world.full_fresh.messages)[0], tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    left = file_copy(target, tmp_path / "left")
    live.close()
    interrupt_checkpoint(left)
    check_cut(left, world.full_existing, world.chunked, scratch=tmp_path / "inspect")   # sound, a clean cut

    proc = run("migrate", "--src", world.src, "--dest", left, *world.args, tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert read_content(left) == world.full_existing


def test_the_kill_soak_script_runs_its_trials_and_reports_them(tmp_path):
    # bench/soak_kill.py is the long form of this file; a short run keeps it from drifting from faultlib
    import subprocess
    import sys

    soak = Path(__file__).resolve().parents[2] / "bench" / "soak_kill.py"
    proc = subprocess.run([sys.executable, str(soak), "--trials", "4", "--messages", "800", "--sessions", "6",
                           "--fresh-share", "0.5", "--seed", "7", "--keep", str(tmp_path / "soak")],
                          capture_output=True, text=True, timeout=3 * PATIENCE_S)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "soak: 4 trials" in proc.stdout and "0 failed" in proc.stdout


def test_the_copy_and_run_folder_of_a_first_run_killed_while_reading_are_removed_by_the_next_run(world, tmp_path):
    """kill -9 while the source is copied into the cache: the unsealed copy (the source's size) and the run's
    temporary folder stay behind; the next run, of another pair, removes both (lcm_etl/read/snapshot/cache_bounds.py)."""
    import subprocess

    from faultlib import LCM_ETL, env_for, wait_until

    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    env = env_for(tmp, LCM_ETL_CACHE_DIR=str(cache))
    proc = subprocess.Popen([str(LCM_ETL), "migrate", "--src", str(world.src), "--dest", str(tmp_path / "a.sqlite"),
                             "-q"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    copies = lambda: [p for p in cache.glob("*/snapshot.db")]   # noqa: E731
    assert wait_until(lambda: copies() and list(tmp.glob("lcm-etl-run-*")), "the copy under way", proc), \
        "the run ended before it was seen copying"
    proc.kill()
    proc.wait()
    left = copies()[0].parent
    assert left.is_dir() and list(tmp.glob("lcm-etl-run-*"))
    other = subprocess.run([str(LCM_ETL), "migrate", "--src", str(world.src), "--dest", str(tmp_path / "b.sqlite"),
                            "-q"], env=env, capture_output=True, text=True, timeout=PATIENCE_S)
    assert other.returncode == 0 and other.stderr == "", other.stderr
    assert not left.exists() and list(tmp.iterdir()) == []
    assert len(copies()) == 1 and (copies()[0].parent / "seal.json").exists()   # the other pair's, sealed
