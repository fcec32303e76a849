"""SIGINT and SIGTERM, wherever they land in a run: exit 130 / 143, one line on stderr, the target as it was or
holding whole sessions, and no file left behind: no run lock, no building file, no private folder (snapshot,
plan, DuckDB's spill files), no kept snapshot that no run sealed.

The landmarks are files the run makes: DuckDB's spill folder (planning: a 50k-message source planned within a
48 MB budget spills for about a second of its planning), a new target's building file, the ledger row of an
existing target's first batch. Each test waits for its landmark, then signals; nothing waits a fixed time."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FIXTURE_DIR, LCM_ETL
from undolib import generate_source, native_target, runs
from watchlib import Watcher

PATIENCE_S = 600.0
LINES = {signal.SIGINT: (130, "lcm-etl: interrupted; every session written so far is complete, re-run to finish\n"),
         signal.SIGTERM: (143, "lcm-etl: terminated (SIGTERM); every session written so far is complete, "
                               "re-run to finish\n")}
# planning 50k messages in 48 MB spills; the default budget would not
PLANNING = ("--memory-limit", "48MB")


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    return generate_source(tmp_path_factory.mktemp("signals") / "lcm.db", messages=50_000, seed=3)


class Run:
    """`lcm-etl ARGS` with a private TMPDIR and cache folder, so what it leaves behind can be listed."""

    def __init__(self, tmp: Path, *args):
        self.tmp, self.cache = tmp / "tmp", tmp / "cache"
        self.tmp.mkdir(parents=True)
        self.cache.mkdir()
        env = {**os.environ, "TMPDIR": str(self.tmp), "LCM_ETL_CACHE_DIR": str(self.cache)}
        # a session of its own: its process group is what a terminal's Ctrl-C signals (stop_group)
        self.proc = subprocess.Popen([str(LCM_ETL), *map(str, args)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)

    def wait_for(self, landmark, what: str) -> None:
        deadline = time.monotonic() + PATIENCE_S
        while not landmark():
            assert self.proc.poll() is None, f"the run ended before {what}: {self.proc.stderr.read()}"
            assert time.monotonic() < deadline, f"no {what} within {PATIENCE_S:g} s"
            time.sleep(0.002)
        assert self.proc.poll() is None, "the run ended before it could be signalled"

    def spilling(self) -> bool:
        return spilling(self.tmp, self.cache)

    def stop(self, sig: int, group: bool = False) -> tuple[int, str]:
        """Signal the run (`kill PID`), or with `group` its whole process group (Ctrl-C on a terminal)."""
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=PATIENCE_S)
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        return code, err

    def left(self) -> list[str]:
        """Every file or folder the run left in its temporary and cache folders (the record that DuckDB's
        scanner passed its signature check is kept on purpose: lcm_etl/duck.py)."""
        found = [p for folder in (self.tmp, self.cache) for p in folder.rglob("*")]
        return sorted(str(p) for p in found if "verified-extensions" not in p.parts)


def spilling(*folders: Path) -> bool:
    """DuckDB has spilled (it plans): its spill folder is in the run's private folder, or was in the cache.
    os.walk, not rglob: the run renames its folder as it takes it up (lcm-etl-new-* to lcm-etl-run-*), and a
    folder that vanishes under the walk is skipped, not an error."""
    return any("duckdb.tmp" in dirs + names for folder in folders for _, dirs, names in os.walk(folder))


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_planning_a_new_target_exits_with_its_code_one_line_and_leaves_no_file(tmp_path, source, sig):
    target = tmp_path / "out" / "lcm.sqlite"
    run = Run(tmp_path, "migrate", "--src", source, "--dest", target, "-q", *PLANNING)
    run.wait_for(run.spilling, "DuckDB spilling while it plans")
    assert run.stop(sig) == LINES[sig]
    assert run.left() == []
    assert not target.parent.exists()   # no target, building file or lock, and not the folder made for them


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_a_new_target_is_built_exits_with_its_code_and_leaves_no_building_file_or_lock(
        tmp_path, source, sig):
    target = tmp_path / "out" / "lcm.sqlite"
    run = Run(tmp_path, "migrate", "--src", source, "--dest", target, "-q")
    run.wait_for(lambda: (target.parent / ".lcm.sqlite.lcm-etl-building").exists(), "the building file")
    assert run.stop(sig) == LINES[sig]
    assert run.left() == []
    assert not target.parent.exists()


def test_sigterm_while_an_existing_target_is_written_exits_143_and_leaves_whole_batches_and_no_lock(tmp_path, source):
    target = native_target(tmp_path / "out" / "lcm.sqlite")
    run = Run(tmp_path, "migrate", "--src", source, "--dest", target, "--batch-rows", "500", "-q")

    def first_batch() -> bool:
        con = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM lcm_etl_run_ranges").fetchone()[0] > 0
        except sqlite3.OperationalError:   # no ledger before the first batch commits
            return False
        finally:
            con.close()

    run.wait_for(first_batch, "a committed batch")
    assert run.stop(signal.SIGTERM) == LINES[signal.SIGTERM]
    assert run.left() == []
    assert [n for n in files(target.parent) if "lcm-etl" in n] == []
    con = sqlite3.connect(target)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()
    (stopped,) = runs(target)
    assert stopped["status"] == "failed" and stopped["finished_at"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_while_a_watch_plans_abandons_the_sync_with_its_code_and_one_line(tmp_path, monkeypatch,
                                                                                          source, sig):
    target = tmp_path / "out" / "lcm.sqlite"
    monkeypatch.setenv("LCM_ETL_CACHE_DIR", str(tmp_path / "cache"))
    w = Watcher("migrate", "--src", source, "--dest", target, *PLANNING, tmp=tmp_path / "tmp")
    try:
        deadline = time.monotonic() + PATIENCE_S
        while not spilling(tmp_path / "tmp", tmp_path / "cache"):
            assert w.proc.poll() is None and w.lines.empty(), "the first sync ended before it was signalled"
            assert time.monotonic() < deadline, "the watch never planned"
            time.sleep(0.002)
        w.proc.send_signal(sig)
        assert w.proc.stderr.readline() == "lcm-etl: stopping after this sync (signal again to abandon it)\n"
        w.proc.send_signal(sig)
        code = w.proc.wait(timeout=PATIENCE_S)
        err = w.proc.stderr.read()
    finally:
        w.kill()
    assert (code, err) == LINES[sig]
    assert not target.parent.exists()


def test_sigterm_to_a_fleets_parent_stops_its_running_pair_and_starts_no_other(tmp_path, source):
    manifest = tmp_path / "pairs.txt"
    targets = [tmp_path / f"agent{i}" / "lcm.sqlite" for i in range(3)]
    manifest.write_text("".join(f"{source} {t}\n" for t in targets))
    run = Run(tmp_path, "migrate", "--manifest", manifest, "--jobs", "1", "-q")
    run.wait_for(lambda: any((t.parent / ".lcm.sqlite.lcm-etl-building").exists() for t in targets),
                 "the first pair's building file")
    assert run.stop(signal.SIGTERM) == LINES[signal.SIGTERM]   # sent to the parent alone, as `kill PID` does
    assert run.left() == []
    assert [t.parent for t in targets if t.parent.exists()] == []


def test_ctrl_c_to_a_fleet_with_an_idle_worker_is_one_line_and_exit_130(tmp_path, source):
    small = FIXTURE_DIR / "basic-0.15.3.db"
    manifest = tmp_path / "pairs.txt"
    done, running = tmp_path / "small" / "lcm.sqlite", tmp_path / "big" / "lcm.sqlite"
    manifest.write_text(f"{small} {done}\n{source} {running}\n")
    run = Run(tmp_path, "migrate", "--manifest", manifest, "--jobs", "2", "-q")
    # the small pair is done once it has sealed its kept snapshot, its last act
    run.wait_for(lambda: any(run.cache.glob("*/seal.json"))
                 and (running.parent / ".lcm.sqlite.lcm-etl-building").exists(),
                 "the small pair done while the big one builds")
    assert run.stop(signal.SIGINT, group=True) == LINES[signal.SIGINT]   # no worker's traceback
    (kept,) = {p.parent for p in run.cache.glob("*/seal.json")}
    assert [p for p in run.left() if not p.startswith(str(kept))] == []   # but the small pair's kept snapshot
    assert not running.parent.exists() and done.exists()


def test_a_signal_inside_a_sqlite_function_is_still_reported_as_that_signal():
    """SQLite swallows what a user-defined function raises ("user-defined function raised exception"), so a
    SIGTERM that lands in one (lcm_etl_utf8_json while a batch is written) leaves no Interrupted in the chain."""
    from lcm_etl.interrupts import interruption, raised_as_interrupted
    from lcm_etl.sqlite_runtime import sqlite3 as runtime   # the SQLite lcm-etl's connections use

    con = runtime.connect(":memory:")
    con.create_function("slow", 1, lambda v: os.kill(os.getpid(), signal.SIGTERM) or v)
    with raised_as_interrupted():
        with pytest.raises(runtime.OperationalError, match="user-defined function raised exception") as caught:
            con.execute("SELECT slow(1)").fetchall()
        stop = interruption(caught.value)
    assert stop is not None and stop.exit_code == 143
    with raised_as_interrupted():   # a new run starts with no signal received
        assert interruption(ValueError("unrelated")) is None


def test_a_signal_a_library_swallowed_whole_still_ends_the_command_with_its_code(capsys):
    """A command that received SIGINT, which something swallowed so that the run went on and completed (DuckDB's
    lazy import of pyarrow.compute inside to_arrow_table), exits 130 with the signal's line, not 0."""
    from lcm_etl.cli import handled

    def swallowing(debug=False):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)   # the handler runs here; its exception is caught below, as the library's was
        except KeyboardInterrupt:
            pass
        return 0

    with pytest.raises(SystemExit) as done:
        handled(swallowing)()
    assert done.value.code == 130
    assert capsys.readouterr().err == LINES[signal.SIGINT][1]


