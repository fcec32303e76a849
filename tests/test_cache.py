"""The cache is a cache (lcm_etl/read/snapshot/cache_bounds.py, lcm_etl/commands/cache.py): what an interrupted run left
is removed by the next run of any pair, the kept snapshots stay within LCM_ETL_CACHE_SIZE (least recently used
first out), a cache folder that cannot be written is one warning line and a run without a kept snapshot, a kept
snapshot that cannot be used is said, and `lcm-etl cache` lists, prunes and clears. Each test has its own cache
folder (LCM_ETL_CACHE_DIR) and its own TMPDIR."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import FIXTURE_DIR, copy_fixture, run_cli
from lcm_etl.run_options import size_text
from lcm_etl.read.lcmdb.source_tables import BY_NAME
from lcm_etl.read.snapshot import cache_bounds, snapcache

FIXTURE = "basic-0.15.3.db"


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A cache folder and a TMPDIR of the test's own, for the CLI it runs and for the library in-process."""
    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("LCM_ETL_CACHE_DIR", str(cache))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.delenv("LCM_ETL_CACHE_SIZE", raising=False)
    return tmp_path


def cli(*args, env: dict | None = None, code: int = 0):
    proc = run_cli(*args, env={**os.environ, **(env or {})})
    assert proc.returncode == code, proc.stderr
    return proc


def migrate(world: Path, name: str, *extra, env: dict | None = None) -> dict:
    """A migrate of pair `name` (its own copy of the fixture, its own target), --json."""
    src = world / name / FIXTURE
    if not src.exists():
        copy_fixture(FIXTURE, world / name)
    proc = cli("migrate", "--src", src, "--dest", world / name / "out" / "lcm.sqlite", "--json", *extra, env=env)
    return {**json.loads(proc.stdout), "stderr": proc.stderr}


def pair_folder(world: Path, name: str) -> Path:
    cache = snapcache.SnapshotCache.for_pair(world / name / FIXTURE, world / name / "out" / "lcm.sqlite", BY_NAME)
    assert cache is not None
    return cache.folder


def listing(*extra, env: dict | None = None) -> dict:
    return json.loads(cli("cache", "--json", *extra, env=env).stdout)


def leave_killed_run(world: Path, name: str) -> tuple[Path, Path]:
    """What a run killed while it copied the source leaves (kill -9: no code of it runs again): its copy in the
    cache folder, unsealed, and its run folder in TMPDIR with DuckDB's spill files, no process holding either."""
    folder = pair_folder(world, name)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIXTURE_DIR / FIXTURE, folder / "snapshot.db")
    run = world / "tmp" / "lcm-etl-run-killed"
    (run / "duckdb.tmp").mkdir(parents=True)
    (run / "duckdb.tmp" / "duckdb_temp_storage_DEFAULT-0.tmp").write_bytes(b"\0" * 300_000)
    return folder, run


def test_a_copy_and_spill_files_left_by_a_killed_run_are_removed_by_the_next_run_of_another_pair(world):
    folder, run = leave_killed_run(world, "killed")
    migrate(world, "other")
    assert not folder.exists() and not run.exists()
    assert pair_folder(world, "other").is_dir()


def test_a_copy_and_a_run_folder_held_by_a_live_run_are_left_alone(world):
    """A live run of another pair holds a lock on each (the OS drops it when the run dies)."""
    folder, run = leave_killed_run(world, "live")
    held = [os.open(p, os.O_RDONLY) for p in (folder, run)]
    try:
        for fd in held:
            fcntl.flock(fd, fcntl.LOCK_SH)
        migrate(world, "other")
        assert (folder / "snapshot.db").exists() and run.exists()
        assert listing()["snapshots"][0]["state"] in ("in use", "sealed")
    finally:
        for fd in held:
            os.close(fd)
    migrate(world, "other", "--full")   # the lock is gone: the next run removes them
    assert not folder.exists() and not run.exists()


def test_a_cache_folder_that_cannot_be_made_is_one_warning_line_and_a_run_without_a_kept_snapshot(world):
    blocker = world / "cache-is-a-file"
    blocker.write_text("not a folder")
    env = {"LCM_ETL_CACHE_DIR": str(blocker / "cache")}
    first = migrate(world, "a", env=env)
    line = (f"the cache folder {blocker / 'cache'} cannot hold a kept snapshot (Not a directory): this run keeps "
            "none, and the next copies the source whole (free space there, point LCM_ETL_CACHE_DIR at another "
            "folder, or set it to off)")
    assert first["warnings"] == [line]
    assert first["stderr"] == f"lcm-etl: warning: {line}\n"
    again = migrate(world, "a", "--full", env=env)
    assert again["warnings"] == [line] and again["messages"]["already_present"] == first["messages"]["inserted"]
    text = cli("migrate", "--src", world / "a" / FIXTURE, "--dest", world / "a" / "out" / "lcm.sqlite", "--full",
               env=env)
    assert f"  warning: {line}\n" in text.stdout and text.stderr == f"lcm-etl: warning: {line}\n"


