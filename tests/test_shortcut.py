"""The no-op shortcut (lcm_etl/planning/shortcut.py): an unchanged source into an untouched target skips planning."""
from __future__ import annotations

import json
import sqlite3

from conftest import copy_fixture, run_cli


def migrate(src, dest, *extra) -> dict:
    proc = run_cli("migrate", "--src", src, "--dest", dest, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_rerun_of_an_unchanged_source_takes_the_shortcut_and_reports_the_same_totals(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    first = migrate(src, dest)
    again = migrate(src, dest)
    assert "shortcut" in again["extra"]
    full = migrate(src, dest, "--full")
    assert "shortcut" not in full["extra"]
    for kind in ("messages", "parts", "summaries"):
        assert again[kind]["inserted"] == full[kind]["inserted"] == 0
        assert again[kind]["already_present"] == full[kind]["already_present"] == first[kind]["inserted"]
        assert again[kind]["skipped"] == full[kind]["skipped"] == first[kind]["skipped"]
    assert again["boundary_events"] == 0


def test_a_changed_source_is_planned_in_full(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    migrate(src, dest)
    con = sqlite3.connect(src)
    with con:
        con.execute("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                    "VALUES (1, 500, 'user', 'one more', 2, '2026-12-01 00:00:00')")
    con.close()
    report = migrate(src, dest)
    assert "shortcut" not in report["extra"]
    assert report["messages"]["inserted"] == 1


def test_a_touched_target_is_planned_in_full_and_repaired(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    migrate(src, dest)
    con = sqlite3.connect(dest)
    with con:
        con.execute("DELETE FROM lcm_compaction_events WHERE id = (SELECT min(id) FROM lcm_compaction_events)")
    con.close()
    report = migrate(src, dest)
    assert "shortcut" not in report["extra"]
    assert report["boundary_events"] == 1


def test_other_options_are_planned_in_full(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    migrate(src, dest)
    report = migrate(src, dest, "--key-by", "session-key")
    assert "shortcut" not in report["extra"]


def test_a_dry_run_after_a_run_reports_what_the_real_run_then_does(tmp_path):
    src = copy_fixture("basic-0.9.4.db", tmp_path / "src")
    dest = tmp_path / "t.sqlite"
    migrate(src, dest)
    dry = migrate(src, dest, "--dry-run")
    real = migrate(src, dest)
    for kind in ("messages", "parts", "summaries"):
        assert dry[kind] == real[kind]
