"""Marks as named columns (lcm_etl/store/marks.py): a target an earlier lcm-etl wrote keeps its marks as
colon-joined strings in lcm_etl_marks (ledger schema version 2, fixtures/targets/marks-v2-multiparent.sqlite).
The current lcm-etl reads them as they are, so its first run re-plans only what changed; it converts them in
the run's first write transaction, a dry run never does, and a string that is not a mark is left out."""
from __future__ import annotations

import hashlib
import shutil
import sqlite3

from conftest import ROOT, copy_fixture, migrate_json, open_db, run_cli
from test_delta import converged
from lcm_etl.store import ledger, marks

V2_TARGET = ROOT / "fixtures" / "targets" / "marks-v2-multiparent.sqlite"
V2_RUN = "ab6d89e9a8b040f4a0200ca2b8647d4b"   # the run that wrote it, and its marks
SOURCE = "multiparent-newest.db"             # two conversations, one session each
APPEND = ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
          "SELECT conversation_id, max(seq) + 1, 'user', 'and one more thing', 5, '2026-11-23 09:00:00' "
          "FROM messages WHERE conversation_id = 2")


def older_target(tmp_path):
    """The source, and the version 2 target as if that lcm-etl had migrated this very path."""
    src = copy_fixture(SOURCE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    target.parent.mkdir()
    shutil.copyfile(V2_TARGET, target)
    con = sqlite3.connect(target, isolation_level=None)
    for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%source_path%'")\
            .fetchall():
        con.execute(f"UPDATE {table} SET source_path = ?", (str(src),))
    # the path that run resolved the source to (the ledger row's source fingerprint)
    con.execute("UPDATE lcm_etl_runs SET counts = json_set(counts, '$.source_fingerprint[0]', ?)", (str(src),))
    con.close()
    return src, target


def layout(target) -> tuple[str, set[str]]:
    con = open_db(target)
    try:
        version = con.execute("SELECT value FROM lcm_etl_meta WHERE key = 'schema_version'").fetchone()[0]
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%marks'")}
        return version, tables
    finally:
        con.close()


def stored(target) -> tuple[str, marks.Marks]:
    """The one source's marks the target holds (under the key the run gave the source), and their run."""
    con = sqlite3.connect(target)
    try:
        (source, run), = con.execute("SELECT source_path, run_id FROM lcm_etl_source_marks").fetchall()
        found = marks.read(con, [source], run)
        assert found is not None
        return run, found
    finally:
        con.close()


def append(src) -> None:
    con = sqlite3.connect(src)
    with con:
        con.execute(APPEND)
    con.close()


def test_a_target_an_older_lcm_etl_wrote_re_plans_only_what_changed_and_keeps_its_marks_as_named_columns(tmp_path):
    src, target = older_target(tmp_path)
    assert layout(target) == ("2", {"lcm_etl_marks"})
    append(src)
    report = migrate_json(src, target)
    assert (report["sync_decision"]["how"], report["sync_decision"]["since_run"]) == ("marks", V2_RUN)
    assert "; 1 of 2 sessions re-planned (1 conversations changed);" in report["sync_decision"]["line"]
    assert report["messages"]["inserted"] == 1
    assert layout(target) == (str(ledger.SCHEMA_VERSION), {k.table for k in marks.KINDS})
    run, now = stored(target)
    assert run == report["run_id"]
    assert (len(now.conversations), len(now.sessions)) == (2, 2)
    converged(src, target)


def test_the_marks_converted_from_an_older_target_are_those_the_current_lcm_etl_computes(tmp_path):
    src, target = older_target(tmp_path)
    con = sqlite3.connect(target)
    old = marks.read(con, [str(src)], V2_RUN)   # read from the colon strings
    con.close()
    fresh = tmp_path / "fresh" / "lcm.sqlite"
    migrate_json(src, fresh)
    _, computed = stored(fresh)
    assert old is not None
    assert (sorted(old.conversations), sorted(old.sessions), old.source) == (
        sorted(computed.conversations), sorted(computed.sessions), computed.source)
    # so the first run after the upgrade finds every conversation and session unchanged
    report = migrate_json(src, target)
    assert report["sync_decision"]["since_run"] == V2_RUN
    assert "; 0 of 2 sessions re-planned (0 conversations changed);" in report["sync_decision"]["line"]
    _, upgraded = stored(target)
    assert (sorted(upgraded.conversations), upgraded.source) == (sorted(computed.conversations), computed.source)


def test_a_digest_above_two_to_the_63_is_kept_as_the_same_64_bits_read_signed():
    figures = marks.SESSION.parse("3:7:0:1")
    assert figures == (3, 7, 0, 1)
    old = ":".join(["18446744073709551615", "1", "9223372036854775808", *["0"] * 10, "12.345"])
    parsed = marks.CONVERSATION.parse(old)
    assert parsed is not None and parsed[:3] == (-1, 1, -(1 << 63)) and parsed[-1] == "12.345"
    assert marks.CONVERSATION.parse(old + ":1") is None            # one figure too many
    assert marks.CONVERSATION.parse(old.replace("1:", "x:", 1)) is None
    assert marks.CONVERSATION.parse(":".join(["18446744073709551616", *old.split(":")[1:]])) is None   # 2^64


def test_a_dry_run_reads_an_older_targets_marks_and_leaves_them_as_they_are(tmp_path):
    src, target = older_target(tmp_path)
    append(src)
    before = hashlib.sha256(target.read_bytes()).hexdigest()
    report = migrate_json(src, target, "--dry-run")
    assert report["sync_decision"]["since_run"] == V2_RUN
    assert "; 1 of 2 sessions re-planned (1 conversations changed);" in report["sync_decision"]["line"]
    assert hashlib.sha256(target.read_bytes()).hexdigest() == before
    assert layout(target) == ("2", {"lcm_etl_marks"})


def test_the_upgrade_is_part_of_the_write_transaction_and_goes_with_its_rollback(tmp_path):
    src, target = older_target(tmp_path)
    con = sqlite3.connect(target, isolation_level=None)
    assert marks.source_paths(con) == {str(src)}   # the version 2 layout
    con.execute("BEGIN IMMEDIATE")
    ledger.ensure(con)
    assert con.execute("SELECT count(*) FROM lcm_etl_conversation_marks").fetchone()[0] == 2
    assert marks.source_paths(con) == {str(src)}
    con.execute("ROLLBACK")
    con.close()
    assert layout(target) == ("2", {"lcm_etl_marks"})


def test_an_old_mark_that_is_not_a_mark_is_left_out_and_the_next_run_plans_everything_once(tmp_path):
    src, target = older_target(tmp_path)
    con = sqlite3.connect(target, isolation_level=None)
    con.execute("UPDATE lcm_etl_marks SET mark = 'not a mark' WHERE kind = 'global'")
    con.close()
    append(src)
    report = migrate_json(src, target)
    assert report["sync_decision"]["line"] == (f"full plan: the marks of run {V2_RUN} are no longer in the target, "
                                               "or not readable as marks")
    assert report["messages"]["inserted"] == 1
    assert layout(target) == (str(ledger.SCHEMA_VERSION), {k.table for k in marks.KINDS})
    converged(src, target)
    append(src)
    again = migrate_json(src, target)   # its own marks, stored as named columns: a sync again
    assert again["sync_decision"]["since_run"] == report["run_id"]
    assert "; 1 of 2 sessions re-planned (1 conversations changed);" in again["sync_decision"]["line"]
    assert run_cli("audit", "--src", src, "--dest", target).returncode == 0
