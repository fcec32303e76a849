"""The sync decision (lcm_etl/sync/): one source identity whatever the path's spelling, another database at the
same path kept apart, and every full plan saying why."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

from conftest import copy_fixture, migrate_json, run_cli
from lcm_etl.store import marks

FIXTURE = "basic-0.15.3.db"   # three conversations, one session each
APPEND = ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
          "SELECT conversation_id, max(seq) + 1, 'user', 'and one more thing', 5, '2026-11-23 09:00:00' "
          "FROM messages WHERE conversation_id = 2")
PROVENANCE = ("lcm_etl_conversations", "lcm_etl_large_files", "lcm_etl_skipped", *marks.TABLES, "lcm_etl_runs")


def grow(db) -> None:
    with sqlite3.connect(db) as con:
        con.execute(APPEND)
    con.close()


def migrate_in(folder, src: str, target, *extra) -> dict:
    """`lcm-etl migrate` run from `folder`, the source spelled as given."""
    proc = subprocess.run([sys.executable, "-m", "lcm_etl", "migrate", "--src", src, "--dest", str(target), "--json",
                           *extra], capture_output=True, text=True, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def per_source(target, table: str = "lcm_etl_conversations") -> dict[str, int]:
    with sqlite3.connect(target) as con:
        rows = dict(con.execute(f"SELECT source_path, count(*) FROM {table} GROUP BY 1").fetchall())
    con.close()
    return rows


def test_a_relative_then_an_absolute_spelling_of_one_source_is_one_source(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    first = migrate_in(src.parent, src.name, target)
    grow(src)
    again = migrate_in(tmp_path, str(src.resolve()), target)
    # the kept snapshot is the same pair's too: only the pages that changed are read, and nothing is dropped
    assert again["sync_decision"]["how"] == "pages compared", again["sync_decision"]
    assert again["sync_decision"]["since_run"] == first["run_id"]
    assert (again["sync_decision"]["sessions_replanned"], again["messages"]["inserted"]) == (1, 1)
    link = tmp_path / "link.db"
    link.symlink_to(src)
    grow(src)
    third = migrate_in(tmp_path, "link.db", target)
    assert third["sync_decision"]["since_run"] == again["run_id"] and third["messages"]["inserted"] == 1
    assert third["sync_decision"]["how"] == "pages compared", third["sync_decision"]
    key = f"{os.path.realpath(src)}#"
    conversations = per_source(target)
    assert list(conversations.values()) == [3] and next(iter(conversations)).startswith(key)
    for table in marks.TABLES:
        assert list(per_source(target, table)) == list(conversations)


def test_another_database_at_the_same_path_keeps_its_own_provenance(tmp_path):
    """A, then B put at A's path, then A back: conversation ids start at 1 in both, and neither's provenance
    rows replace the other's; A back is synced against A's own marks."""
    a = copy_fixture(FIXTURE, tmp_path / "a")
    b = copy_fixture("shared-session-newest.db", tmp_path / "b")
    src = tmp_path / "src" / "lcm.db"
    src.parent.mkdir()
    target = tmp_path / "out" / "lcm.sqlite"
    shutil.copy(a, src)
    first = migrate_json(src, target)
    src.unlink()
    shutil.copy(b, src)
    second = migrate_json(src, target)
    assert second["sync_decision"]["line"] == "full plan: no earlier migrate of this source into the target"
    src.unlink()
    shutil.copy(a, src)
    third = migrate_json(src, target)
    assert third["sync_decision"]["since_run"] == first["run_id"]
    decided = third["sync_decision"]
    assert decided["sessions_total"] == 3 and decided["sessions_replanned"] <= 3
    assert third["messages"]["inserted"] == 0
    with sqlite3.connect(a) as con_a, sqlite3.connect(b) as con_b:
        want = sum(c.execute("SELECT count(*) FROM conversations").fetchone()[0] for c in (con_a, con_b))
    assert sum(per_source(target).values()) == want and len(per_source(target)) == 2


def test_a_full_plan_says_why(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    first = migrate_json(src, target)
    assert first["sync_decision"]["line"] == "full plan: a new target"
    assert migrate_json(src, target, "--full")["sync_decision"]["why"] == "--full"
    grow(src)
    last = migrate_json(src, target)["run_id"]
    undo = run_cli("undo", last, "--dest", target)
    assert undo.returncode == 0, undo.stderr
    report = migrate_json(src, target)
    assert report["sync_decision"]["line"] == f"full plan: the last migrate of this source, run {last}, was undone"
    assert report["messages"]["inserted"] == 1
    filtered = migrate_json(src, target, "--session-filter", report["sessions_touched"][0])
    assert filtered["sync_decision"]["line"] == "full plan: --session-filter plans the named sessions whole"
    grow(src)   # a filtered run stores no marks: the next plans everything, and says so
    after = migrate_json(src, target)
    assert after["sync_decision"]["line"] == (f"full plan: the last migrate of this source, run {filtered['run_id']}, "
                                              "stored no marks (--session-filter)")
