"""The no-op shortcut (lcm_etl/sync/shortcut.py): an unchanged source into an untouched target skips planning."""
from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import copy_fixture, migrate_api, run_cli
from lcm_etl.read.snapshot import wal


def migrate(src, dest, *extra) -> dict:
    proc = run_cli("migrate", "--src", src, "--dest", dest, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_rerun_of_an_unchanged_source_takes_the_shortcut_and_reports_the_same_totals(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    first = migrate(src, dest)
    again = migrate(src, dest)
    assert again["sync_decision"]["line"] == (f"no-op: source unchanged and target untouched since run "
                                              f"{first['run_id']}; --full re-plans everything")
    full = migrate(src, dest, "--full")
    assert full["sync_decision"]["line"] == "full plan: --full"
    for kind in ("messages", "parts", "summaries"):
        assert again[kind]["inserted"] == full[kind]["inserted"] == 0
        assert again[kind]["already_present"] == full[kind]["already_present"] == first[kind]["inserted"]
        assert again[kind]["skipped"] == full[kind]["skipped"] == first[kind]["skipped"]
    assert again["boundary_events"] == 0


def test_a_run_of_another_command_since_the_last_migrate_ends_the_shortcut_though_it_changed_no_row(tmp_path):
    """The shortcut vouches for the ledger's latest run only (docs/design.md's `no-op` row)."""
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    migrate(src, dest)
    (tmp_path / "empty").mkdir()
    assert run_cli("reconcile", "--sessions", tmp_path / "empty", "--dest", dest, "-q").returncode == 0
    assert migrate(src, dest)["sync_decision"]["line"].startswith("pages compared: 0 pages changed")


def test_a_changed_source_is_re_planned_by_its_changed_pages(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    first = migrate(src, dest)
    con = sqlite3.connect(src)
    with con:
        con.execute("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                    "VALUES (1, 500, 'user', 'one more', 2, '2026-12-01 00:00:00')")
    con.close()
    decided = (report := migrate(src, dest))["sync_decision"]
    assert (decided["how"], decided["since_run"], decided["conversations_changed"]) == \
        ("pages compared", first["run_id"], 1)
    assert decided["why"] == (f"{decided['pages_changed']} pages changed since the snapshot kept from run {first['run_id']} "
                              "(the main file compared whole: the main file changed and no WAL frame says how (a "
                              "checkpoint, or a rollback-mode commit))")
    assert report["messages"]["inserted"] == 1


def test_a_touched_target_re_plans_the_touched_session_and_repairs_it(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    first = migrate(src, dest)
    con = sqlite3.connect(dest)
    with con:
        con.execute("DELETE FROM lcm_compaction_events WHERE id = (SELECT min(id) FROM lcm_compaction_events)")
    con.close()
    decided = (report := migrate(src, dest))["sync_decision"]
    # the source is unchanged (its header page may differ from the folded copy's); the target's marks name the
    # session it lost a row of
    assert decided["line"] == (f"pages compared: {decided['pages_changed']} pages changed since the snapshot kept "
                               f"from run {first['run_id']} (the source's files are as the last sync found them); "
                               "1 of 2 sessions re-planned (0 conversations changed); --full re-plans everything")
    assert report["boundary_events"] == 1


def test_other_options_are_planned_in_full_and_say_why(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    first = migrate(src, dest)
    report = migrate(src, dest, "--key-by", "session-key")
    assert report["sync_decision"]["line"] == \
        f"full plan: the last migrate of this source, run {first['run_id']}, had another --key-by"


def test_a_dry_run_after_a_run_reports_what_the_real_run_then_does(tmp_path):
    src = copy_fixture("basic-0.9.4.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    migrate(src, dest)
    dry = migrate(src, dest, "--dry-run")
    real = migrate(src, dest)
    for kind in ("messages", "parts", "summaries"):
        assert dry[kind] == real[kind]


ONE_MORE = ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
            "VALUES (1, 501, 'user', 'within the same tick', 2, '2026-12-01 00:00:01')")


@pytest.mark.parametrize("journal", ["DELETE", "WAL"])
def test_a_commit_that_keeps_every_file_time_and_size_is_still_seen(tmp_path, monkeypatch, journal):
    """A commit within the clock tick of the last run's read can leave the files' times (and sizes) as they
    were: the shortcut is made to see identical signatures here, and must still notice the commit, by the
    database header's change counter (rollback journal) or the -wal's frames (WAL); so must the kept snapshot, which
    compares no page when the source's files are in the state its sealing run found them in (wal.file_state)."""
    monkeypatch.setattr(wal, "file_signature", lambda path: ["the same", "every time"])
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    con = sqlite3.connect(src, isolation_level=None)
    try:
        con.execute(f"PRAGMA journal_mode={journal}")
        con.execute("PRAGMA wal_autocheckpoint=0")   # WAL: the commit stays in the -wal, as lossless-claw's do
        migrate_api(src, dest)
        assert migrate_api(src, dest)["sync_decision"]["how"] == "no-op"   # nothing changed: the shortcut is taken
        con.execute(ONE_MORE)
        report = migrate_api(src, dest)
        assert report["sync_decision"]["how"] == "pages compared"
        assert report["messages"]["inserted"] == 1
    finally:
        con.close()
