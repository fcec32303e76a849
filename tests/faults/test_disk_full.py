"""The disk fills up (exit 1, nothing partial left behind).

A real full filesystem: a small tmpfs mounted for the test (needs root; skipped with the reason
otherwise), the target inside it and, for an existing target, a filler file that leaves too little room.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess

import pytest

from faultlib import (assert_sound, check_cut, copy_db, generate_source, make_existing_target, one_error_line,
                      read_content, run, source_weights)

pytestmark = pytest.mark.slow

KB = 1024


def _mount(folder, size: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("disk-full tests mount a small tmpfs, which needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path):
    """small_disk(size_in_bytes) -> a folder on a tmpfs of that size, unmounted afterwards."""
    mounted = []

    def make(size: int, name: str = "small"):
        folder = tmp_path / name
        _mount(folder, size)
        mounted.append(folder)
        return folder

    yield make
    for folder in mounted:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder, leave: int) -> None:
    """Fill `folder`'s filesystem but `leave` bytes."""
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(folder / "filler", "wb") as fh:
        fh.write(b"\0" * max(0, free - leave))
        fh.flush()
        os.fsync(fh.fileno())


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != "filler"}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return generate_source(tmp_path_factory.mktemp("diskfull") / "lcm.db", messages=1500, sessions=6, seed=9)


def test_a_new_target_on_a_full_disk_fails_with_one_line_and_leaves_no_target(source, small_disk, tmp_path):
    disk = small_disk(1024 * KB)
    target = disk / "lcm.sqlite"
    proc = run("migrate", "--src", source, "--dest", target, tmp=tmp_path / "tmp")
    assert proc.returncode == 1, proc.stderr
    assert "disk" in one_error_line(proc.stderr)
    assert list(disk.iterdir()) == [], "a failed build left files behind"


def test_an_existing_target_without_room_for_the_import_is_left_byte_identical(source, small_disk, tmp_path):
    disk = small_disk(8 * 1024 * KB)
    target = make_existing_target(disk / "lcm.sqlite")
    fill(disk, 256 * KB)
    before = files(disk)
    proc = run("migrate", "--src", source, "--dest", target, tmp=tmp_path / "tmp")
    assert proc.returncode == 1, proc.stderr
    assert "disk" in one_error_line(proc.stderr)
    assert files(disk) == before
    assert_sound(target)


