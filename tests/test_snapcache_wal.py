"""The kept snapshot while lossless-claw writes to its WAL (lcm_etl/read/snapshot/snapcache.py): a re-run compares the
main file with the copy page by page and folds the WAL in, every page its frames name counted as changed, and
ends where the same runs without a kept snapshot end, whatever happened to the WAL (a checkpoint, a reset,
commits lost in a power cut). A copy changed behind its file identity never brings a row in.

lossless-claw holds its database open in WAL mode; `writer` does the same here (wal_autocheckpoint off, so a
checkpoint happens only where a test makes one)."""
from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import copy_fixture, migrate_api, migrate_json
from test_snapcache import APPEND, FIXTURE, forge_identity, kept, remnic_content, without_cache
from lcm_etl.read.snapshot import page_diff, wal, wal_fold, sqlite_copy as sources


@contextmanager
def writer(db: Path):
    con = sqlite3.connect(db, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA wal_autocheckpoint=0")
        yield con
    finally:
        con.close()


def salts(db: Path) -> bytes:
    """The salts in the header of the database's WAL (SQLite draws new ones each time it resets the WAL)."""
    return Path(f"{db}-wal").read_bytes()[16:24]


def append(con: sqlite3.Connection, n: int, tag: str) -> None:
    for k in range(n):
        con.execute(APPEND, (f"{tag} {k}", 1 + k % 3))


@pytest.fixture
def sources_pair(tmp_path):
    src, twin_src = copy_fixture(FIXTURE, tmp_path / "src"), copy_fixture(FIXTURE, tmp_path / "twin")
    return src, tmp_path / "out" / "lcm.sqlite", twin_src, tmp_path / "twin-out" / "lcm.sqlite"


def both(src: Path, target: Path, twin_src: Path, twin: Path) -> dict:
    """The run with the kept snapshot, and the same run of the twin without one: the targets agree."""
    report = migrate_json(src, target)
    without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
    assert remnic_content(target) == remnic_content(twin)
    return report


def test_rows_appended_to_the_wal_since_the_last_run_are_found_page_by_page(sources_pair):
    src, target, twin_src, twin = sources_pair
    with writer(src) as live, writer(twin_src) as twin_live:
        for con in (live, twin_live):
            append(con, 3, "before")
        first = both(src, target, twin_src, twin)
        main = src.read_bytes()
        for con in (live, twin_live):
            append(con, 5, "after")
        assert src.read_bytes() == main   # the new rows are in the WAL only
        report = both(src, target, twin_src, twin)
        line = report["sync_decision"]["line"]
        assert f"pages changed since the snapshot kept from run {first['run_id']} (25 new WAL frames read); " \
               "3 of 3 sessions re-planned" in line
        assert report["messages"]["inserted"] == 5


def test_a_summary_repaired_in_the_wal_re_plans_its_session_alone(sources_pair):
    src, target, twin_src, twin = sources_pair
    with writer(src) as live, writer(twin_src) as twin_live:
        both(src, target, twin_src, twin)
        summary = live.execute("SELECT summary_id FROM summaries ORDER BY summary_id LIMIT 1").fetchone()[0]
        for con in (live, twin_live):
            con.execute("UPDATE summaries SET content = content || ' (repaired)' WHERE summary_id = ?", (summary,))
        report = both(src, target, twin_src, twin)
        assert report["sync_decision"]["how"] == "pages compared"
        assert "1 of 3 sessions re-planned (1 conversations changed" in report["sync_decision"]["line"]
        assert report["summaries"]["updated"] == 1


def test_a_checkpoint_since_the_last_run_is_compared_page_by_page(sources_pair):
    src, target, twin_src, twin = sources_pair
    with writer(src) as live, writer(twin_src) as twin_live:
        both(src, target, twin_src, twin)
        for con in (live, twin_live):
            append(con, 4, "checkpointed")
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")   # the main file is written, the WAL emptied
        report = both(src, target, twin_src, twin)
        assert "pages changed since the snapshot kept" in report["sync_decision"]["line"]
        assert report["messages"]["inserted"] == 4


def test_a_wal_reset_since_the_last_run_is_compared_page_by_page(sources_pair):
    """Every frame checkpointed before the run, the WAL kept: the next write starts the WAL again under new salts
    without writing the main file."""
    src, target, twin_src, twin = sources_pair
    with writer(src) as live, writer(twin_src) as twin_live:
        for con in (live, twin_live):
            append(con, 2, "backfilled")
            con.execute("PRAGMA wal_checkpoint(PASSIVE)")
        both(src, target, twin_src, twin)
        was, main = salts(src), sources.file_signature(src)[0]
        for con in (live, twin_live):
            append(con, 3, "after the reset")
        assert salts(src) != was and sources.file_signature(src)[0] == main
        report = both(src, target, twin_src, twin)
        assert report["sync_decision"]["how"] == "pages compared"
        assert report["messages"]["inserted"] == 3


# a writer that commits twice, on pages of two tables, and dies (no checkpoint on close): the first commit's end
# is printed
DYING_WRITER = """
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA wal_autocheckpoint=0")
con.execute("UPDATE conversations SET title = 'kept' WHERE conversation_id = (SELECT min(conversation_id) FROM conversations)")
print(os.path.getsize(sys.argv[1] + "-wal"), flush=True)
con.execute("UPDATE messages SET content = 'lost in a power cut' WHERE message_id = 1")
os._exit(0)
"""


def test_commits_lost_from_the_wal_after_the_run_read_them_are_found_by_comparing(tmp_path):
    """A power cut under synchronous=NORMAL (lossless-claw's setting) loses the WAL's last commits, which the
    run had read; the writer then writes new frames where they were, under the same salts, and the main file
    is untouched. The kept copy must not keep the lost change: the copy is the source after the run."""
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    with writer(src):
        pass   # WAL mode; closing checkpoints: the main file holds everything
    script = tmp_path / "writer.py"
    script.write_text(DYING_WRITER)
    kept_end = int(subprocess.run([sys.executable, str(script), str(src)], capture_output=True, text=True,
                                  check=True).stdout)
    migrate_json(src, target)   # reads the lost commit
    os.truncate(f"{src}-wal", kept_end)   # the power cut: the unsynced commit is gone, the -shm rebuilt
    Path(f"{src}-shm").unlink()
    with writer(src) as live:
        # on another table's pages than the lost change: only a comparison finds that one
        live.execute("UPDATE summaries SET content = content || ' (after the reboot)' "
                     "WHERE summary_id = (SELECT min(summary_id) FROM summaries)")
        assert live.execute("SELECT content FROM messages WHERE message_id = 1").fetchone()[0] != "lost in a power cut"
        report = migrate_json(src, target)
        assert "pages changed since the snapshot kept" in report["sync_decision"]["line"]
        for table in ("messages", "summaries", "conversations"):
            assert live.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall() == \
                sqlite3.connect(kept(src, target).db).execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()


# a live source's history: rows appended to the WAL, summaries repaired there, checkpoints now and then
LIVE = {
    "append": lambda con, k: append(con, 1 + k % 3, f"live {k}"),
    "repair": lambda con, k: con.execute(
        "UPDATE summaries SET content = content || ? WHERE summary_id = "
        "(SELECT summary_id FROM summaries ORDER BY summary_id LIMIT 1 OFFSET ?)", (f" (repair {k})", k % 2)),
    "passive checkpoint": lambda con, k: con.execute("PRAGMA wal_checkpoint(PASSIVE)"),
    "truncate checkpoint": lambda con, k: con.execute("PRAGMA wal_checkpoint(TRUNCATE)"),
}


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(sorted(LIVE)), min_size=1, max_size=3), min_size=2, max_size=4))
def test_syncs_of_a_live_source_end_where_syncs_without_a_kept_snapshot_end(tmp_path_factory, rounds):
    """In-process runs (no interpreter start-up per run): the targets agree after every round."""
    folder = tmp_path_factory.mktemp("live")
    src, twin_src = copy_fixture(FIXTURE, folder / "src"), copy_fixture(FIXTURE, folder / "twin")
    target, twin = folder / "out" / "lcm.sqlite", folder / "twin-out" / "lcm.sqlite"
    with writer(src) as live, writer(twin_src) as twin_live:
        migrate_api(src, target)
        plain_api(twin_src, twin)
        for k, changes in enumerate(rounds):
            for con in (live, twin_live):
                for j, name in enumerate(changes):
                    LIVE[name](con, 3 * k + j)
            report = migrate_api(src, target)
            assert report["sync_decision"]["how"] in ("no-op", "pages compared"), report["sync_decision"]
            plain_api(twin_src, twin)
            assert remnic_content(target) == remnic_content(twin)


