"""The kept snapshot follows the source's WAL (lcm_etl/read/snapshot/wal.py) only where the WAL proves it holds the whole
change, and every run ends where a run without a kept snapshot ends: frames appended, a checkpoint, a restart, a torn
frame, commits lost in a power cut and written again under the same salts, a writer switching journal modes, a
checkpoint while the run reads, a run killed mid-sync.

The source is lossless-claw's lcm.db fixture, written by writers that hold it open as the gateway does (WAL,
synchronous=NORMAL); each sync is a real `lcm-etl migrate` process, and its twin, the same source's copy migrated
without a kept snapshot, must hold the same rows."""
from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import copy_fixture, migrate_json, run_cli
from lcm_etl.read.snapshot import wal
from test_snapcache import APPEND, FIXTURE, kept, remnic_content, without_cache

pytestmark = pytest.mark.slow


@contextmanager
def gateway(db: Path, autocheckpoint: int = 0):
    """A writer holding the database open with lossless-claw's pragmas; automatic checkpoints off unless asked,
    so that a checkpoint happens where a test makes one."""
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
        yield con
    finally:
        con.close()


def append(con: sqlite3.Connection, n: int, tag: str) -> None:
    for k in range(n):
        con.execute(APPEND, (f"{tag} {k}", 1 + k % 3))


def source_rows(src: Path, columns: str = "*") -> list:
    """The messages as SQLite reads the source (a connection that writes nothing while the -wal has frames)."""
    con = sqlite3.connect(src)
    try:
        return con.execute(f"SELECT {columns} FROM messages ORDER BY rowid").fetchall()
    finally:
        con.close()


def contents(src: Path) -> list[str]:
    return [r[0] for r in source_rows(src, "content")]


def copy_rows(src: Path, target: Path) -> list:
    with sqlite3.connect(kept(src, target).db) as con:
        return con.execute("SELECT * FROM messages ORDER BY rowid").fetchall()


def synced(src: Path, target: Path, twin_src: Path, twin: Path) -> str:
    """One sync with the kept snapshot, the twin's without: the same rows. The sync: line."""
    shutil.copyfile(src, twin_src)
    for side in ("-wal", "-shm"):
        Path(f"{twin_src}{side}").unlink(missing_ok=True)
        if Path(f"{src}{side}").exists():
            shutil.copyfile(f"{src}{side}", f"{twin_src}{side}")
    report = migrate_json(src, target)
    without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
    assert remnic_content(target) == remnic_content(twin)
    return report["sync_decision"]["line"]


