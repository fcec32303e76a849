"""The installed `lcm-etl` console script: exit codes, one-line errors, and the migrate options."""
from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys

import pytest

from conftest import (LCM_ETL, copy_fixture, make_native_target, migrate_api, migrate_json, open_db, run_cli,
                      table_counts)

SESSION_A = "a08ff49b-6f77-4632-a16c-43069c43a8c3"
SESSION_B = "b7cf3c25-632b-4240-ad3f-b64afebede10"


def assert_one_line_error(proc, code: int, prefix: str):
    assert proc.returncode == code, proc.stderr
    if "--json" in proc.args:   # the error as a JSON object on stdout too
        assert json.loads(proc.stdout) == {"error": proc.stderr.removeprefix("lcm-etl: error: ").rstrip("\n"),
                                           "exit_code": code}
    else:
        assert proc.stdout == ""
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(prefix), proc.stderr


# --------------------------------------------------------------------------------------------------
# bad input: exit 2, one line naming the problem and the fix, no target created


def bad_source(kind: str, tmp_path):
    if kind == "missing":
        return tmp_path / "nowhere" / "lcm.db"
    if kind == "directory":
        d = tmp_path / "a-folder"
        d.mkdir()
        return d
    if kind == "text file":
        p = tmp_path / "notes.txt"
        p.write_text("this is not a database\n")
        return p
    if kind == "truncated sqlite":
        good = copy_fixture("basic-0.15.3.db", tmp_path / "full")
        p = tmp_path / "truncated.db"
        p.write_bytes(good.read_bytes()[:8192])
        return p
    if kind == "sqlite without lossless-claw tables":
        p = tmp_path / "other.db"
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE foo (x INTEGER)")
        con.commit()
        con.close()
        return p
    raise AssertionError(kind)


SOURCE_ERRORS = {
    "missing": "lcm-etl: error: source not found: ",
    "directory": "lcm-etl: error: source is a directory, not a database file: ",
    "text file": "lcm-etl: error: source is not a SQLite database: ",
    "truncated sqlite": "lcm-etl: error: source is not a readable SQLite database: ",
    "sqlite without lossless-claw tables": "lcm-etl: error: source is not a lossless-claw database: ",
}
@pytest.mark.parametrize("kind", sorted(SOURCE_ERRORS))
def test_a_bad_source_exits_2_with_one_line_naming_it_and_creates_no_target(kind, tmp_path):
    src = bad_source(kind, tmp_path)
    dest = tmp_path / "out" / "lcm.sqlite"
    proc = run_cli("migrate", "--src", src, "--dest", dest)
    assert_one_line_error(proc, 2, SOURCE_ERRORS[kind] + str(src))
    assert "--src" in proc.stderr          # the fix: point --src at lossless-claw's lcm.db
    assert not dest.parent.exists()
    if kind == "missing":
        assert not src.parent.exists()   # a missing path is never created


def test_a_bad_source_is_reported_the_same_by_inspect(tmp_path):
    proc = run_cli("inspect", "--src", tmp_path / "missing.db")
    assert_one_line_error(proc, 2, f"lcm-etl: error: source not found: {tmp_path / 'missing.db'}")