def plain_api(src: Path, dest: Path) -> None:
    """A run without a kept snapshot, in-process."""
    before = os.environ.get("LCM_ETL_CACHE_DIR")
    os.environ["LCM_ETL_CACHE_DIR"] = "off"
    try:
        migrate_api(src, dest)
    finally:
        if before is None:
            os.environ.pop("LCM_ETL_CACHE_DIR", None)
        else:
            os.environ["LCM_ETL_CACHE_DIR"] = before


PHANTOM = "a message the source never held"


def test_a_message_changed_in_the_kept_copy_behind_its_file_identity_is_never_imported(sources_pair):
    """A phantom message in the copy, its file identity forged, then the writer checkpoints and truncates its WAL (as
    the gateway does when it closes the store): the main file is compared whole, the page holding the phantom differs
    from the source's, so its conversation is re-planned from the source's rows. (While only the WAL grows, the
    copy's pages no frame names are vouched for by its seal, as the no-op shortcut vouches for all of them: a copy
    changed behind its identity is found at the next whole comparison; lcm_etl/read/snapshot/wal.py.)"""
    src, target, twin_src, twin = sources_pair
    with writer(src) as live, writer(twin_src) as twin_live:
        first = both(src, target, twin_src, twin)
        cache = kept(src, target)
        with sqlite3.connect(cache.db) as copy:   # conversation 2's first message, changed in the copy only
            copy.execute("UPDATE messages SET content = ? WHERE message_id = (SELECT min(message_id) FROM messages "
                         "WHERE conversation_id = 2)", (PHANTOM,))
        forge_identity(cache)
        for con in (live, twin_live):
            con.execute(APPEND, ("after", 2))   # conversation 2 grows
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        report = migrate_json(src, target)
        without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
        with sqlite3.connect(target) as con:
            assert con.execute("SELECT count(*) FROM lcm_messages WHERE content = ?", (PHANTOM,)).fetchone() == (0,)
        assert remnic_content(target) == remnic_content(twin)
        assert f"pages changed since the snapshot kept from run {first['run_id']} (the main file compared whole: " \
               "the main file changed and no WAL frame says how (a checkpoint, or a rollback-mode commit)); " \
               in report["sync_decision"]["line"]