@pytest.fixture
def world(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    with gateway(src):
        pass   # the database in WAL mode, as lossless-claw leaves it (the main file's header says so)
    (tmp_path / "twin").mkdir()
    return src, tmp_path / "out" / "lcm.sqlite", tmp_path / "twin" / FIXTURE, tmp_path / "twin-out" / "lcm.sqlite"


def test_frames_a_checkpoint_and_a_restart_are_read_from_the_wal_alone(world):
    src, target, twin_src, twin = world
    with gateway(src) as live:
        synced(src, target, twin_src, twin)   # a whole copy, beside an empty -wal
        append(live, 30, "before")
        line = synced(src, target, twin_src, twin)
        assert "WAL frames read over an unchanged main file)" in line, line
        append(live, 4, "more")
        main = src.stat().st_mtime_ns
        line = synced(src, target, twin_src, twin)
        assert src.stat().st_mtime_ns == main and "new WAL frames read)" in line, line
        append(live, 2, "checkpointed")
        live.execute("PRAGMA wal_checkpoint(PASSIVE)")   # the main file written, the WAL not yet restarted
        line = synced(src, target, twin_src, twin)
        assert "pages a checkpoint wrote to the main file checked" in line, line
        append(live, 1, "restarted")   # the WAL restarts: checkpoint sequence + 1, new salts
        line = synced(src, target, twin_src, twin)
        assert "0 WAL frames of the generation before a restart and" in line, line
        append(live, 10, "read before the checkpoint")
        assert "new WAL frames read)" in synced(src, target, twin_src, twin)
        append(live, 2, "not read before the checkpoint")
        live.execute("PRAGMA wal_checkpoint(PASSIVE)")
        append(live, 1, "restarted again")
        line = synced(src, target, twin_src, twin)
        assert "WAL frames of the generation before a restart and" in line and "(0 WAL frames" not in line, line


def test_a_wal_that_appeared_with_no_frame_changes_nothing(world):
    src, target, twin_src, twin = world
    synced(src, target, twin_src, twin)
    with gateway(src):
        assert Path(f"{src}-wal").stat().st_size == 0
        line = synced(src, target, twin_src, twin)
    assert "0 pages changed since the snapshot kept from run" in line
    assert "(the WAL holds no frame and the main file is unchanged)" in line


def test_two_restarts_since_the_last_sync_compare_the_main_file_whole(world):
    src, target, twin_src, twin = world
    with gateway(src) as live:
        append(live, 3, "read")
        synced(src, target, twin_src, twin)
        for k in range(2):
            live.execute("PRAGMA wal_checkpoint(PASSIVE)")
            append(live, 2, f"generation {k}")
        line = synced(src, target, twin_src, twin)
    assert "(the main file compared whole: a WAL generation was missed (checkpoint sequence" in line, line


# a writer that commits and dies without checkpointing (the -wal and -shm stay), printing the WAL's size after
# each commit
DYING_WRITER = """
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA synchronous=NORMAL")
con.execute("PRAGMA wal_autocheckpoint=0")
per_commit = int(sys.argv[4])
for k in range(int(sys.argv[2])):
    con.execute("BEGIN")
    for j in range(per_commit):
        con.execute("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                    "SELECT conversation_id, max(seq) + 1, 'user', ?, 5, '2026-11-23 09:00:00' FROM messages "
                    "WHERE conversation_id = 1", (f"{sys.argv[3]} {k}" + (f" {j} " + "x" * 3000) * (per_commit > 1),))
    con.execute("COMMIT")
    print(os.path.getsize(sys.argv[1] + "-wal"), flush=True)
os._exit(0)
"""


def dying_writer(tmp: Path, src: Path, commits: int, tag: str, per_commit: int = 1) -> list[int]:
    """`commits` commits of `per_commit` messages each (more than one: of 3 KB each, a bulk import)."""
    script = tmp / "writer.py"
    script.write_text(DYING_WRITER)
    out = subprocess.run([sys.executable, str(script), str(src), str(commits), tag, str(per_commit)],
                         capture_output=True, text=True, check=True).stdout
    return [int(x) for x in out.split()]


def tear(src: Path, at: int) -> None:
    """The byte at `at` of the source's -wal changed, and its -shm gone: SQLite recovers the WAL from the file, up
    to the commit before the torn frame."""
    with open(f"{src}-wal", "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    Path(f"{src}-shm").unlink()


def test_a_torn_frame_ends_what_is_read_at_the_commit_before_it(world, tmp_path):
    src, target, twin_src, twin = world
    dying_writer(tmp_path, src, 2, "read")
    synced(src, target, twin_src, twin)
    ends = dying_writer(tmp_path, src, 2, "appended")
    tear(src, ends[-1] - 100)   # the last commit's last frame torn: a byte of its page changed
    line = synced(src, target, twin_src, twin)
    assert "new WAL frames read)" in line, line
    assert copy_rows(src, target) == source_rows(src)
    assert "appended 0" in contents(src) and "appended 1" not in contents(src)


def test_commits_lost_in_a_power_cut_and_written_again_under_the_same_salts_are_not_trusted(world, tmp_path):
    """synchronous=NORMAL: a power cut loses the WAL's last commits, which the last sync had read; the writer then
    writes other frames where they were, under the same salts. The frames read no longer carry their checksums:
    the main file is compared whole, and the copy is the source as SQLite reads it."""
    src, target, twin_src, twin = world
    ends = dying_writer(tmp_path, src, 2, "kept")
    dying_writer(tmp_path, src, 3, "lost in a power cut")
    synced(src, target, twin_src, twin)   # reads the commits about to be lost
    os.truncate(f"{src}-wal", ends[-1])
    Path(f"{src}-shm").unlink()
    dying_writer(tmp_path, src, 1, "after the reboot")
    line = synced(src, target, twin_src, twin)
    assert "the main file compared whole: the WAL frames the last sync read were rewritten (the same salts, " \
           "another checksum chain)" in line, line
    assert copy_rows(src, target) == source_rows(src)
    assert not any(c.startswith("lost in a power cut") for c in contents(src))


def test_a_writer_that_switches_journal_mode_is_compared_whole(world):
    src, target, twin_src, twin = world
    with gateway(src) as live:
        append(live, 3, "in the WAL")
        synced(src, target, twin_src, twin)
        live.execute("PRAGMA journal_mode=DELETE")   # checkpointed, the -wal removed
        live.execute("UPDATE messages SET content = 'rewritten in rollback mode' WHERE rowid = 1")
        live.execute("PRAGMA journal_mode=WAL")
        append(live, 1, "in a new WAL")
        line = synced(src, target, twin_src, twin)
    assert "(the main file compared whole: a WAL generation was missed" in line, line
    assert copy_rows(src, target) == source_rows(src)


WRITER = """
import sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA synchronous=NORMAL")
con.execute("PRAGMA wal_autocheckpoint=8")   # an auto-checkpoint every few commits: some land while a run reads
k = 0
while not __import__("os").path.exists(sys.argv[2]):
    con.execute("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                "SELECT conversation_id, max(seq) + 1, 'user', ?, 5, '2026-11-23 09:00:00' FROM messages "
                "WHERE conversation_id = ?", (f"live {k}", 1 + k % 3))
    k += 1
    time.sleep(0.01)
con.close()
"""


def test_syncs_killed_or_overtaken_by_checkpoints_end_where_a_run_without_a_kept_snapshot_ends(world, tmp_path):
    """A writer commits and auto-checkpoints continuously while syncs run, some of them SIGKILLed at a random
    instant: once the writer stops, one more sync leaves the target as a run without a kept snapshot leaves it."""
    src, target, twin_src, twin = world
    migrate_json(src, target)
    stop = tmp_path / "stop"
    script = tmp_path / "live_writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(src), str(stop)])
    rnd = random.Random(int(os.environ.get("FAULT_SEED", "37")))
    try:
        for trial in range(8):
            time.sleep(0.3)
            if trial % 2:
                assert run_cli("migrate", "--src", src, "--dest", target, "-q").returncode == 0
                continue
            proc = subprocess.Popen([sys.executable, "-m", "lcm_etl", "migrate", "--src", str(src), "--dest",
                                     str(target), "-q"], stderr=subprocess.DEVNULL)
            time.sleep(rnd.uniform(0.2, 2.0))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        stop.touch()
        writer.wait(timeout=60)
    migrate_json(src, target)
    shutil.copyfile(src, twin_src)   # the writer closed: everything is in the main file
    without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
    assert copy_rows(src, target) == source_rows(src)
    assert imported(target) == imported(twin)   # the targets' ids follow the order rows arrived in: left out


def imported(target: Path) -> list:
    con = sqlite3.connect(target)
    try:
        return con.execute("SELECT session_id, turn_index, role, content, token_count, created_at, metadata "
                           "FROM lcm_messages ORDER BY session_id, turn_index").fetchall()
    finally:
        con.close()


def bulk(con: sqlite3.Connection, tag: str, n: int = 3_000) -> None:
    """A bulk import in one transaction: more bytes of new WAL frames than wal._FOLD (8 MB), and most of the -wal's,
    which a sync hands to SQLite to verify and fold."""
    con.execute("BEGIN")
    for k in range(n):
        con.execute(APPEND, (f"{tag} {k} " + "x" * 3000, 1 + k % 3))
    con.execute("COMMIT")


def test_a_bulk_import_in_the_wal_is_verified_and_folded_by_sqlite_then_followed_frame_by_frame(world):
    src, target, twin_src, twin = world
    with gateway(src) as live:
        append(live, 3, "read")
        synced(src, target, twin_src, twin)
        bulk(live, "bulk")
        assert os.path.getsize(f"{src}-wal") > wal._FOLD
        line = synced(src, target, twin_src, twin)
        assert "new WAL frames verified and folded by SQLite)" in line, line
        append(live, 2, "after the bulk")   # the copy's mark: every frame SQLite folded, followed on from there
        line = synced(src, target, twin_src, twin)
        assert "(10 new WAL frames read)" in line, line
        bulk(live, "less than half the -wal")   # read frame by frame: copying the whole -wal would read more
        line = synced(src, target, twin_src, twin)
        assert "new WAL frames read)" in line and "SQLite" not in line, line
        bulk(live, "checkpointed", 9_000)   # most of the -wal: the two bulks before are in it too
        live.execute("PRAGMA wal_checkpoint(PASSIVE)")   # the main file written, the WAL not yet restarted
        line = synced(src, target, twin_src, twin)
        assert "new WAL frames verified and folded by SQLite, the" in line, line
        assert "pages a checkpoint wrote to the main file checked" in line, line
    assert copy_rows(src, target) == source_rows(src)


def test_a_torn_frame_in_a_bulk_import_ends_what_sqlite_folds_at_the_commit_before_it(world, tmp_path):
    src, target, twin_src, twin = world
    dying_writer(tmp_path, src, 2, "read")
    synced(src, target, twin_src, twin)
    dying_writer(tmp_path, src, 1, "kept")
    ends = dying_writer(tmp_path, src, 1, "torn", per_commit=3_000)
    assert ends[-1] > wal._FOLD
    tear(src, ends[-1] // 2)   # a frame in the middle of the bulk transaction: a byte changed
    line = synced(src, target, twin_src, twin)
    # the pages of the 5 frames of "kept" SQLite folded, not those of the torn transaction it left out
    assert "pages compared: 5 pages changed since the snapshot kept from run" in line, line
    assert "(5 new WAL frames verified and folded by SQLite); 1 of 3 sessions re-planned" in line, line
    assert copy_rows(src, target) == source_rows(src)
    assert "kept 0" in contents(src) and not any(c.startswith("torn") for c in contents(src))


def test_a_main_file_that_contradicts_the_folded_frames_drops_the_kept_snapshot_for_a_whole_copy(world):
    src, target, twin_src, twin = world
    with gateway(src) as live:
        append(live, 2, "read")
        synced(src, target, twin_src, twin)
        bulk(live, "bulk")
        live.execute("PRAGMA wal_checkpoint(PASSIVE)")
        with open(src, "ab") as fh:   # a page the WAL's last commit does not count
            fh.write(bytes(4096))
        line = synced(src, target, twin_src, twin)
    assert "the kept snapshot was dropped: the main file changed otherwise than by a checkpoint of the WAL's " \
           "frames: " in line, line
    assert copy_rows(src, target) == source_rows(src)


def test_a_small_sync_reads_its_frames_even_when_an_older_generation_left_the_wal_file_large(world):
    """SQLite keeps a -wal file's size while the database is open: after a bulk import and a restart the file holds
    the new generation's few frames before the old one's many. Only the new generation's frames count."""
    src, target, twin_src, twin = world
    with gateway(src) as live:
        append(live, 2, "read")
        synced(src, target, twin_src, twin)
        bulk(live, "bulk")
        assert "verified and folded by SQLite" in synced(src, target, twin_src, twin)
        live.execute("PRAGMA wal_checkpoint(PASSIVE)")
        append(live, 1, "restarted")   # the WAL restarts from its first frame: the file keeps its size
        assert "of the new one read" in synced(src, target, twin_src, twin)
        append(live, 1, "small")
        assert os.path.getsize(f"{src}-wal") > wal._FOLD
        line = synced(src, target, twin_src, twin)
        assert "new WAL frames read)" in line and "SQLite" not in line, line
