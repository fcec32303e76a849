"""A target another process is writing to (a locked target waits, then fails clearly; a live
Remnic with busy_timeout 5 s is never starved)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from faultlib import (HERE, NATIVE_SESSION, PATIENCE_S, assert_sound, connect, generate_source,
                      make_existing_target, one_error_line, read_content, run, wait_until)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_source(tmp_path_factory):
    return generate_source(tmp_path_factory.mktemp("locked") / "lcm.db", messages=1500, seed=5)


def hold_lock(target, seconds: float | str) -> subprocess.Popen:
    """Another writer holding the target's write lock for `seconds`, or until `release(proc)`."""
    proc = subprocess.Popen([sys.executable, str(HERE / "actors.py"), "lock-holder", str(target), str(seconds)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def release(holder: subprocess.Popen) -> None:
    holder.stdin.close()
    assert holder.wait(timeout=PATIENCE_S) == 0


def dump(target) -> list:
    con = connect(target)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return [(n, sorted((tuple(r) for r in con.execute(f'SELECT * FROM "{n}"')), key=repr)) for n in names]
    finally:
        con.close()


def test_a_target_locked_for_three_seconds_is_waited_for_and_the_run_succeeds(small_source, tmp_path):
    target = make_existing_target(tmp_path / "remnic" / "lcm.sqlite")
    holder = hold_lock(target, 3)
    try:   # a lock timeout far above the three seconds: the run must wait, however loaded the machine
        proc = run("migrate", "--src", small_source, "--dest", target, "--lock-timeout", 120, "--json",
                   tmp=tmp_path / "tmp")
    finally:
        release(holder)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["messages"]["inserted"] == 1500
    assert_sound(target)


def test_a_target_locked_longer_than_the_lock_timeout_fails_with_one_line_and_nothing_written(small_source, tmp_path):
    target = make_existing_target(tmp_path / "remnic" / "lcm.sqlite")
    before = dump(target)
    holder = hold_lock(target, "released")   # held until the run has ended, however long it takes to get there
    try:
        proc = run("migrate", "--src", small_source, "--dest", target, "--lock-timeout", 1, tmp=tmp_path / "tmp")
    finally:
        release(holder)
    assert proc.returncode == 1, proc.stderr
    assert "locked" in one_error_line(proc.stderr)
    assert proc.stdout == ""
    assert dump(target) == before
    assert_sound(target)


def native_rows(target) -> int:
    con = connect(target)
    try:
        return con.execute("SELECT count(*) FROM lcm_messages WHERE session_id = ?", (NATIVE_SESSION,)).fetchone()[0]
    finally:
        con.close()


def test_a_live_remnic_writing_during_a_long_migration_never_waits_past_its_busy_timeout(tmp_path):
    src = generate_source(tmp_path / "openclaw" / "lcm.db", messages=24_000, seed=11)
    target = make_existing_target(tmp_path / "remnic" / "lcm.sqlite")
    stop, out = tmp_path / "stop-remnic", tmp_path / "remnic.json"
    remnic = subprocess.Popen([sys.executable, str(HERE / "actors.py"), "remnic-writer", str(target), str(stop),
                               str(out)], stdout=subprocess.PIPE, text=True)
    assert remnic.stdout.readline().strip() == "ready"
    try:
        # Remnic is writing before the run starts and goes on after it ends (conditions, not pauses)
        wait_until(lambda: native_rows(target) >= 5, "Remnic's first commits", remnic, every=0.05)
        started = time.time()
        proc = run("migrate", "--src", src, "--dest", target, "--json", tmp=tmp_path / "tmp")
        ended = time.time()
        after = native_rows(target)
        wait_until(lambda: native_rows(target) >= after + 3, "Remnic's commits after the run", remnic, every=0.05)
    finally:
        stop.touch()
        assert remnic.wait(timeout=PATIENCE_S) == 0
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["messages"]["inserted"] == 24_000
    assert report["batches"] > 1, "the run must be long enough to be written in several transactions"
    record = json.loads(out.read_text())
    print(f"remnic inserts: {len(record['waits'])}, longest wait {max(record['waits'], default=0):.3f}s, "
          f"migrate batches: {report['batches']}")
    assert record["errors"] == [], record["errors"]
    during = [t for t in record["committed_at"] if started < t < ended]
    assert len(during) >= 3, "Remnic must have written while the migration ran"
    assert max(record["waits"]) < 5.0, sorted(record["waits"])[-5:]

    # every native row landed, after the two the target started with, in turn order
    content = read_content(target)
    native = content.messages[NATIVE_SESSION]
    assert [r[1] for r in native] == list(range(2 + len(record["waits"])))
    assert_sound(target)
    audit = run("audit", "--src", src, "--dest", target, "-q", tmp=tmp_path / "tmp")
    assert audit.returncode == 0, audit.stdout + audit.stderr