def test_a_kept_snapshot_whose_seal_is_damaged_is_dropped_and_the_report_says_so(world):
    first = migrate(world, "a")
    folder = pair_folder(world, "a")
    (folder / "seal.json").write_bytes(b'{"run_id": "')
    with sqlite3.connect(world / "a" / FIXTURE) as con:
        con.execute("UPDATE conversations SET title = 'renamed' WHERE conversation_id = 2")
    report = migrate(world, "a")
    assert report["sync_decision"]["line"].startswith(
        f"marks: the source's marks compared with those of run {first['run_id']} (the kept snapshot was dropped: its "
        "seal cannot be read); ")
    assert cache_bounds.read_seal(folder)[0]["run_id"] == report["run_id"]


def test_the_least_recently_used_snapshots_are_evicted_to_keep_the_cache_within_its_bound(world):
    size = (FIXTURE_DIR / FIXTURE).stat().st_size
    env = {"LCM_ETL_CACHE_SIZE": f"{int(size * 2.5)}B"}   # room for two copies (and their small records)
    for name in ("a", "b", "c"):
        migrate(world, name, env=env)
    migrate(world, "a", "--full", env=env)   # a is used again: b is now the least recently used
    report = migrate(world, "d", env=env)
    assert report["warnings"] == []
    kept = listing(env=env)
    assert sorted(Path(s["source"]).parent.name for s in kept["snapshots"]) == ["a", "d"]
    assert kept["bound_bytes"] == int(size * 2.5) and kept["total_bytes"] <= kept["bound_bytes"]
    assert all(s["state"] == "sealed" for s in kept["snapshots"])


def test_a_snapshot_larger_than_the_bound_is_not_kept_and_the_run_says_so(world):
    report = migrate(world, "a", env={"LCM_ETL_CACHE_SIZE": "100KB"})
    line = (f"the snapshot of this run ({size_text((FIXTURE_DIR / FIXTURE).stat().st_size)}) is larger than "
            "the cache's bound, LCM_ETL_CACHE_SIZE=100KB: not kept, the next run copies the source whole")
    assert report["warnings"] == [line]
    assert listing()["snapshots"] == []


def test_a_cache_size_that_is_not_a_size_fails_no_run_and_is_said_once_with_the_default_used(world):
    warning = ("lcm-etl: warning: LCM_ETL_CACHE_SIZE='lots' is not a size such as 20GB, 512MB or 0 (keep no "
               "snapshot): the default, 20GB, bounds the kept snapshots\n")
    for args in (("cache", "--json"), ("migrate", "--src", copy_fixture(FIXTURE, world / "a"),
                                       "--dest", world / "a" / "o", "--json")):
        proc = cli(*args, env={"LCM_ETL_CACHE_SIZE": "lots"}, code=0)
        assert proc.stderr == warning
    assert (listing(env={"LCM_ETL_CACHE_SIZE": "lots"})["bound"], len(listing()["snapshots"])) == ("20GB", 1)


def test_cache_lists_the_kept_snapshots_with_their_pair_size_and_run(world):
    report = migrate(world, "a")
    folder, _ = leave_killed_run(world, "killed")
    listed = listing()
    assert listed["folder"] == str(world / "cache")
    by_state = {s["state"]: s for s in listed["snapshots"]}
    sealed, abandoned = by_state["sealed"], by_state["abandoned"]
    assert (sealed["source"], sealed["target"], sealed["sealed_run"]) == \
        (str(world / "a" / FIXTURE), str(world / "a" / "out" / "lcm.sqlite"), report["run_id"])
    assert sealed["bytes"] >= (FIXTURE_DIR / FIXTURE).stat().st_size and sealed["last_used"].endswith("Z")
    assert abandoned["folder"] == str(folder) and abandoned["sealed_run"] is None
    assert listed["total_bytes"] == sealed["bytes"] + abandoned["bytes"]
    text = cli("cache").stdout
    assert text.startswith(f"lcm-etl cache: {world / 'cache'}: 2 kept snapshots, ")
    assert f"{world / 'a' / FIXTURE} -> {world / 'a' / 'out' / 'lcm.sqlite'}" in text
    assert "abandoned (left by a run that did not finish): removed by the next run or --prune" in text


def test_cache_prune_removes_abandoned_copies_and_clear_removes_every_snapshot(world):
    migrate(world, "a")
    folder, run = leave_killed_run(world, "killed")
    pruned = listing("--prune")
    assert [s["state"] for s in pruned["snapshots"]] == ["sealed"]
    assert [r["folder"] for r in pruned["removed"]] == [str(folder)] and not run.exists()
    cleared = listing("--clear")
    assert cleared["snapshots"] == [] and len(cleared["removed"]) == 1
    assert migrate(world, "a")["sync_decision"]["how"] == "no-op"   # the target's own no-op is no concern of the cache


def test_cache_with_the_cache_off_says_so_and_prune_and_clear_together_are_refused(world):
    off = listing(env={"LCM_ETL_CACHE_DIR": "off"})
    assert off["folder"] is None and off["snapshots"] == []
    assert cli("cache", env={"LCM_ETL_CACHE_DIR": "off"}).stdout == \
        "lcm-etl cache: off (LCM_ETL_CACHE_DIR=off): no snapshot is kept\n"
    proc = cli("cache", "--prune", "--clear", code=2)
    assert proc.stderr == ("lcm-etl: error: --prune and --clear: give one (--clear removes every kept snapshot, "
                           "--prune those left by interrupted runs and those over the bound)\n")
    assert not (world / "cache").exists()   # listing never makes the folder