def test_an_unknown_session_filter_exits_2_and_points_at_inspect(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    proc = run_cli("migrate", "--src", src, "--dest", dest, "--session-filter", SESSION_A,
                   "--session-filter", "no-such-session")
    assert_one_line_error(proc, 2, f"lcm-etl: error: unknown --session-filter 'no-such-session': no such session in {src}")
    assert f"lcm-etl inspect --src {src}" in proc.stderr
    assert not dest.parent.exists()


def test_a_target_whose_parent_is_a_regular_file_exits_2(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    dest = blocker / "state" / "lcm.sqlite"
    proc = run_cli("migrate", "--src", src, "--dest", dest)
    assert_one_line_error(proc, 2, f"lcm-etl: error: target folder cannot be created: {blocker}")
    assert "--dest" in proc.stderr
    assert not (blocker.parent / "state").exists()
    assert blocker.read_text() == "a file, not a folder"


def test_a_target_that_is_sqlite_but_not_remnic_exits_2_and_is_untouched(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    dest = tmp_path / "out" / "other.sqlite"
    dest.parent.mkdir()
    con = sqlite3.connect(dest)
    con.execute("CREATE TABLE notes (body TEXT)")
    con.execute("INSERT INTO notes VALUES ('keep me')")
    con.commit()
    con.close()
    before = dest.read_bytes()
    proc = run_cli("migrate", "--src", src, "--dest", dest)
    assert_one_line_error(proc, 2, f"lcm-etl: error: target exists but is not a Remnic LCM database: {dest}")
    assert "--dest" in proc.stderr
    assert dest.read_bytes() == before
    assert sorted(p.name for p in dest.parent.iterdir()) == ["other.sqlite"]


def test_a_target_that_is_not_sqlite_at_all_exits_2_and_is_untouched(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    dest = tmp_path / "notes.txt"
    dest.write_text("hello\n")
    proc = run_cli("migrate", "--src", src, "--dest", dest)
    assert_one_line_error(proc, 2, f"lcm-etl: error: target exists but is not a SQLite database: {dest}")
    assert dest.read_text() == "hello\n"


def test_two_targets_are_a_usage_error(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    proc = run_cli("migrate", "--src", src, "--dest", tmp_path / "a.sqlite", "--memory-dir", tmp_path / "m")
    assert_one_line_error(proc, 2, "lcm-etl: error: give either --dest or --memory-dir, not both")
    assert not (tmp_path / "a.sqlite").exists() and not (tmp_path / "m").exists()


def test_an_invalid_option_value_is_one_line_with_exit_2(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    proc = run_cli("migrate", "--src", src, "--dest", tmp_path / "a.sqlite", "--key-by", "colour")
    assert_one_line_error(proc, 2, "lcm-etl: error: Invalid value for '--key-by': ")
    assert proc.stderr.rstrip().endswith("(see `lcm-etl migrate --help`)")


# --------------------------------------------------------------------------------------------------
# locked target: exit 1, one line, nothing written


def test_a_target_locked_by_another_writer_fails_with_exit_1_and_nothing_written(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    migrate_api(src, dest, session_filter=[SESSION_A])
    with open_db(dest) as con:
        before = table_counts(con)
    holder = sqlite3.connect(dest, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        proc = run_cli("migrate", "--src", src, "--dest", dest, "--lock-timeout", "0.3")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_one_line_error(proc, 1, f"lcm-etl: error: target is locked by another writer: {dest}")
    assert proc.stderr.rstrip().endswith("nothing was written")
    with open_db(dest) as con:
        assert table_counts(con) == before


def test_a_target_locked_by_another_process_fails_with_exit_1(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    migrate_api(src, dest, session_filter=[SESSION_A])
    with open_db(dest) as con:
        before = table_counts(con)
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.readline()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(dest)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = run_cli("migrate", "--src", src, "--dest", dest, "--lock-timeout", "0.3", "--json")
    finally:
        holder.communicate("\n", timeout=30)
    assert_one_line_error(proc, 1, "lcm-etl: error: target is locked by another writer: ")
    with open_db(dest) as con:
        assert table_counts(con) == before


# --------------------------------------------------------------------------------------------------
# options


def test_session_filter_imports_only_that_session(tmp_path):
    src = copy_fixture("basic-0.5.0.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    report = migrate_json(src, dest, "--session-filter", SESSION_B)
    assert report["sessions_touched"] == [SESSION_B]
    assert report["messages"]["inserted"] == 41
    with open_db(dest) as con:
        for table in ("lcm_messages", "lcm_summary_nodes", "lcm_compaction_events"):
            assert [r[0] for r in con.execute(f"SELECT DISTINCT session_id FROM {table}")] == [SESSION_B]
        assert con.execute("SELECT sum(token_count) FROM lcm_messages").fetchone()[0] == 1070
        assert con.execute("SELECT count(*) FROM lcm_message_parts").fetchone()[0] == 49


def test_key_by_session_key_uses_the_trimmed_session_key(tmp_path):
    src = copy_fixture("shared-session-newest.db", tmp_path / "src")
    con = sqlite3.connect(src)
    con.execute("UPDATE conversations SET session_key = ' \t' || session_key || '  ' WHERE conversation_id = 5")
    con.commit()
    con.close()
    dest = tmp_path / "out" / "lcm.sqlite"
    report = migrate_json(src, dest, "--key-by", "session-key")
    assert report["sessions_touched"] == ["4", "agent:main:cron:digest", "agent:main:main"]
    with open_db(dest) as con:
        got = dict(con.execute("SELECT session_id, count(*) FROM lcm_messages GROUP BY 1").fetchall())
    assert got == {"agent:main:main": 41, "agent:main:cron:digest": 6, "4": 4}
    # and the filter takes the resolved (trimmed) key
    dest2 = tmp_path / "out2" / "lcm.sqlite"
    only = migrate_api(src, dest2, key_by="session-key", session_filter=["agent:main:cron:digest"])
    assert only["messages"]["inserted"] == 6


def test_a_blank_session_id_falls_back_to_the_conversation_id_as_decimal_text(tmp_path):
    src = copy_fixture("shared-session-newest.db", tmp_path / "src")
    con = sqlite3.connect(src)
    con.execute("UPDATE conversations SET session_id = '  \t ' WHERE conversation_id = 5")
    con.commit()
    con.close()
    dest = tmp_path / "out" / "lcm.sqlite"
    report = migrate_json(src, dest)
    assert report["sessions_touched"] == ["4", "5", SESSION_A]
    with open_db(dest) as con:
        got = dict(con.execute("SELECT session_id, count(*) FROM lcm_messages GROUP BY 1").fetchall())
        assert got == {SESSION_A: 41, "4": 4, "5": 6}
        assert con.execute("SELECT count(*) FROM lcm_messages WHERE session_id LIKE '%.%'").fetchone()[0] == 0
    dest2 = tmp_path / "out2" / "lcm.sqlite"
    only = migrate_api(src, dest2, session_filter=["4"])
    assert only["sessions_touched"] == ["4"] and only["messages"]["inserted"] == 4


def test_memory_dir_writes_state_lcm_sqlite_inside_it(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    mem = tmp_path / "remnic-memory"
    proc = run_cli("migrate", "--src", src, "--memory-dir", mem, "--quiet")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""
    target = mem / "state" / "lcm.sqlite"
    assert sorted(p.name for p in (mem / "state").iterdir()) == ["lcm.sqlite"]
    with open_db(target) as con:
        assert con.execute("SELECT count(*) FROM lcm_messages").fetchone()[0] == 122


def test_dollar_home_in_paths_is_expanded(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "home" / "src")
    import os
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    proc = subprocess.run([str(LCM_ETL), "migrate", "--src", "$HOME/src/basic-0.1.0.db", "--memory-dir", "~/mem",
                           "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "home" / "mem" / "state" / "lcm.sqlite").exists()
    assert json.loads(proc.stdout)["source"] == str(src)


COUNTER = re.compile(r"^  (messages|parts|summaries)\s+inserted\s+(\d+)\s+already present\s+(\d+)\s+skipped\s+(\d+)$", re.M)


def text_counters(text: str) -> dict:
    out = {k: (int(a), int(b), int(c)) for k, a, b, c in COUNTER.findall(text)}
    m = re.search(r"^  parents collapsed (\d+) \(dropped edges (\d+)\)\s+cross-session links ignored (\d+) in written "
                  r"summaries, (\d+) in skipped summaries$", text, re.M)
    out["parents"] = tuple(map(int, m.groups()))
    m = re.search(r"^  sessions touched (\d+)", text, re.M)
    out["touched"] = int(m.group(1))
    m = re.search(r"^  boundary events written (\d+)$", text, re.M)
    out["boundary"] = int(m.group(1))
    return out


def json_counters(d: dict) -> dict:
    out = {k: (d[k]["inserted"], d[k]["already_present"], sum(d[k]["skipped"].values()))
           for k in ("messages", "parts", "summaries")}
    out["parents"] = (d["collapsed_parents"], d["dropped_parent_edges"], d["cross_session_links"],
                      d["cross_session_links_in_skipped"])
    out["touched"] = len(d["sessions_touched"])
    out["boundary"] = d["boundary_events"]
    return out


def test_the_json_report_parses_and_has_the_same_counters_as_the_text_report(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    as_json = migrate_json(src, tmp_path / "a" / "lcm.sqlite")
    proc = run_cli("migrate", "--src", src, "--dest", tmp_path / "b" / "lcm.sqlite")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("lcm-etl migrate: Done.\n")
    assert json_counters(as_json) == text_counters(proc.stdout)
    # and for a re-run
    again_json = migrate_json(src, tmp_path / "a" / "lcm.sqlite")
    again = run_cli("migrate", "--src", src, "--dest", tmp_path / "b" / "lcm.sqlite")
    assert json_counters(again_json) == text_counters(again.stdout)
    assert again_json["messages"]["inserted"] == 0


def test_quiet_prints_nothing_on_success(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    proc = run_cli("migrate", "--src", src, "--dest", tmp_path / "o" / "lcm.sqlite", "-q")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_the_version_option_prints_the_program_name(tmp_path):
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("lcm-etl, version ")


def test_an_existing_target_created_by_remnic_is_accepted(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    dest = tmp_path / "mem" / "state" / "lcm.sqlite"
    make_native_target(dest).close()
    report = migrate_api(src, dest)
    assert report["messages"]["inserted"] == 122


def test_a_target_with_a_newer_remnic_schema_exits_2_and_is_untouched(tmp_path):
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    dest = tmp_path / "mem" / "lcm.sqlite"
    con = make_native_target(dest)
    con.execute("UPDATE lcm_meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    before = dest.read_bytes()
    proc = run_cli("migrate", "--src", src, "--dest", dest)
    assert_one_line_error(proc, 2, f"lcm-etl: error: target has Remnic LCM schema version 3, newer than the 2 "
                                   f"this lcm-etl writes: {dest}")
    assert dest.read_bytes() == before


@pytest.mark.parametrize("version", ["3.0", " 3", "2026.1", "2.0", " 2", "02", "0", ""])
@pytest.mark.parametrize("command", ["migrate", "audit", "dry-run"])
def test_a_target_whose_schema_version_is_not_exactly_one_lcm_etl_knows_is_refused_untouched(tmp_path, version,
                                                                                             command):
    # issue 24 item 6: '3.0', ' 3' and '2026.1' were accepted and rewritten to '2' (only a plain '3' was refused)
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    dest = tmp_path / "mem" / "lcm.sqlite"
    con = make_native_target(dest)
    con.execute("UPDATE lcm_meta SET value = ? WHERE key = 'schema_version'", (version,))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    before = {p.name: p.read_bytes() for p in dest.parent.iterdir()}
    args = (["audit"] if command == "audit" else ["migrate"] + (["--dry-run"] if command == "dry-run" else []))
    proc = run_cli(*args, "--src", src, "--dest", dest)
    assert_one_line_error(proc, 2, f"lcm-etl: error: target has Remnic LCM schema version {version!r}, not one this "
                                   f"lcm-etl knows ('1' or '2' exactly): {dest} (it is left untouched; point --dest "
                                   "at a Remnic lcm.sqlite of schema version 2, or at a new path)\n")
    assert {p.name: p.read_bytes() for p in dest.parent.iterdir()} == before


@pytest.mark.parametrize("command", ["migrate", "dry-run", "audit", "reconcile", "runs"])
def test_a_dangling_symbolic_link_as_dest_exits_2_naming_the_link_and_where_it_points(tmp_path, command):
    # issue 24 item 7: every migrate failed with "target appeared while it was being built; re-run to append to it"
    src = copy_fixture("basic-0.1.0.db", tmp_path / "src")
    link = tmp_path / "mem" / "lcm.sqlite"
    link.parent.mkdir()
    link.symlink_to(tmp_path / "elsewhere" / "lcm.sqlite")
    args = {"migrate": ["migrate", "--src", src], "dry-run": ["migrate", "--dry-run", "--src", src],
            "audit": ["audit", "--src", src], "runs": ["runs"],
            "reconcile": ["reconcile", "--sessions", tmp_path / "src"]}[command]
    for _ in range(2):   # the same answer every time, never a loop of failures
        proc = run_cli(*args, "--dest", link)
        assert_one_line_error(proc, 2, f"lcm-etl: error: target is a symbolic link to nothing: {link} -> "
                                       f"{tmp_path / 'elsewhere' / 'lcm.sqlite'} (pass --dest the path it should "
                                       "point at, or remove the link)\n")
    assert sorted(p.name for p in link.parent.iterdir()) == ["lcm.sqlite"] and link.is_symlink()
    assert not (tmp_path / "elsewhere").exists()


def test_a_source_damaged_in_a_page_of_messages_exits_2_and_creates_nothing(tmp_path):
    # planning reads every message's content in SQLite (the marks' content digest): a bad page met there is
    # the one-line "source is damaged", not an internal error
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    con = sqlite3.connect(src)
    page = con.execute("SELECT max(pageno) FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf'").fetchone()[0]
    size = con.execute("PRAGMA page_size").fetchone()[0]
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    data = bytearray(src.read_bytes())
    data[(page - 1) * size + 8] ^= 0x7F   # the first cell pointer of that leaf page
    src.write_bytes(bytes(data))
    damaged_source_creates_nothing(src, tmp_path)


def test_a_source_damaged_where_only_the_content_copy_reads_exits_2_and_creates_nothing(tmp_path):
    # found by the fault suite's byte flips: the page survives planning and fails while content is copied
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    data = bytearray(src.read_bytes())
    data[int(0.8515625 * len(data))] ^= 1
    src.write_bytes(bytes(data))
    damaged_source_creates_nothing(src, tmp_path)


def damaged_source_creates_nothing(src, tmp_path) -> None:
    """A migrate of the damaged `src`: exit 2, one line, and no target (not even its folder)."""
    dest = tmp_path / "out" / "lcm.sqlite"
    proc = run_cli("migrate", "--src", src, "--dest", dest)
    assert_one_line_error(proc, 2, "lcm-etl: error: source is damaged: ")
    assert "the target was not created" in proc.stderr
    assert not dest.parent.exists()
