"""The kept snapshot (lcm_etl/read/snapshot/snapcache.py, lcm_etl/read/snapshot/pages.py): a re-run compares the source with the previous
run's snapshot page by page and re-plans only the conversations owning a changed row. Each test changes a
migrated source the way lossless-claw (or a hand) does and checks what was read, what was re-planned, and
that the target is what the same re-run gives without a kept snapshot (LCM_ETL_CACHE_DIR=off)."""
from __future__ import annotations

import json
import marshal
import os
import shutil
import sqlite3
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lcm_etl import duck
from conftest import copy_fixture, migrate_json, run_cli
from undolib import digest
from lcm_etl.commands import migrate as migrate_module
from lcm_etl.read.lcmdb.source_tables import BY_NAME
from lcm_etl.read.snapshot import cache_bounds, page_diff, page_owners, pages, snapcache
from lcm_etl.read.snapshot import sqlite_copy as sources

FIXTURE = "basic-0.15.3.db"   # three conversations, one session each

APPEND = ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
          "SELECT conversation_id, max(seq) + 1, 'user', ?, 5, '2026-11-23 09:00:00' "
          "FROM messages WHERE conversation_id = ?")


def change(db: Path, sql: str, *args) -> None:
    con = sqlite3.connect(db)
    with con:
        con.execute(sql, args)
    con.close()


def sealed_run(cache: snapcache.SnapshotCache) -> str | None:
    """The run whose snapshot the kept copy is, as `lcm-etl cache` lists it: its seal, when it vouches for the copy."""
    return (cache_bounds.read_seal(cache.folder)[0] or {}).get("run_id")


def kept(src: Path, target: Path) -> snapcache.SnapshotCache:
    cache = snapcache.SnapshotCache.for_pair(src, target, BY_NAME)
    assert cache is not None
    return cache


