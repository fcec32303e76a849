"""A session store's kept snapshot (lcm_etl/read/openclaw/openclaw_store.py, lcm_etl/read/snapshot/snapcache.py): a
re-run copies only the store's pages that changed and counts only the windows whose rows changed; every other
window is taken from its record, and a window changed in any other way than an append still reads whole."""
from __future__ import annotations

import json
import os
import re
import sqlite3
from pathlib import Path

from conftest import ROOT, folder_state, run_cli
from storelib import StoreWriter, session_entries, state_copy, store_of

PLAIN, GROUP = "0198a1b2-0001-7c3d-8e4f-a1b2c3d4e501", "0198a1b2-0008-7c3d-8e4f-a1b2c3d4e508"


def env_for(tmp_path: Path, cache: str | None = None) -> dict:
    return {**os.environ, "LCM_ETL_CACHE_DIR": cache or str(tmp_path / "cache")}


def reconcile(env: dict, *args) -> dict:
    proc = run_cli("reconcile", "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def windows(report: dict) -> dict[str, dict]:
    return {f["window"]: f for f in report["extra"]["files"] if f["kind"] == "window"}


def kept_note(report: dict) -> str:
    [store] = report["extra"]["stores"]
    return store["kept_snapshot"]


def setup(tmp_path: Path) -> tuple[Path, Path, dict, dict]:
    """The native fixture's main store reconciled once into a new target, its snapshot kept: (store, target, env,
    the first report)."""
    state = state_copy("native", tmp_path / "state")
    store, target, env = store_of(state, "main"), tmp_path / "t.sqlite", env_for(tmp_path)
    first = reconcile(env, "--sessions", store, "--dest", target)
    assert kept_note(first) == "copied whole (none kept yet), every window counted"
    return store, target, env, first


def test_a_second_sync_of_an_unchanged_store_reads_no_window_and_counts_none(tmp_path, monkeypatch):
    from lcm_etl.commands import reconcile as command
    from lcm_etl.read.openclaw.openclaw_store import OpenStore

    store, target, env, first = setup(tmp_path)
    before = folder_state(store.parent)
    monkeypatch.setenv("LCM_ETL_CACHE_DIR", env["LCM_ETL_CACHE_DIR"])
    counted: list = []   # the windows whose rows were counted, each time some were (None: every window)
    counts = OpenStore._counts
    monkeypatch.setattr(OpenStore, "_counts", lambda self, which: counted.append(which) or counts(self, which))
    again = command.reconcile(command.ReconcileOptions(sessions=[str(store)], target=target)).as_dict()
    assert counted == [set()]
    assert re.fullmatch(rf"\d+ pages changed since run {first['run_id']} \(.*\): 0 windows' rows changed", kept_note(again))
    assert {(f["read"], f["lines_read"], f["imported"]) for f in windows(again).values()} == {("appended", 0, 0)}
    assert len(windows(again)) == 9 and again["messages"]["inserted"] == 0
    assert again["sync_decision"]["line"].startswith("offsets: 10 of 10 transcripts read from where the last run")
    assert folder_state(store.parent) == before   # the store's bytes, and no file made beside it
    third = reconcile(env, "--sessions", store, "--dest", target)   # sealed by the second run in turn
    assert re.fullmatch(rf"\d+ pages changed since run {again['run_id']} \(.*\): 0 windows' rows changed", kept_note(third))


def test_a_window_appended_to_is_read_from_its_record_and_lands_its_rows(tmp_path):
    store, target, env, _ = setup(tmp_path)
    writer = StoreWriter(store)
    try:
        new = writer.append(PLAIN, ["one more question", "one more answer", "and a third", "and a fourth"])
        report = reconcile(env, "--sessions", store, "--dest", target)
    finally:
        writer.close()
    assert kept_note(report).endswith(": 1 windows' rows changed")
    files = windows(report)
    assert (files[PLAIN]["read"], files[PLAIN]["lines_read"], files[PLAIN]["imported"]) == ("appended", 4, 4)
    assert {(f["read"], f["lines_read"]) for w, f in files.items() if w != PLAIN} == {("appended", 0)}
    assert [i for i, _, _ in session_entries(target, PLAIN)][-4:] == new
    # the same as a run that keeps no snapshot and counts every window
    fresh = tmp_path / "fresh.sqlite"
    reconcile(env_for(tmp_path, "off"), "--sessions", store, "--dest", fresh)
    assert session_entries(fresh, PLAIN) == session_entries(target, PLAIN)


def test_a_window_rewritten_in_place_or_started_over_is_read_whole(tmp_path):
    store, target, env, _ = setup(tmp_path)
    writer = StoreWriter(store)
    try:
        first_user = session_entries(target, GROUP)[0]
        writer.rewrite(GROUP, first_user[0], "Conversation info (untrusted metadata):", "Conversation info: ⟦x⟧")
        writer.con.execute("DELETE FROM transcript_events WHERE session_id = ? AND seq > 2", (PLAIN,))
        report = reconcile(env, "--sessions", store, "--dest", target)
    finally:
        writer.close()
    assert kept_note(report).endswith(": 2 windows' rows changed")
    files = windows(report)
    assert (files[GROUP]["read"], files[GROUP]["why"]) == ("whole", "rewritten in place (watermark changed)")
    assert (files[PLAIN]["read"], files[PLAIN]["why"]) == ("whole", "the window started over")
    assert files[PLAIN]["lines_read"] == 3   # seq 0..2: the window's count made again, not the kept one


def test_after_an_undo_or_under_another_src_every_window_is_read_whole(tmp_path):
    store, target, env, first = setup(tmp_path)
    undone = run_cli("undo", first["run_id"], "--dest", target, "--json", env=env)
    assert undone.returncode == 0, undone.stderr
    report = reconcile(env, "--sessions", store, "--dest", target)
    assert kept_note(report).endswith(": 0 windows' rows changed")
    assert {(f["read"], f["why"]) for f in windows(report).values()} == {
        ("whole", "its last run was undone or did not complete")}
    assert report["messages"]["inserted"] == first["messages"]["inserted"]   # what the undo removed lands again
    src = ROOT / "fixtures" / "lossless-claw" / "basic-1.0.0-beta.4.db"
    other = reconcile(env, "--sessions", store, "--src", src, "--dest", target)
    assert kept_note(other).endswith(": 0 windows' rows changed")
    assert {(f["read"], f["why"]) for f in windows(other).values()} == {
        ("whole", "recorded under another --key-by or --src")}


def test_cache_lists_the_stores_snapshot_and_a_dry_run_keeps_none(tmp_path):
    state = state_copy("native", tmp_path / "state")
    store, target = store_of(state, "main"), tmp_path / "t.sqlite"
    env = env_for(tmp_path)
    dry = reconcile(env, "--sessions", store, "--dest", target, "--dry-run")
    assert kept_note(dry) == "none kept (a dry run, or the cache is off): copied whole, every window counted"
    assert not (tmp_path / "cache").exists() and not target.exists()
    first = reconcile(env, "--sessions", store, "--dest", target)
    listed = run_cli("cache", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [kept] = json.loads(listed.stdout)["snapshots"]
    assert (kept["source"], kept["target"], kept["state"], kept["sealed_run"]) == (
        str(store.resolve()), str(target.resolve()), "sealed", first["run_id"])
    files = {p: p.read_bytes() for p in Path(kept["folder"]).iterdir()}
    reconcile(env, "--sessions", store, "--dest", target, "--dry-run")   # a dry run changes nothing kept either
    assert {p: p.read_bytes() for p in Path(kept["folder"]).iterdir()} == files


def test_a_failed_run_leaves_no_copy_and_the_next_copies_whole(tmp_path):
    store, target, env, _ = setup(tmp_path)
    con = sqlite3.connect(target)   # the run reads the store, plans, and fails as it writes
    con.execute("DROP TABLE lcm_messages")
    con.close()
    failed = run_cli("reconcile", "--json", "--sessions", store, "--dest", target, env=env)
    assert failed.returncode == 1
    assert f"lcm-etl: error: writing {target} failed: no such table: main.lcm_messages" in failed.stderr
    listed = json.loads(run_cli("cache", "--json", env=env).stdout)
    assert listed["snapshots"] == []


def test_a_session_filter_naming_a_session_with_nothing_new_is_known_and_an_unknown_one_is_still_refused(tmp_path):
    """The filter is checked against every transcript's session, read from its record with nothing new or not."""
    store, target, env, first = setup(tmp_path)
    again = reconcile(env, "--sessions", store, "--dest", target, "--session-filter", PLAIN)
    assert windows(again)[PLAIN]["lines_read"] == 0 and again["messages"]["inserted"] == 0
    proc = run_cli("reconcile", "--sessions", store, "--dest", target, "--session-filter", "nope", env=env)
    assert proc.returncode == 2
    assert proc.stderr.startswith("lcm-etl: error: unknown --session-filter 'nope': no transcript holds that session")


def test_a_store_in_the_state_the_sealing_run_found_it_in_is_not_compared_page_by_page(tmp_path, monkeypatch):
    """Its files' identity, header and -wal frames as the last run found them before it read them (wal.file_state,
    the no-op shortcut's proof): no page can differ, and none of the store's pages is read. One event appended by a
    writer holding the store open: its WAL frames are read, the main file still not compared (wal.py)."""
    from lcm_etl.commands import reconcile as command
    from lcm_etl.read.snapshot import page_diff

    store, target, env, _ = setup(tmp_path)
    monkeypatch.setenv("LCM_ETL_CACHE_DIR", env["LCM_ETL_CACHE_DIR"])
    compared: list = []
    differing = page_diff.differing_pages
    monkeypatch.setattr(page_diff, "differing_pages", lambda *a: compared.append(a) or differing(*a))
    opts = command.ReconcileOptions(sessions=[str(store)], target=target)
    again = command.reconcile(opts)
    assert compared == [] and again.messages.inserted == 0
    assert again.extra["stores"][0]["kept_snapshot"].startswith("0 pages changed since run ")
    writer = StoreWriter(store)
    try:
        writer.append(PLAIN, ["one more question"])
        third = command.reconcile(opts)
    finally:
        writer.close()
    assert compared == [] and third.messages.inserted == 1
    assert "WAL frames read" in kept_note({"extra": third.extra})
    assert kept_note({"extra": third.extra}).endswith(": 1 windows' rows changed")


def test_a_sync_from_the_wal_reads_each_page_of_the_kept_copy_once_and_writes_no_spill_file(tmp_path, monkeypatch):
    """The rows of the changed pages placed in the copy before they are written and after (refresh.py): the pages
    above them (parents, the pointer map) are the same bytes both times and are read once, the changed pages' new
    bytes are the WAL frames read (kept in memory, not written to the spill file and read back), and a changed
    leaf's overflow pages are looked for on the bytes read already."""
    from lcm_etl.commands import reconcile as command
    from lcm_etl.read.snapshot import refresh

    store, target, env, _ = setup(tmp_path)
    monkeypatch.setenv("LCM_ETL_CACHE_DIR", env["LCM_ETL_CACHE_DIR"])
    opts = command.ReconcileOptions(sessions=[str(store)], target=target)
    command.reconcile(opts)   # sealed with the WAL frames it read
    reads: list[tuple[str, int, int]] = []
    pread, place = os.pread, refresh.Refresh._place

    def recorded(fd, n, at):
        reads.append((os.readlink(f"/proc/self/fd/{fd}"), n, at))
        return pread(fd, n, at)

    def placing(*args, **kwargs):
        monkeypatch.setattr(os, "pread", recorded)
        try:
            return place(*args, **kwargs)
        finally:
            monkeypatch.setattr(os, "pread", pread)

    monkeypatch.setattr(refresh.Refresh, "_place", placing)
    writer = StoreWriter(store)
    try:
        writer.append(PLAIN, ["one more question", "and another"])
        again = command.reconcile(opts)
    finally:
        writer.close()
    assert again.messages.inserted == 2 and "new WAL frames read" in kept_note({"extra": again.extra})
    pages_read = [(n, at) for path, n, at in reads if path.endswith("snapshot.db") and n == 4096]
    assert pages_read and len(pages_read) == len(set(pages_read))
    assert not [r for r in reads if "differing-pages" in r[0]] and not list(Path(tmp_path).rglob("differing-pages"))


def test_the_pointer_map_places_every_page_of_a_store_where_the_walk_of_its_trees_does(tmp_path):
    """pages._by_pointer_map (an auto-vacuum file: OpenClaw's stores) against pages.layout's walk of every b-tree
    from its root, for every page of the native store: the same tree for each b-tree page, the same table leaves
    (each one's rowids within the range its parents give it) and the same free pages."""
    from lcm_etl.read.snapshot import page_owners, pages

    store = store_of(state_copy("native", tmp_path / "state"), "main")
    with sqlite3.connect(store) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")   # every page in the main file
        con.execute("DELETE FROM transcript_events WHERE session_id = ?", (GROUP,))   # free pages
    con.close()
    with sqlite3.connect(f"{store.as_uri()}?mode=ro", uri=True) as con:
        roots = page_owners._trees(con, {})[0]
    con.close()
    with pages.PageFile(store) as pf:
        assert pf.auto_vacuum
        every = set(range(1, pf.pages + 1))
        mapped = pages._by_pointer_map(pf, roots, every)
        pf.auto_vacuum = False   # the walk
        walked = pages.layout(pf, roots, every, {})
    assert mapped.btree == walked.btree and mapped.free == walked.free and mapped.free
    assert mapped.leaves.keys() == walked.leaves.keys()
    for n, leaf in mapped.leaves.items():
        bound = walked.leaves[n]
        assert leaf.tree == bound.tree
        assert bound.lo is None or (leaf.lo is not None and bound.lo <= leaf.lo)
        assert bound.hi is None or (leaf.hi is not None and leaf.hi <= bound.hi)


def test_the_pages_of_a_large_values_overflow_chain_are_counted_not_kept_in_memory(tmp_path):
    """A changed leaf's large value (a tool output of megabytes) is placed by its overflow chain's page numbers: each
    page's 4-byte link is read and dropped, where keeping every page the walk read (PageFile.known) held the value."""
    from lcm_etl.read.snapshot import page_owners, pages

    db = tmp_path / "av.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA auto_vacuum = FULL")
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)")
        con.execute("INSERT INTO t VALUES (1, zeroblob(4000000)), (2, 'small')")
    con.close()
    with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as con:
        roots, table_of = page_owners._trees(con, {})
    con.close()
    leaf = next(root for root, name in table_of.items() if name == "t")   # its two rows fit on one page
    with pages.PageFile(db, known={}) as pf:
        assert pf.auto_vacuum and pf.known is not None
        lay = pages.layout(pf, roots, {leaf})
        chain = pages.overflow_pages(pf, leaf)
        assert leaf in lay.leaves and len(chain) == (4_000_000 - 2_116) // 4_092   # every page but the leaf's 2,116 bytes
        assert len(pf.known) <= 3   # the leaf and the pointer-map page (held before: the chain's 978 as well)