def fill_between_batches(source, small_disk, tmp_path):
    """Run into an existing target on a disk with room for about half the import, in small batches.
    Returns (target, what an uninterrupted run makes of the same start, the failed run)."""
    initial = make_existing_target(tmp_path / "initial" / "lcm.sqlite")
    full_target = copy_db(initial, tmp_path / "full" / "lcm.sqlite")
    assert run("migrate", "--src", source, "--dest", full_target, *SMALL_BATCHES, tmp=tmp_path / "tmp").returncode == 0
    full = read_content(full_target)
    size = full_target.stat().st_size

    disk = small_disk(3 * size)
    target = copy_db(initial, disk / "lcm.sqlite")
    fill(disk, size // 2)
    proc = run("migrate", "--src", source, "--dest", target, *SMALL_BATCHES, tmp=tmp_path / "tmp")
    return target, full, proc


SMALL_BATCHES = ("--batch-rows", 300, "-q")


def test_a_disk_that_fills_between_batches_fails_with_one_line_and_leaves_only_clean_sessions(
        source, small_disk, tmp_path):
    target, full, proc = fill_between_batches(source, small_disk, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "disk" in one_error_line(proc.stderr)
    states = check_cut(target, full, {s for s, w in source_weights(source).items() if w > 300},
                       scratch=tmp_path / "inspect")
    assert "complete" in states.values() or "prefix" in states.values(), "the disk filled before any batch"


def test_a_rerun_after_freeing_space_completes_what_a_full_disk_interrupted(source, small_disk, tmp_path):
    target, full, proc = fill_between_batches(source, small_disk, tmp_path)
    assert proc.returncode == 1, proc.stderr
    (target.parent / "filler").unlink()
    proc = run("migrate", "--src", source, "--dest", target, *SMALL_BATCHES, tmp=tmp_path / "tmp")
    assert proc.returncode == 0, proc.stderr
    assert read_content(target) == full, read_content(target).diff(full)
    assert_sound(target)


def test_a_full_temporary_folder_fails_with_a_disk_full_line_not_an_internal_error(source, small_disk, tmp_path):
    tmp = small_disk(1024 * KB, "tmp")
    target = tmp_path / "remnic" / "lcm.sqlite"
    proc = run("migrate", "--src", source, "--dest", target, tmp=tmp)
    assert proc.returncode == 1, proc.stderr
    line = one_error_line(proc.stderr)
    assert "disk" in line or "space" in line
    assert not target.exists()
    assert list(tmp.iterdir()) == [], "the snapshot folder was left behind"


def kept_files(cache) -> list[str]:
    """What the cache folder holds but the scanner's record (lcm_etl/duck.py), which is a few bytes."""
    return sorted(p.name for p in cache.iterdir() if p.name != "verified-extensions")


def cache_warning(cache) -> str:
    return (f"lcm-etl: warning: the cache folder {cache} cannot hold a kept snapshot (disk full): this run keeps "
            "none, and the next copies the source whole (free space there, point LCM_ETL_CACHE_DIR at another "
            "folder, or set it to off)\n")


def test_a_full_cache_folder_is_one_warning_line_and_a_run_without_a_kept_snapshot(source, small_disk, tmp_path):
    """The kept snapshot (lcm_etl/read/snapshot/snapcache.py) is written where LCM_ETL_CACHE_DIR says; the cache is optional."""
    cache = small_disk(1024 * KB, "cache")
    target = tmp_path / "remnic" / "lcm.sqlite"
    proc = run("migrate", "--src", source, "--dest", target, "-q", tmp=tmp_path / "tmp",
               env={"LCM_ETL_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == cache_warning(cache)
    assert read_content(target).messages
    assert kept_files(cache) == [], "a part of the copy was left in the cache"
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_read_only_cache_folder_is_one_warning_line_and_a_run_without_a_kept_snapshot(source, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(cache)]).returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        proc = run("migrate", "--src", source, "--dest", tmp_path / "remnic" / "lcm.sqlite", "-q",
                   tmp=tmp_path / "tmp", env={"LCM_ETL_CACHE_DIR": str(cache / "lcm-etl")})
    finally:
        subprocess.run(["umount", str(cache)], capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == cache_warning(cache / "lcm-etl").replace("(disk full)", "(Read-only file system)")


def test_a_kept_snapshot_with_no_room_to_grow_is_one_warning_line_and_the_run_lands_the_change(
        source, small_disk, tmp_path):
    cache = small_disk(16 * 1024 * KB, "cache")
    grown = copy_db(source, tmp_path / "grown" / "lcm.db")
    target = tmp_path / "remnic" / "lcm.sqlite"
    env = {"LCM_ETL_CACHE_DIR": str(cache)}
    assert run("migrate", "--src", grown, "--dest", target, tmp=tmp_path / "tmp", env=env).returncode == 0
    fill(cache, 4 * KB)
    with sqlite3.connect(grown) as con:   # a message whose pages the kept copy has no room for
        con.execute("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                    "SELECT conversation_id, max(seq) + 1, 'user', ?, 5, '2026-11-23 09:00:00' FROM messages "
                    "WHERE conversation_id = (SELECT min(conversation_id) FROM conversations)", ("z" * 200_000,))
    con.close()
    proc = run("migrate", "--src", grown, "--dest", target, "-q", tmp=tmp_path / "tmp", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == cache_warning(cache)
    with sqlite3.connect(target) as con:
        assert con.execute("SELECT count(*) FROM lcm_messages WHERE content = ?", ("z" * 200_000,)).fetchone() == (1,)
    assert kept_files(cache) == ["filler"], "the half-written copy was left in the cache"
    (cache / "filler").unlink()   # room again: the next run keeps its snapshot again
    assert run("migrate", "--src", grown, "--dest", target, "--full", tmp=tmp_path / "tmp", env=env).stderr == ""
    assert len([p for p in cache.iterdir() if (p / "seal.json").exists()]) == 1