def without_cache(*args: str) -> dict:
    proc = run_cli(*args, "--json", env={**os.environ, "LCM_ETL_CACHE_DIR": "off"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def remnic_content(target: Path) -> dict:
    return {k: v for k, v in digest(target).items() if not k.startswith("lcm_etl")}


@pytest.fixture
def pair(tmp_path):
    """A source migrated once into a target, and a twin of both that is synced without a kept snapshot."""
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    first = migrate_json(src, target)
    twin_src = copy_fixture(FIXTURE, tmp_path / "twin")
    twin = tmp_path / "twin-out" / "lcm.sqlite"
    without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
    return src, target, first["run_id"], twin_src, twin


def test_a_re_run_reads_the_changed_pages_and_re_plans_only_the_conversation_that_grew(pair):
    src, target, first_run, twin_src, twin = pair
    for db in (src, twin_src):
        change(db, APPEND, "one more", 2)
    report = migrate_json(src, target)
    assert f"pages changed since the snapshot kept from run {first_run}" in report["sync_decision"]["line"]
    assert "1 of 3 sessions re-planned (1 conversations changed)" in report["sync_decision"]["line"]
    assert report["messages"]["inserted"] == 1
    plain = without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
    assert plain["sync_decision"]["how"] == "marks"
    assert remnic_content(target) == remnic_content(twin)


def test_a_wal_copy_a_killed_run_left_beside_the_kept_snapshot_is_removed_by_the_next_run(pair):
    src, target, _, _, _ = pair
    left = kept(src, target).db.with_name("incoming-wal")   # refresh.INCOMING: killed before SQLite folded it
    left.write_bytes(b"\0" * 4096)
    report = migrate_json(src, target, "--full")   # the source unchanged: the kept copy is used as it is
    assert sealed_run(kept(src, target)) == report["run_id"]
    assert not left.exists()
    assert sorted(p.name for p in left.parent.iterdir()) == ["layout.marshal", "pair.json", "seal.json", "snapshot.db"]


def test_the_kept_snapshot_holds_the_source_as_the_run_read_it(pair):
    src, target, _, _, _ = pair
    change(src, APPEND, "x" * 20_000, 3)   # a new row with overflow pages
    report = migrate_json(src, target)
    snapshot = kept(src, target)
    assert sealed_run(snapshot) == report["run_id"]
    tables = ("conversations", "messages", "message_parts", "summaries", "summary_messages", "summary_parents")
    for table in tables:
        with sqlite3.connect(src) as a, sqlite3.connect(snapshot.db) as b:
            assert a.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall() == \
                   b.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall(), table


def test_a_re_run_of_an_unchanged_source_with_full_reads_it_whole(pair):
    src, target, _, _, _ = pair
    report = migrate_json(src, target, "--full")
    assert report["sync_decision"]["how"] == "full plan"
    assert sealed_run(kept(src, target)) == report["run_id"]


def test_a_value_rewritten_in_its_overflow_pages_only_is_a_full_plan_that_updates_it(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    summary = sqlite3.connect(src).execute("SELECT summary_id FROM summaries ORDER BY summary_id LIMIT 1").fetchone()[0]
    change(src, "UPDATE summaries SET content = ? WHERE summary_id = ?", "x" * 30_000, summary)
    change(src, "PRAGMA wal_checkpoint(TRUNCATE)")   # the WAL would name the leaf too: the main file alone
    migrate_json(src, target)
    # same length: SQLite overwrites the payload in place, so only an overflow page differs, not the leaf
    change(src, "UPDATE summaries SET content = ? WHERE summary_id = ?", "x" * 29_990 + "y" * 10, summary)
    change(src, "PRAGMA wal_checkpoint(TRUNCATE)")
    report = migrate_json(src, target)
    assert report["sync_decision"]["how"] == "full plan"
    assert report["sync_decision"]["line"].endswith("changed pages: 1 changed pages are not rows lcm-etl can place")
    assert report["summaries"]["updated"] == 1
    with sqlite3.connect(target) as con:
        assert con.execute("SELECT summary_text FROM lcm_summary_nodes WHERE summary_text LIKE '%yyyyyyyyyy'"
                           ).fetchone() is not None


def test_a_kept_snapshot_touched_behind_lcm_etls_back_is_not_trusted_and_the_report_says_so(pair):
    src, target, first_run, _, _ = pair
    snapshot = kept(src, target)
    os.utime(snapshot.db)   # its ctime moves; a forged mtime could not hide that
    change(src, APPEND, "one more", 2)
    report = migrate_json(src, target)
    assert report["sync_decision"]["line"] == (
        f"marks: the source's marks compared with those of run {first_run} (the kept snapshot was dropped: its file "
        "was changed since it was sealed); 1 of 3 sessions re-planned (1 conversations changed); --full re-plans "
        "everything")   # the marks decide instead
    assert sealed_run(snapshot) == report["run_id"]


def test_a_run_that_fails_after_refreshing_the_snapshot_leaves_it_unsealed(pair, monkeypatch):
    src, target, _, _, _ = pair
    change(src, APPEND, "one more", 2)

    def fails(job, strategy, now):
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(migrate_module, "load", fails)
    with pytest.raises(RuntimeError):
        migrate_module.migrate(migrate_module.MigrateOptions(src=src, target=target))
    assert sealed_run(kept(src, target)) is None
    report = migrate_json(src, target)   # copies the source whole, compares marks, converges
    assert report["sync_decision"]["how"] == "marks" and report["messages"]["inserted"] == 1


def test_a_dry_run_leaves_the_kept_snapshot_as_it_was(pair):
    src, target, first_run, _, _ = pair
    snapshot = kept(src, target)
    before = (snapshot.db.read_bytes(), snapshot.seal_file.read_bytes())
    change(src, APPEND, "one more", 2)
    proc = run_cli("migrate", "--src", src, "--dest", target, "--dry-run", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["messages"]["inserted"] == 1
    assert (snapshot.db.read_bytes(), snapshot.seal_file.read_bytes()) == before
    assert sealed_run(snapshot) == first_run


def test_with_the_cache_off_no_copy_is_kept(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    cache = tmp_path / "cache"
    proc = run_cli("migrate", "--src", src, "--dest", tmp_path / "out.sqlite", "-q",
                   env={**os.environ, "LCM_ETL_CACHE_DIR": "off"})
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("migrate", "--src", src, "--dest", tmp_path / "out2.sqlite", "-q",
                   env={**os.environ, "LCM_ETL_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    pairs = [p for p in cache.iterdir() if p.name != duck.VERIFIED_FOLDER]
    assert pairs and all((p / "seal.json").exists() for p in pairs)
    assert sealed_run(snapcache.SnapshotCache.for_pair(src, tmp_path / "out.sqlite", BY_NAME)) is None


def test_pages_that_differ_are_found_and_an_identical_copy_has_none(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    copy = tmp_path / "copy.db"
    with sqlite3.connect(src) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copyfile(src, copy)
    with pages.PageFile(src) as a, pages.PageFile(copy) as b:
        assert differing(a, b, 10, tmp_path) == {}
    change(src, APPEND, "y" * 9000, 1)
    with sqlite3.connect(src) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with pages.PageFile(src) as a, pages.PageFile(copy) as b:
        diff = differing(a, b, 1000, tmp_path)
        assert diff and all(data == a.page(n) for n, data in diff.items())
        assert differing(a, b, 0, tmp_path) is None   # over the limit: not worth proving


def differing(new: pages.PageFile, old: pages.PageFile, limit: int, folder: Path) -> dict | None:
    """page_diff.differing_pages as a dict (page -> its new bytes, read back from the file they wait in)."""
    with page_diff.SpilledPages(folder / "differing-pages") as spill:
        return dict(spill.items()) if page_diff.differing_pages(new, old, limit, spill) else None



def test_the_changed_pages_wait_in_a_file_until_written_not_in_memory(tmp_path, monkeypatch):
    # a re-run of the 2M source after 1 % growth held the 190 MB of its changed pages in the heap, where they
    # stayed under the plan's DuckDB: its peak was twice a first run's. Only the first HELD bytes stay in memory (a
    # watch's sync of a few hundred KB of WAL frames): a smaller bound here, under this fixture's 3 MB of pages
    monkeypatch.setattr(page_diff, "HELD", 256 << 10)
    src = copy_fixture(FIXTURE, tmp_path / "src")
    def grow(rows: int) -> None:
        con = sqlite3.connect(src)
        with con:
            con.executemany(APPEND, [(f"{k} " + "y" * 3000, 1 + k % 3) for k in range(rows)])
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")   # the growth in the main file: compared page by page
        con.close()
    grow(16_000)   # 50 MB: growth of a tenth of it or less is compared page by page
    target = tmp_path / "out" / "lcm.sqlite"
    migrate_json(src, target)
    grow(1_000)
    cache = kept(src, target)
    tracemalloc.start()
    try:
        snap, changes = cache.snapshot()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    snap.close()
    with pages.PageFile(src) as pf:
        changed_bytes, buffers = changes.pages * pf.page_size if changes else 0, 2 * page_diff._CHUNK_PAGES * pf.page_size
    assert changes is not None and changes.owners == {"1", "2", "3"} and changed_bytes > 3_000_000
    assert peak < buffers + page_diff.HELD + changed_bytes / 4, (peak, buffers, changed_bytes)   # two read buffers


def _page_file(path: Path, pages_: int) -> None:
    """A file that PageFile reads as a SQLite database of 512-byte pages: a real header, then noise."""
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA page_size = 512")
        con.execute("CREATE TABLE t (x)")
    head = path.read_bytes()[:512]
    path.write_bytes(head + os.urandom(512 * (pages_ - 1)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 1400), st.integers(-300, 300),
       st.lists(st.tuples(st.integers(2, 1700), st.integers(0, 511)), max_size=40))
def test_differing_pages_finds_exactly_the_pages_whose_bytes_differ(tmp_path_factory, size, grown, flips):
    """Files of several 256-page chunks (each file half compared by its own thread), changed anywhere:
    the answer is the page-by-page comparison, whatever the blocks and halves the search goes through."""
    folder = tmp_path_factory.mktemp("pages")
    old, new = folder / "old.db", folder / "new.db"
    _page_file(old, size)
    body = bytearray(old.read_bytes())
    body = body + os.urandom(512 * grown) if grown > 0 else body[:max(512, len(body) + 512 * grown)]
    for page, at in flips:
        if (page - 1) * 512 + at < len(body):
            body[(page - 1) * 512 + at] ^= 0xFF
    new.write_bytes(bytes(body))
    a, b = old.read_bytes(), bytes(body)
    want = {n: b[(n - 1) * 512: n * 512] for n in range(1, len(b) // 512 + 1)
            if b[(n - 1) * 512: n * 512] != a[(n - 1) * 512: n * 512]}
    want.update({n: b"" for n in range(len(b) // 512 + 1, len(a) // 512 + 1)})
    with pages.PageFile(new) as pn, pages.PageFile(old) as po:
        assert differing(pn, po, len(want), folder) == want
        if want:
            assert differing(pn, po, len(want) - 1, folder) is None

CHANGES = {
    "append": lambda con, k: con.execute(APPEND, (f"grown {k}", 1 + k % 3)),
    "retitle": lambda con, k: con.execute("UPDATE conversations SET title = ? WHERE conversation_id = ?",
                                          (f"title {k}", 1 + k % 3)),
    "prune": lambda con, k: con.execute("DELETE FROM messages WHERE message_id = (SELECT max(message_id) FROM "
                                        "messages WHERE conversation_id = ? AND role = 'assistant')", (1 + k % 3,)),
    "entry id": lambda con, k: con.execute("UPDATE messages SET transcript_entry_id = ? WHERE message_id = "
                                           "(SELECT min(message_id) FROM messages WHERE conversation_id = ? "
                                           "AND transcript_entry_id IS NULL)", (f"entry-{k}", 1 + k % 3)),
    "repair": lambda con, k: con.execute("UPDATE summaries SET content = content || ? WHERE summary_id = "
                                         "(SELECT summary_id FROM summaries WHERE conversation_id = ? "
                                         "ORDER BY summary_id LIMIT 1)", (f" (repaired {k})", 1 + k % 3)),
}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(sorted(CHANGES)), min_size=1, max_size=3), min_size=1, max_size=3))
def test_syncs_with_a_kept_snapshot_end_where_syncs_without_one_end(tmp_path_factory, rounds):
    folder = tmp_path_factory.mktemp("sync")
    src = copy_fixture(FIXTURE, folder / "src")
    twin_src = copy_fixture(FIXTURE, folder / "twin")
    target, twin = folder / "out" / "lcm.sqlite", folder / "twin-out" / "lcm.sqlite"
    migrate_json(src, target)
    without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
    k = 0
    for changes in rounds:
        for db in (src, twin_src):
            con = sqlite3.connect(db)
            with con:
                for j, name in enumerate(changes):
                    CHANGES[name](con, k + j)
            con.close()
        k += len(changes)
        migrate_json(src, target)
        without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
        assert remnic_content(target) == remnic_content(twin)
        assert_kept_layout_is_the_copys(kept(src, target))
        assert_sealed_by_the_last_run(kept(src, target), target)


def assert_kept_layout_is_the_copys(cache: snapcache.SnapshotCache) -> None:
    """The interior pages kept with the seal are parsed as a fresh walk of the copy parses them."""
    memo, fresh = cache._sealed_memo(), page_owners.interior_pages(cache.db, BY_NAME)
    assert fresh and memo, "the copy has interior pages and the seal keeps them"
    assert {n: memo.get(n) for n in fresh} == fresh


def assert_sealed_by_the_last_run(cache: snapcache.SnapshotCache, target: Path) -> None:
    """The seal names the last complete run of the target's ledger: the run whose snapshot the copy is."""
    with sqlite3.connect(target) as con:
        last = con.execute("SELECT run_id FROM lcm_etl_runs WHERE status = 'complete' "
                           "ORDER BY started_at DESC, rowid DESC LIMIT 1").fetchone()[0]
    assert sealed_run(cache) == last


def test_rows_a_live_writer_holds_in_the_wal_are_read_page_by_page(pair):
    """Rows a live writer holds in the -wal only reach the copy when it is folded: their pages count as changed."""
    src, target, first_run, _, _ = pair
    writer = sqlite3.connect(src, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")   # the rows stay in the -wal while the run reads them
        for k in range(20):
            writer.execute(APPEND, (f"in the wal {k} " + "w" * 3000, 1 + k % 3))
        assert Path(f"{src}-wal").stat().st_size > 20 * 4096
        report = migrate_json(src, target)
        assert f"pages changed since the snapshot kept from run {first_run}" in report["sync_decision"]["line"]
        assert report["messages"]["inserted"] == 20
        assert_sealed_by_the_last_run(kept(src, target), target)
    finally:
        writer.close()


def test_a_kept_layout_is_used_only_with_the_copy_it_was_parsed_from(pair):
    src, target, _, _, _ = pair
    cache = kept(src, target)
    assert_kept_layout_is_the_copys(cache)
    os.utime(cache.db)   # the copy is no longer the one sealed
    assert cache._sealed_memo() == {}


def test_a_kept_layout_is_held_in_memory_as_about_the_bytes_it_is_kept_in(tmp_path):
    # as Python ints, the 4,584 interior pages of the 2M source held 83 MB through the whole re-run
    src = copy_fixture(FIXTURE, tmp_path / "src")
    con = sqlite3.connect(src)
    with con:
        con.executemany(APPEND, [(f"{k} " + "y" * 300, 1 + k % 3) for k in range(20_000)])
    con.close()
    target = tmp_path / "out" / "lcm.sqlite"
    migrate_json(src, target)
    cache = kept(src, target)
    tracemalloc.start()
    try:
        memo = cache._sealed_memo()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(memo) > 10 and held < 2 * cache.memo_file.stat().st_size, (len(memo), held)


def test_a_summary_repaired_while_its_pages_are_in_the_wal_is_found_page_by_page(pair):
    src, target, first_run, _, _ = pair
    summary = sqlite3.connect(src).execute("SELECT summary_id FROM summaries ORDER BY summary_id LIMIT 1").fetchone()[0]
    change(src, "UPDATE summaries SET content = content || ' (repaired)' WHERE summary_id = ?", summary)
    report = migrate_json(src, target)
    assert f"since the snapshot kept from run {first_run}" in report["sync_decision"]["line"]
    assert "1 of 3 sessions re-planned (1 conversations changed" in report["sync_decision"]["line"]
    assert report["summaries"]["updated"] == 1


def test_a_source_with_deep_b_trees_grows_and_the_kept_layout_follows_it(tmp_path):
    """A generated source large enough for three-level b-trees: two growth steps re-plan from the kept
    snapshot (its interior pages parsed once, then only the changed ones) and end where runs without a
    kept snapshot end."""
    import subprocess
    import sys
    from conftest import ROOT
    full = tmp_path / "full.db"
    subprocess.run([sys.executable, str(ROOT / "fixtures" / "generate.py"), str(full), "--messages", "6000",
                    "--force"], check=True, capture_output=True)
    steps = [tmp_path / f"step{k}.db" for k in (0, 1)]
    for share, out in zip((0.02, 0.005), steps):
        subprocess.run([sys.executable, str(ROOT / "tests" / "tools" / "earlier.py"), str(full), str(out),
                        "--shape", "tail", "--share", str(share)], check=True, capture_output=True)
    src, twin_src = tmp_path / "src.db", tmp_path / "twin.db"
    target, twin = tmp_path / "out" / "lcm.sqlite", tmp_path / "twin-out" / "lcm.sqlite"
    for k, state in enumerate((*steps, full)):
        for db in (src, twin_src):
            shutil.copyfile(state, db)
        report = migrate_json(src, target)
        without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
        if k:
            assert "pages changed since the snapshot kept from run" in report["sync_decision"]["line"]
            assert report["sync_decision"]["sessions_replanned"] is not None, report["sync_decision"]
        assert remnic_content(target) == remnic_content(twin)
        cache = kept(src, target)
        assert_kept_layout_is_the_copys(cache)
        assert_sealed_by_the_last_run(cache, target)
        with pages.PageFile(cache.db) as pf:
            assert len(cache._sealed_memo()) > 20 and pf.pages > 1000   # deep enough to be worth it


def forge_identity(cache: snapcache.SnapshotCache) -> None:
    """The kept copy's bytes changed while lcm-etl's record of its file says it did not: the seal and the kept
    layout are re-stamped with the file's new identity (as a disk that rots a block, or a restore that keeps
    the times, leaves it)."""
    import orjson

    signature = sources.file_signature(cache.db)[0]
    seal = orjson.loads(cache.seal_file.read_bytes())
    cache.seal_file.write_bytes(orjson.dumps({**seal, "signature": signature}))
    if cache.memo_file.exists():
        cache.memo_file.write_bytes(marshal.dumps((signature, marshal.loads(cache.memo_file.read_bytes())[1])))


def test_a_kept_copy_changed_behind_its_file_identity_costs_a_re_plan_never_a_wrong_row(pair):
    """A byte rots in the middle of the kept copy, its identity kept: every page is compared with the source,
    so the run ends where a run without the kept copy ends."""
    src, target, _, twin_src, twin = pair
    cache = kept(src, target)
    with open(cache.db, "r+b") as fh:
        fh.seek(cache.db.stat().st_size // 2 + 100)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))
    forge_identity(cache)
    for db in (src, twin_src):
        change(db, APPEND, "one more", 2)
    report = migrate_json(src, target)
    without_cache("migrate", "--src", str(twin_src), "--dest", str(twin))
    assert report["sync_decision"]["how"] in ("pages compared", "full plan"), report["sync_decision"]
    assert remnic_content(target) == remnic_content(twin)
