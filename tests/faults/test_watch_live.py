"""`migrate --watch` over time: a live lossless-claw, hundreds of syncs, signals and SIGKILL mid-sync."""
from __future__ import annotations

import datetime as dt
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faultlib import (HERE, ROOT, assert_sound, check_cut, copy_db, generate_source, make_existing_target,
                      read_content, run, wait_for_data)

sys.path.insert(0, str(ROOT / "tests"))
from conftest import copy_fixture
from watchlib import Watcher, append_turns, counts

pytestmark = pytest.mark.slow

LCMCHECK = ROOT / "tests" / "tools" / "lcmcheck.py"


def iso_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def seconds_between(a: str, b: str) -> float:
    parse = lambda s: dt.datetime.fromisoformat(s.replace("Z", "+00:00"))  # noqa: E731
    return (parse(b) - parse(a)).total_seconds()


def test_a_source_written_and_compacted_for_30_s_converges_at_the_first_sync_after_the_last_write(tmp_path):
    """A writer appends turns and condenses summaries (new summaries over existing ones, as lossless-claw's
    compaction does) for 30 s while the watch runs. The first sync that starts after the writer's last
    commit leaves a target that audit and the independent lcmcheck find complete."""
    interval = 0.5
    src = generate_source(tmp_path / "openclaw" / "lcm.db", messages=2000, seed=7)
    target = tmp_path / "remnic" / "lcm.sqlite"
    w = Watcher("migrate", "--src", src, "--dest", target, "--interval", interval, tmp=tmp_path / "tmp")
    writer = None
    try:
        assert w.next_sync()["sync"] == 1
        writer = subprocess.Popen([sys.executable, str(HERE / "actors.py"), "source-writer", str(src),
                                   str(tmp_path / "never"), "30", "compact"], stdout=subprocess.PIPE, text=True)
        assert writer.stdout.readline().strip() == "ready"
        commits = sum(1 for _ in writer.stdout)   # "commit N" lines until the writer's 30 s are over
        assert writer.wait(timeout=60) == 0 and commits > 0
        last_write = iso_now()
        converging = w.sync_until(lambda s: "error" not in s and s["started_at"] > last_write)
        code, err = w.stop()
    finally:
        w.kill()
        if writer is not None:
            writer.kill()
            writer.wait()
            writer.stdout.close()
    assert code == 0, err
    failures = [s for s in w.seen if "error" in s]
    assert failures == [], failures
    print(f"{commits} commits in 30 s; {len(w.seen)} syncs; the converging sync started "
          f"{seconds_between(last_write, converging['started_at']):.2f} s after the last write "
          f"(interval {interval} s) and took {converging['elapsed_s']:.2f} s")
    assert_sound(target)
    audit = run("audit", "--src", src, "--dest", target, tmp=tmp_path / "tmp")
    check = subprocess.run([sys.executable, str(LCMCHECK), str(src), str(target)], capture_output=True, text=True,
                           timeout=600)
    assert (audit.returncode, check.returncode) == (0, 0), f"{audit.stdout[-2000:]}\n{check.stdout[-2000:]}"
    assert check.stdout.strip().splitlines()[-1].startswith("lcmcheck: 0 problems")


def test_the_watcher_rss_after_200_syncs_is_within_10_percent_of_its_rss_after_10(tmp_path):
    """Syncs are driven by appending turns; a sync may also be triggered by the writer's checkpoint on
    close and find nothing new, so progress is read from the report, not assumed one sync per append."""
    src = copy_fixture("multiparent-newest.db", tmp_path / "openclaw")
    target = tmp_path / "lcm.sqlite"
    w = Watcher("migrate", "--src", src, "--dest", target, "--interval", "0.05", tmp=tmp_path / "tmp")
    rss, messages, appended = {}, 48, 0
    try:
        sync = w.next_sync()
        while sync["sync"] < 200:
            appended += 1
            messages += append_turns(src, 1, first=appended)
            # a sync re-plans only the session that grew (lcm_etl/planning/delta.py): its report counts that session,
            # so progress is read from the target
            sync = w.sync_until(lambda s, want=messages: "error" not in s and counts(target)["lcm_messages"] == want)
            if sync["sync"] >= 10 and 10 not in rss:
                rss[10] = (sync["sync"], w.rss_kb())
        rss[200] = (sync["sync"], w.rss_kb())
        code, err = w.stop()
    finally:
        w.kill()
    assert code == 0, err
    assert all("error" not in s for s in w.seen)
    (n10, at10), (n200, at200) = rss[10], rss[200]
    print(f"VmRSS after {n10} syncs {at10} kB, after {n200} syncs {at200} kB ({at200 / at10 - 1:+.1%}); "
          f"{appended} appends")
    assert at200 <= at10 * 1.10
    assert counts(target)["lcm_messages"] == messages