@pytest.mark.parametrize("bulk", [False, True], ids=["one-by-one", "summed-in-bulk"])
@pytest.mark.parametrize("changed_frame", [None, 10, 400])
def test_a_sync_reads_a_long_wal_as_far_as_sqlite_itself_folds_it(tmp_path, monkeypatch, changed_frame, bulk):
    """Hundreds of frames, one of them changed on disk or none, their checksums verified one by one or summed in
    batches (as a WAL of tens of MB is: wal._BULK): the sync's chain ends at the last commit SQLite's own check
    accepts, and holds the pages SQLite folds."""
    monkeypatch.setattr(wal, "_BULK", 0 if bulk else 1 << 62)
    live, copy = tmp_path / "live.db", tmp_path / "copy.db"
    with writer(live) as con:
        con.execute("CREATE TABLE t (x)")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for _ in range(300):
            con.execute("INSERT INTO t VALUES (?)", (os.urandom(2500).hex(),))
        for side in ("", "-wal"):
            Path(f"{copy}{side}").write_bytes(Path(f"{live}{side}").read_bytes())
    if changed_frame is not None:
        with open(f"{copy}-wal", "r+b") as fh:
            fh.seek(32 + (changed_frame - 1) * (24 + 4096) + 24 + 1000)
            fh.write(b"\xff" if fh.read(1) != b"\xff" else b"\x00")
    w = wal.WalFile(Path(f"{copy}-wal"))
    spill = page_diff.SpilledPages(tmp_path / "spill")
    run = w.chain(1, w.salts, w.start, spill)
    w.close()
    folded = sources.fold_wal(copy, live, "source")
    assert len(run.checksums) // 8 == folded
    assert folded > 500 if changed_frame is None else changed_frame - 3 <= folded < changed_frame
    with open(copy, "rb") as fh:
        for n, data in spill.items():
            fh.seek((n - 1) * 4096)
            assert fh.read(4096)[100 if n == 1 else 0:] == data[100 if n == 1 else 0:]


def test_a_source_reached_through_a_symlink_has_the_wal_beside_the_file_it_names_read(tmp_path):
    """The -wal is beside the file a symlink names, not beside the link: commits only in it are neither a no-op nor
    missed by the kept snapshot."""
    src = copy_fixture(FIXTURE, tmp_path / "src")
    link = tmp_path / "link" / "lcm.db"
    link.parent.mkdir()
    link.symlink_to(src)
    target = tmp_path / "out" / "lcm.sqlite"
    with writer(src) as live:
        append(live, 1, "before")
        migrate_json(link, target)
        append(live, 2, "only in the WAL")
        report = migrate_json(link, target)
        assert (report["sync_decision"]["how"], report["messages"]["inserted"]) == ("pages compared", 2)
        append(live, 1, "again")
        report = migrate_json(link, target, "--full")
        assert report["messages"]["inserted"] == 1


def test_the_wal_is_copied_for_sqlite_to_fold_where_the_system_has_no_sendfile_between_files(tmp_path, monkeypatch):
    """macOS's sendfile writes only to sockets: the generation's frames are copied by reads and writes instead, up to
    the end asked and no further."""
    live = tmp_path / "live.db"
    with writer(live) as con:
        con.execute("CREATE TABLE t (x)")
        for _ in range(50):
            con.execute("INSERT INTO t VALUES (?)", (os.urandom(3000).hex(),))
        w = wal.WalFile(Path(f"{live}-wal"))
        end, salts, seq = w.generation_end(), w.salts.hex(), w.seq
        w.close()

        def no_sendfile(*args):
            raise OSError(errno.ENOTSOCK, "Socket operation on non-socket")
        monkeypatch.setattr(os, "sendfile", no_sendfile)
        # shutil.copyfile, the fallback, gives up its own sendfile for the process on ENOTSOCK: restored after
        monkeypatch.setattr(shutil, "_USE_CP_SENDFILE", shutil._USE_CP_SENDFILE)
        incoming = tmp_path / "incoming-wal"
        seen, why = wal_fold.copy(Path(f"{live}-wal"), incoming, wal.Fold(salts, seq, 0, end - 1, None, False),
                                  wal.Mark(salts, seq, ""), 4096)
        assert end > 50 and why == "" and seen is not None and len(seen.frames) == end - 1
        assert incoming.read_bytes() == Path(f"{live}-wal").read_bytes()[:32 + (end - 1) * (24 + 4096)]
