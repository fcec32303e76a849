"""The sync decision (lcm_etl/sync/): one source identity whatever the path's spelling, an older target's typed
paths adopted, another database at the same path kept apart, and every full plan saying why."""
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


def test_an_older_targets_typed_paths_are_adopted_without_a_duplicate_row(tmp_path):
    """A target as the previous lcm-etl left it after `--src s.db` then `--src /abs/s.db`: two sets of provenance
    rows and marks for one file, under the paths as typed. The next run plans from the marks and merges them."""
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    first = migrate_json(src, target)
    with sqlite3.connect(target) as con:   # the spellings an older lcm-etl stored
        for table in PROVENANCE:
            con.execute(f"UPDATE {table} SET source_path = 's.db' WHERE source_path LIKE '%#%'")
        for table in ("lcm_etl_conversations", *marks.TABLES):
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
            picked = ", ".join("'/abs/elsewhere/s.db'" if c == "source_path" else c for c in cols)
            con.execute(f"INSERT INTO {table} SELECT {picked} FROM {table}")
    con.close()
    grow(src)
    report = migrate_in(src.parent, src.name, target)
    assert report["sync_decision"]["how"] in ("marks", "pages compared") and report["messages"]["inserted"] == 1
    assert report["sync_decision"]["since_run"] == first["run_id"]
    with sqlite3.connect(target) as con:
        paths = {t: [r[0] for r in con.execute(f"SELECT DISTINCT source_path FROM {t}")] for t in PROVENANCE}
    con.close()
    key = paths["lcm_etl_runs"][0]
    assert key.startswith(f"{os.path.realpath(src)}#")
    # '/abs/elsewhere/s.db' names no file here: another source, left as it is
    assert sorted(paths["lcm_etl_conversations"]) == sorted([key, "/abs/elsewhere/s.db"])
    assert per_source(target)[key] == 3
    assert all(set(paths[t]) == {key, "/abs/elsewhere/s.db"} for t in marks.TABLES) and paths["lcm_etl_runs"] == [key]
    audit = run_cli("audit", "--src", src, "--dest", target, "--json")
    assert audit.returncode == 0, audit.stdout


def test_two_typed_spellings_of_one_file_leave_one_row_per_conversation_the_most_recent_spellings(tmp_path):
    """An older target that holds every conversation twice, under `s.db` and, used later, under the absolute
    path: the run keeps one row per conversation under the key, the later spelling's, and no typed path."""
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    migrate_json(src, target)
    with sqlite3.connect(target) as con:
        for table in PROVENANCE:
            con.execute(f"UPDATE {table} SET source_path = 's.db' WHERE source_path LIKE '%#%'")
        con.execute("UPDATE lcm_etl_conversations SET title = 'as s.db'")
        cols = [r[1] for r in con.execute("PRAGMA table_info(lcm_etl_conversations)")]
        picked = ", ".join({"source_path": f"'{src}'", "title": "'as the absolute path'"}.get(c, c) for c in cols)
        con.execute(f"INSERT INTO lcm_etl_conversations SELECT {picked} FROM lcm_etl_conversations")
        cols = [r[1] for r in con.execute("PRAGMA table_info(lcm_etl_runs)")]
        picked = ", ".join({"source_path": f"'{src}'", "run_id": "run_id || '-later'"}.get(c, c) for c in cols)
        con.execute(f"INSERT INTO lcm_etl_runs SELECT {picked} FROM lcm_etl_runs")   # a later rowid: used later
        conversations = con.execute("SELECT count(*) FROM lcm_etl_conversations WHERE source_path = 's.db'").fetchone()
    con.close()
    grow(src)
    migrate_in(src.parent, src.name, target)
    with sqlite3.connect(target) as con:
        rows = con.execute("SELECT source_path, title, count(*) FROM lcm_etl_conversations GROUP BY 1, 2").fetchall()
    con.close()
    (key,) = {r[0] for r in rows}
    assert key.startswith(f"{os.path.realpath(src)}#")
    assert sum(r[2] for r in rows) == conversations[0]
    # the grown conversation's row is this run's (95 writes it anew); the others were adopted from the later spelling
    assert {r[1] for r in rows} == {None, "as the absolute path"}


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
                                              "stored no marks (--session-filter, or an older lcm-etl)")