def _big_existing_case(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A generated source, an existing Remnic target (written in batches, so a sync takes a while), and
    the content an uninterrupted migrate gives."""
    src = generate_source(tmp_path / "openclaw" / "lcm.db", messages=4000, seed=11)
    target = make_existing_target(tmp_path / "remnic" / "lcm.sqlite")
    reference = copy_db(target, tmp_path / "reference" / "lcm.sqlite")
    done = run("migrate", "--src", src, "--dest", reference, "--batch-rows", "100", tmp=tmp_path / "tmp")
    assert done.returncode == 0, done.stderr
    return src, target, reference


def test_sigkill_mid_sync_is_a_killed_run_and_the_next_migrate_finishes_the_target(tmp_path):
    src, target, reference = _big_existing_case(tmp_path)
    w = Watcher("migrate", "--src", src, "--dest", target, "--batch-rows", "100", tmp=tmp_path / "tmp")
    try:
        wait_for_data(w.proc, Path(str(target) + "-wal"))   # the sync has begun writing
        assert w.proc.poll() is None and w.lines.empty(), "the sync finished before it could be killed"
        w.kill()
    finally:
        w.kill()
    full = read_content(reference)
    check_cut(target, full, chunked=set(full.messages), scratch=tmp_path / "inspect")
    again = run("migrate", "--src", src, "--dest", target, "--batch-rows", "100", tmp=tmp_path / "tmp")
    assert again.returncode == 0, again.stderr
    assert_sound(target)
    got = read_content(target)
    assert got == full, got.diff(full)


def test_sigint_mid_sync_lets_that_sync_finish_then_exits_0(tmp_path):
    src, target, reference = _big_existing_case(tmp_path)
    w = Watcher("migrate", "--src", src, "--dest", target, "--batch-rows", "100", tmp=tmp_path / "tmp")
    try:
        wait_for_data(w.proc, Path(str(target) + "-wal"))
        assert w.proc.poll() is None and w.lines.empty(), "the sync finished before the signal"
        code, err = w.stop(signal.SIGINT)
    finally:
        w.kill()
    assert code == 0, err
    assert err == "lcm-etl: stopping after this sync (signal again to abandon it)\n"
    assert [s["sync"] for s in w.seen] == [1] and w.seen[0]["messages"]["inserted"] == 4000
    assert_sound(target)
    got, full = read_content(target), read_content(reference)
    assert got == full, got.diff(full)


def test_a_second_sigint_mid_sync_abandons_it_as_an_interrupted_run(tmp_path):
    src, target, reference = _big_existing_case(tmp_path)
    w = Watcher("migrate", "--src", src, "--dest", target, "--batch-rows", "100", tmp=tmp_path / "tmp")
    try:
        wait_for_data(w.proc, Path(str(target) + "-wal"))
        w.proc.send_signal(signal.SIGINT)
        assert w.proc.stderr.readline() == "lcm-etl: stopping after this sync (signal again to abandon it)\n"
        w.proc.send_signal(signal.SIGINT)
        code = w.proc.wait(timeout=120)
        err = w.proc.stderr.read()
    finally:
        w.kill()
    assert code == 130, err
    assert err == "lcm-etl: interrupted; every session written so far is complete, re-run to finish\n"
    full = read_content(reference)
    check_cut(target, full, chunked=set(full.messages))
    again = run("migrate", "--src", src, "--dest", target, "--batch-rows", "100", tmp=tmp_path / "tmp")
    assert again.returncode == 0, again.stderr
    assert read_content(target) == full
