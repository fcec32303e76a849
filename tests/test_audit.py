"""audit: a read-only proof, for CI, that the target holds every source fact (docs/cli.md, audit)."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import LCM_ETL, ROOT, copy_fixture, empty_target, folder_state, run_cli

SESSIONS = ROOT / "fixtures" / "sessions"


@pytest.fixture
def migrated(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    proc = run_cli("migrate", "--src", src, "--dest", dest, "--quiet")
    assert proc.returncode == 0, proc.stderr
    return src, dest


def audit(src, dest, *extra) -> tuple[int, dict]:
    proc = run_cli("audit", "--src", src, "--dest", dest, "--json", *extra)
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def problems(report: dict) -> set[tuple[str, str, str]]:
    return {(d["kind"], d["problem"], d["source_id"]) for d in report["differences"]}


def alter(dest, sql: str) -> None:
    con = sqlite3.connect(dest)
    with con:
        con.execute(sql)
    con.close()


def target_id(dest, seq: int) -> int:
    con = sqlite3.connect(dest)
    try:
        return con.execute("SELECT id FROM lcm_messages WHERE json_extract(metadata, '$.source_seq') = ? "
                           "AND json_extract(metadata, '$.conversation_id') = 1", (seq,)).fetchone()[0]
    finally:
        con.close()


def test_a_fully_migrated_fixture_audits_clean(migrated):
    code, report = audit(*migrated)
    assert code == 0
    assert report["differences"] == []
    assert report["messages"]["inserted"] == 0 and report["boundary_events"] == 0


@pytest.mark.parametrize("name", ["basic-0.1.0.db", "basic-1.0.0-beta.4.db", "shared-session-newest.db", "wal-newest.db"])
def test_every_generation_audits_clean_after_a_migration(tmp_path, name):
    src = copy_fixture(name, tmp_path / "src")
    dest = tmp_path / "lcm.sqlite"
    assert run_cli("migrate", "--src", src, "--dest", dest, "-q").returncode == 0
    code, report = audit(src, dest)
    assert (code, report["differences"]) == (0, [])


def test_a_deleted_message_is_pending_and_named(migrated):
    src, dest = migrated
    alter(dest, f"DELETE FROM lcm_messages WHERE id = {target_id(dest, 7)}")
    code, report = audit(src, dest)
    assert code == 3
    assert ("message", "missing in target", "1:7") in problems(report)
    assert report["messages"]["inserted"] == 1   # what a migrate would write now


@pytest.mark.parametrize("column,value,what", [
    ("content", "'tampered'", "content"), ("role", "'system'", "role"),
    ("token_count", "token_count + 1", "token_count")])
def test_an_altered_message_is_named_with_what_differs(migrated, column, value, what):
    src, dest = migrated
    alter(dest, f"UPDATE lcm_messages SET {column} = {value} WHERE id = {target_id(dest, 3)}")
    code, report = audit(src, dest)
    assert code == 3
    assert ("message", f"differs: {what}", "1:3") in problems(report)


def test_a_target_row_whose_created_at_was_altered_no_longer_holds_its_source_message(migrated):
    # created_at is part of a message's identity (transforms/05_target_state.sql): lossless-claw never
    # changes it, so a row with another instant is another message (a restored backup re-issues ids)
    src, dest = migrated
    alter(dest, f"UPDATE lcm_messages SET created_at = '1999-01-01T00:00:00.000Z' WHERE id = {target_id(dest, 3)}")
    code, report = audit(src, dest)
    assert code == 3
    assert ("message", "missing in target", "1:3") in problems(report)
    assert report["messages"]["inserted"] == 1


def test_a_duplicated_target_row_is_named(migrated):
    src, dest = migrated
    alter(dest, "INSERT INTO lcm_messages (session_id, turn_index, role, content, token_count, created_at, metadata) "
                f"SELECT session_id, turn_index, role, content, token_count, created_at, metadata FROM lcm_messages "
                f"WHERE id = {target_id(dest, 5)}")
    code, report = audit(src, dest)
    assert code == 3
    assert ("message", "duplicated in target (2 rows)", "1:5") in problems(report)


def test_a_removed_boundary_event_is_named(migrated):
    src, dest = migrated
    con = sqlite3.connect(dest)
    session = con.execute("SELECT session_id FROM lcm_compaction_events ORDER BY id LIMIT 1").fetchone()[0]
    con.close()
    alter(dest, f"DELETE FROM lcm_compaction_events WHERE session_id = '{session}'")
    code, report = audit(src, dest)
    assert code == 3
    assert ("boundary", "missing in target", session) in problems(report)
    # and migrate owes exactly that event
    proc = run_cli("migrate", "--src", src, "--dest", dest, "--json")
    assert json.loads(proc.stdout)["boundary_events"] == 1
    assert audit(src, dest)[0] == 0


def test_a_row_added_to_the_source_is_pending(migrated):
    src, dest = migrated
    con = sqlite3.connect(src)
    with con:
        con.execute("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                    "VALUES (1, 999, 'user', 'a new turn', 3, '2026-12-01 00:00:00')")
    con.close()
    code, report = audit(src, dest)
    assert code == 3
    assert ("message", "missing in target", "1:999") in problems(report)


def test_a_target_row_whose_recorded_source_position_is_stale_is_named_and_a_migrate_refreshes_it(migrated):
    # the message is found by its source message id; its (conversation, seq) in metadata is an attribute
    # lossless-claw's rollover-split repair changes in place (docs/mapping.md, "When the source changes")
    src, dest = migrated
    alter(dest, f"UPDATE lcm_messages SET metadata = json_set(metadata, '$.source_seq', 4242) "
                f"WHERE id = {target_id(dest, 9)}")
    code, report = audit(src, dest)
    assert code == 3
    assert ("message", "changed in the source: moved", "1:9") in problems(report)
    assert report["messages"]["inserted"] == 0
    # --full: the source is unchanged and an UPDATE keeps the target's fingerprint, so the no-op shortcut
    # would (rightly, for lossless-claw's own changes, which always change the source) skip the run
    assert run_cli("migrate", "--src", src, "--dest", dest, "-q", "--full").returncode == 0
    assert audit(src, dest)[0] == 0
    assert target_id(dest, 9) is not None   # its metadata names seq 9 again


def test_a_message_the_source_deleted_stays_in_the_target_and_is_counted_not_flagged(migrated):
    # as lossless-claw's heartbeat prune does: the newest message no summary links is deleted
    src, dest = migrated
    con = sqlite3.connect(src)
    with con:
        seq = con.execute("SELECT seq FROM messages WHERE conversation_id = 1 AND message_id NOT IN "
                          "(SELECT message_id FROM summary_messages) ORDER BY seq DESC LIMIT 1").fetchone()[0]
        con.execute("DELETE FROM message_parts WHERE message_id = (SELECT message_id FROM messages "
                    "WHERE conversation_id = 1 AND seq = ?)", (seq,))
        con.execute("DELETE FROM messages WHERE conversation_id = 1 AND seq = ?", (seq,))
    con.close()
    code, report = audit(src, dest)
    assert (code, report["differences"]) == (0, [])
    assert report["extra"]["messages kept, no longer in the source"] == 1
    assert target_id(dest, seq) is not None
    text = run_cli("audit", "--src", src, "--dest", dest)   # the text report says so too
    assert text.returncode == 0 and "  messages kept, no longer in the source: 1" in text.stdout.splitlines()


def test_an_altered_summary_is_named(migrated):
    src, dest = migrated
    con = sqlite3.connect(dest)
    sid = con.execute("SELECT id FROM lcm_summary_nodes ORDER BY id LIMIT 1").fetchone()[0]
    con.close()
    alter(dest, f"UPDATE lcm_summary_nodes SET summary_text = 'x' WHERE id = '{sid}'")
    code, report = audit(src, dest)
    assert code == 3
    assert ("summary", "differs: summary_text", sid) in problems(report)


def test_audit_never_writes_to_source_or_target(migrated):
    src, dest = migrated
    before_src, before_dest = folder_state(src.parent), folder_state(dest.parent)
    alter(dest, f"DELETE FROM lcm_messages WHERE id = {target_id(dest, 2)}")
    before_dest = folder_state(dest.parent)
    audit(src, dest)
    run_cli("audit", "--src", src, "--dest", dest)
    assert folder_state(src.parent) == before_src
    assert folder_state(dest.parent) == before_dest


def test_a_missing_target_is_everything_pending_and_is_not_created(tmp_path):
    src = copy_fixture("basic-0.5.0.db", tmp_path / "src")
    dest = tmp_path / "nowhere" / "lcm.sqlite"
    code, report = audit(src, dest)
    assert code == 3
    assert report["messages"]["inserted"] == 122
    assert report["differences"][0]["problem"] == "target does not exist"
    assert not dest.parent.exists()


def test_an_empty_target_is_everything_pending(tmp_path):
    src = copy_fixture("basic-0.5.0.db", tmp_path / "src")
    code, report = audit(src, empty_target(tmp_path / "lcm.sqlite"))
    assert code == 3
    assert report["messages"]["inserted"] == 122


def test_the_text_report_shows_the_first_findings_and_counts_the_rest(tmp_path):
    src = copy_fixture("basic-0.5.0.db", tmp_path / "src")
    proc = run_cli("audit", "--src", src, "--dest", empty_target(tmp_path / "none.sqlite"))
    assert proc.returncode == 3
    lines = proc.stdout.splitlines()
    assert lines[0] == "lcm-etl audit: PENDING"
    assert sum(line.startswith("  message: missing in target  session") for line in lines) == 5
    assert "  message: missing in target: 117 more (see --json)" in lines


def test_transcripts_are_audited_too(tmp_path):
    target = empty_target(tmp_path / "t.sqlite")
    transcript = SESSIONS / "plain-chat.jsonl"
    (tmp_path / "state").mkdir()   # no default lcm.db there: the transcripts alone
    proc = audit_in_state(tmp_path / "state", "--sessions", transcript, "--dest", target, "--json")
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["extra"]["transcript_messages_pending"] == 8
    assert run_cli("reconcile", "--sessions", transcript, "--dest", target, "-q").returncode == 0
    proc = audit_in_state(tmp_path / "state", "--sessions", transcript, "--dest", target, "--json")
    assert proc.returncode == 0, proc.stdout


def test_audit_of_bad_input_exits_2(tmp_path):
    proc = run_cli("audit", "--src", tmp_path / "missing.db", "--dest", tmp_path / "t.sqlite")
    assert proc.returncode == 2
    assert proc.stderr.startswith("lcm-etl: error: source not found: ")


def audit_in_state(state, *args) -> subprocess.CompletedProcess:
    """audit with OPENCLAW_STATE_DIR pointing at `state` (where the default lcm.db is looked up)."""
    env = {**os.environ, "OPENCLAW_STATE_DIR": str(state)}
    return subprocess.run([str(LCM_ETL), "audit", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)


def test_audit_of_transcripts_without_src_reads_the_default_lcm_db_and_finds_what_the_target_lacks(tmp_path):
    state = tmp_path / "state"
    copy_fixture("basic-0.15.3.db", state).rename(state / "lcm.db")
    for side in ("-wal", "-shm"):
        Path(str(state / "basic-0.15.3.db") + side).unlink(missing_ok=True)
    target = tmp_path / "t.sqlite"
    transcript = SESSIONS / "plain-chat.jsonl"
    assert run_cli("reconcile", "--sessions", transcript, "--dest", target, "-q").returncode == 0
    proc = audit_in_state(state, "--sessions", transcript, "--dest", target, "--json")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["source"] == str(state / "lcm.db")
    assert report["messages"]["inserted"] == 122   # every lcm.db message is pending
    assert sum(d["problem"] == "missing in target" and d["kind"] == "message" for d in report["differences"]) == 122
    text = audit_in_state(state, "--sessions", transcript, "--dest", target)
    assert text.returncode == 3
    assert f"  source:  {state / 'lcm.db'}  [0.15.2+]" in text.stdout.splitlines()


def test_audit_of_transcripts_without_src_and_without_a_default_lcm_db_audits_the_transcripts_and_says_so(tmp_path):
    state = tmp_path / "empty-state"
    state.mkdir()
    target = tmp_path / "t.sqlite"
    transcript = SESSIONS / "plain-chat.jsonl"
    assert run_cli("reconcile", "--sessions", transcript, "--dest", target, "-q").returncode == 0
    proc = audit_in_state(state, "--sessions", transcript, "--dest", target, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["source"] is None
    assert report["extra"]["lcm_db_not_found"] == str(state / "lcm.db")
    text = audit_in_state(state, "--sessions", transcript, "--dest", target)
    assert text.returncode == 0
    assert f"  lcm.db:  none at {state / 'lcm.db'} (pass --src to audit one elsewhere); transcripts audited alone" \
        in text.stdout.splitlines()


def test_audit_without_sessions_still_requires_the_default_lcm_db(tmp_path):
    proc = audit_in_state(tmp_path, "--dest", tmp_path / "t.sqlite")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"lcm-etl: error: source not found: {tmp_path / 'lcm.db'}")


# --junit FILE: the audit as JUnit XML, one test case per session, for a CI's test view

def junit(src, dest, tmp_path, code: int):
    import xml.etree.ElementTree as ET

    out = tmp_path / "reports" / "audit.xml"
    out.parent.mkdir(exist_ok=True)
    proc = run_cli("audit", "--src", src, "--dest", dest, "--junit", out, "--quiet")
    assert (proc.returncode, proc.stdout, proc.stderr) == (code, "", "")
    suite = ET.parse(out).getroot().find("testsuite")
    cases = {c.get("name"): c.find("failure") for c in suite.iter("testcase")}
    return suite, cases


def source_sessions(src) -> set[str]:
    proc = run_cli("inspect", "--src", src, "--json")
    return {s["session_id"] for s in json.loads(proc.stdout)["sessions"]}


def test_junit_has_one_passing_test_case_per_session_of_a_clean_target(migrated, tmp_path):
    src, dest = migrated
    suite, cases = junit(src, dest, tmp_path, 0)
    assert set(cases) == source_sessions(src) and len(cases) > 1
    assert all(failure is None for failure in cases.values())
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (str(len(cases)), "0", "0")


def test_junit_fails_exactly_the_sessions_that_fell_behind_or_differ_with_the_reason(migrated, tmp_path):
    src, dest = migrated
    con = sqlite3.connect(src)
    with con:   # a new turn in conversation 1's session: pending
        con.execute("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
                    "VALUES (1, 999, 'user', 'a new turn', 3, '2026-12-01 00:00:00')")
        behind, changed = (con.execute("SELECT session_id FROM conversations WHERE conversation_id = ?", (c,)).fetchone()[0]
                           for c in (1, 2))
    con.close()
    # a target row of conversation 2's session altered: different
    alter(dest, "UPDATE lcm_messages SET token_count = token_count + 1 WHERE id = (SELECT min(id) FROM lcm_messages "
                "WHERE json_extract(metadata, '$.conversation_id') = 2)")
    suite, cases = junit(src, dest, tmp_path, 3)
    assert set(cases) == source_sessions(src)
    assert sorted(name for name, failure in cases.items() if failure is not None) == sorted([behind, changed])
    pending, different = cases[behind], cases[changed]
    assert (pending.get("type"), pending.get("message")) == ("pending", "message: missing in target (1)")
    assert pending.text == "message: missing in target  1:999  (source message_id " \
        f"{sqlite3.connect(src).execute('SELECT max(message_id) FROM messages').fetchone()[0]})"
    assert different.get("type") == "different" and different.get("message").startswith("message: differs")
    assert "token_count" in different.text
    assert suite.get("failures") == "2"


def test_junit_into_a_folder_that_does_not_exist_is_a_usage_error_before_the_audit(migrated, tmp_path):
    src, dest = migrated
    out = tmp_path / "missing" / "audit.xml"
    proc = run_cli("audit", "--src", src, "--dest", dest, "--junit", out)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"lcm-etl: error: --junit {out}: the folder {out.parent} does not exist\n"
    assert not out.parent.exists()