def test_a_pair_queued_to_a_worker_that_sigterm_stopped_is_not_started_and_says_143(tmp_path):
    """A fleet worker that a signal stopped while idle starts no pair queued to it; the pair's exit code is
    that signal's (it said 130, Ctrl-C's, whatever the signal was)."""
    from lcm_etl.commands import fleet
    from lcm_etl.commands.migrate import MigrateOptions
    from lcm_etl.interrupts import in_a_worker, raised_as_interrupted

    previous = {sig: signal.getsignal(sig) for sig in LINES}
    try:
        in_a_worker()
        os.kill(os.getpid(), signal.SIGTERM)   # idle: the worker's handler only marks it stopped
        result = fleet._pool_pair(0, MigrateOptions(src=FIXTURE_DIR / "basic-0.15.3.db", target=tmp_path / "t.db"))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with raised_as_interrupted():   # forget the signal received, as a new run does
            pass
    assert (result.ok, result.exit_code, result.error) == (False, 143, "not started: the fleet was stopped by a signal")
    assert not (tmp_path / "t.db").exists()


def test_a_watchs_second_signal_that_a_sqlite_callback_swallowed_still_abandons_the_sync_as_a_signal():
    """A second Ctrl-C that lands inside a SQLite user-defined function is swallowed by SQLite ("user-defined
    function raised exception"): the sync fails as a write would. The signal it recorded ends the watch as a
    signal all the same (exit 130), not as a failed sync the watch goes on after (found by the fault suite's
    test_a_second_sigint_mid_sync_abandons_it_as_an_interrupted_run, about 1 run in 4)."""
    from lcm_etl.commands.watch import StopFlag, _sync
    from lcm_etl.errors import RunFailed
    from lcm_etl.interrupts import Interrupted, raised_as_interrupted

    stop = StopFlag(quiet=True)

    def run_once():
        stop._handle(signal.SIGINT, None)   # the first signal: stop after this sync
        try:
            stop._handle(signal.SIGINT, None)   # the second: raised where the sync is...
        except Interrupted:
            pass   # ...inside a SQLite callback, which swallows it
        raise RunFailed("writing failed: user-defined function raised exception")

    with raised_as_interrupted(), pytest.raises(Interrupted) as raised:
        _sync(1, run_once, stop)
    assert raised.value.exit_code == 130
