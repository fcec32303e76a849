"""audit is the proof (issue 36, items 3-5): it says CLEAN only when every registered database was read and every
transcript message is in the target once and as read; what it says a reconcile would import, a reconcile imports
(a re-run checks that the target still holds what its records claim); reconcile and audit read the same sources.

Every case runs the CLI on copies of fixtures/openclaw-hidden/ (written by OpenClaw 2026.9.6, its README says how),
damaged the way the issue describes, and checks exit codes, the exact finding, what landed (the expected/ entry
ids), that the source folder is byte-identical with nothing beside it, and that a second run adds nothing.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import ROOT, empty_target, run_cli

HIDDEN = ROOT / "fixtures" / "openclaw-hidden"
EXPECTED = HIDDEN / "expected"
WRITTEN_HOME = "/home/claw/"


def copy_state(state: str, into: Path) -> Path:
    shutil.copytree(HIDDEN / state, into)
    for p in into.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return into


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def expected(name: str) -> dict:
    return json.loads((EXPECTED / f"{name}.json").read_text())


def cli_json(*args, env: dict | None = None) -> dict:
    proc = run_cli(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def entry_ids(target: Path, session_id: str | None = None) -> list[str]:
    """The transcript entry ids the target holds (of one session), an entry twice listed twice."""
    con = sqlite3.connect(target)
    try:
        return [r[0] for r in con.execute(
            "SELECT json_extract(metadata, '$.transcript_entry_id') FROM lcm_messages "
            "WHERE json_extract(metadata, '$.transcript_entry_id') IS NOT NULL AND (?1 IS NULL OR session_id = ?1) "
            "ORDER BY id", (session_id,))]
    finally:
        con.close()


def sql(target: Path, statement: str, *params) -> list[tuple]:
    con = sqlite3.connect(target)
    try:
        with con:
            return con.execute(statement, params).fetchall()
    finally:
        con.close()


# --key-by session-key: a file takes the key its store window or archive row carries

@pytest.mark.parametrize("state", ["evicted/state", "evicted/before", "archive-tier/state"])
def test_key_by_session_key_lands_each_entry_once_and_audit_is_clean(tmp_path, state):
    copy = copy_state(state, tmp_path / "state")
    before = tree(copy)
    target = tmp_path / "t.sqlite"
    first = cli_json("reconcile", "--sessions", copy, "--dest", target, "--key-by", "session-key")
    ids = entry_ids(target)
    assert len(ids) == len(set(ids)) == first["messages"]["inserted"]
    assert cli_json("reconcile", "--sessions", copy, "--dest", target, "--key-by", "session-key")[
        "messages"]["inserted"] == 0
    audited = run_cli("audit", "--sessions", copy, "--dest", target, "--key-by", "session-key")
    assert audited.returncode == 0, audited.stdout
    assert tree(copy) == before


def test_key_by_session_key_puts_the_published_archive_in_its_rows_session(tmp_path):
    copy = copy_state("evicted/state", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    cli_json("reconcile", "--sessions", copy, "--dest", target, "--key-by", "session-key")
    archive = expected("evicted.telegram.gen1.archive")
    held = entry_ids(target, archive["sessionKey"])
    assert [held.count(m["id"]) for m in archive["activePath"]] == [1] * len(archive["activePath"])
    assert entry_ids(target, archive["sessionId"]) == []


# a target that lost rows is repaired: audit names the repair, reconcile does it, audit is clean

LOST = [("cold/state", "cold.plain-chat", "cold window (file)"),
        ("cold/state", "cold.unicode", "live window"),
        ("archive-tier/state", "archive-tier.tier.rewritten", "archive-tier file"),
        ("evicted/state", "evicted.telegram.gen1.archive", "deleted archive (store row)")]


@pytest.mark.parametrize("state,name,where", LOST, ids=[c[1] for c in LOST])
def test_a_message_deleted_from_the_target_is_named_with_its_repair_and_the_repair_restores_it(
        tmp_path, state, name, where):
    copy = copy_state(state, tmp_path / "state")
    before = tree(copy)
    target = tmp_path / "t.sqlite"
    cli_json("reconcile", "--sessions", copy, "--dest", target)
    session = expected(name)["sessionId"]
    held = entry_ids(target, session)
    gone = held[-1]
    sql(target, "DELETE FROM lcm_messages WHERE json_extract(metadata, '$.transcript_entry_id') = ?", gone)
    audited = run_cli("audit", "--sessions", copy, "--dest", target)
    assert audited.returncode == 3
    lines = audited.stdout.splitlines()
    assert f"  a reconcile would import: 1 transcript message ({where}: 1)" in lines
    assert f"  repair:  lcm-etl reconcile --sessions {copy} --dest {target}" in lines
    report = cli_json("reconcile", "--sessions", copy, "--dest", target)
    assert report["messages"]["inserted"] == 1
    assert "re-read: the target no longer holds its session's rows as recorded" in report["sync_decision"]["line"]
    assert sorted(entry_ids(target, session)) == sorted(held)
    assert run_cli("audit", "--sessions", copy, "--dest", target).returncode == 0
    again = cli_json("reconcile", "--sessions", copy, "--dest", target)
    assert again["messages"]["inserted"] == 0
    assert again["extra"]["files_read_from_offset"] == again["extra"]["transcripts_read"]   # the check is cheap
    assert tree(copy) == before


# a duplicated or changed target row is a difference

def test_a_duplicated_row_and_a_changed_row_are_differences(tmp_path):
    copy = copy_state("cold/state", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    cli_json("reconcile", "--sessions", copy, "--dest", target)
    assert run_cli("audit", "--sessions", copy, "--dest", target).returncode == 0
    session = expected("cold.plain-chat")["sessionId"]
    (dup, first_id), (changed, second_id) = sql(
        target, "SELECT json_extract(metadata, '$.transcript_entry_id'), id FROM lcm_messages WHERE session_id = ? "
                "ORDER BY id LIMIT 2", session)
    sql(target, "INSERT INTO lcm_messages (session_id, turn_index, role, content, token_count, created_at, metadata) "
                "SELECT session_id, turn_index + 1000, role, content, token_count, created_at, metadata "
                "FROM lcm_messages WHERE id = ?", first_id)
    sql(target, "UPDATE lcm_messages SET content = 'overwritten' WHERE id = ?", second_id)
    audited = run_cli("audit", "--sessions", copy, "--dest", target, "--json")
    assert audited.returncode == 3
    found = [(d["problem"], d["session_id"], d["source_id"].rsplit(":", 1)[-1]) for d in
             json.loads(audited.stdout)["differences"]]
    assert sorted(found) == [("changed in target", session, changed), ("duplicated in target", session, dup)]


# every registered database is read, or audit says which was not

def home_copy(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(HIDDEN / "layout" / "home", home)
    for p in home.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    sql(home / ".openclaw-work" / "state" / "openclaw.sqlite",
        "UPDATE agent_databases SET path = ? || substr(path, ?) WHERE path LIKE ? || '%'",
        f"{home}/", len(WRITTEN_HOME) + 1, WRITTEN_HOME)
    return home


def env_of(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    return {**env, "HOME": str(home), **extra}


RESEARCH = ("agents", "research", "openclaw-agent.sqlite")
PROFILE_MAIN = expected("layout.profile.main")


@pytest.mark.parametrize("damage,problem,why", [
    ("gone", "registered, not found", ""),
    ("lcm.db", "registered, not a session store", "; session store {store} holds no transcript_events table"),
    ("text", "registered, not a session store", "; not a SQLite database"),
    # the problem in its own words, parenthesis included, without the remedy the error adds
    ("no seq", "registered, not a session store", "; session store {store} (user_version 0) lacks transcript_events.seq, "
                                                  "which lcm-etl needs to read its transcripts")])
def test_a_registered_database_not_read_is_a_finding_and_the_rest_lands(tmp_path, damage, problem, why):
    home = home_copy(tmp_path)
    store = home.joinpath(*RESEARCH)
    if damage == "gone":
        store.unlink()
    elif damage == "lcm.db":
        shutil.copyfile(ROOT / "fixtures" / "lossless-claw" / "basic-0.9.4.db", store)
    elif damage == "no seq":
        store.unlink()
        with sqlite3.connect(store) as con:
            con.execute("CREATE TABLE transcript_events (session_id TEXT, event_json TEXT)")
        con.close()
    else:
        store.write_text("not a database\n")
    before = tree(home)
    state = home / ".openclaw-work"
    registry = state / "state" / "openclaw.sqlite"
    detail = f"registered for agent research in {registry}" + why.format(store=store)
    target = tmp_path / "t.sqlite"
    report = cli_json("reconcile", "--sessions", state, "--dest", target, env=env_of(home))
    assert report["warnings"] == [f"agent database {store}: {problem}; {detail}"]
    assert entry_ids(target) == [m["id"] for m in PROFILE_MAIN["activePath"]]
    audited = run_cli("audit", "--sessions", state, "--dest", target, "--json", env=env_of(home))
    assert audited.returncode == 3
    assert json.loads(audited.stdout)["differences"] == [
        {"kind": "agent database", "problem": problem, "session_id": None, "source_id": str(store), "detail": detail}]
    text = run_cli("audit", "--sessions", state, "--dest", target, env=env_of(home))
    assert f"  agent database: {problem}  {store}  ({detail})" in text.stdout.splitlines()
    assert tree(home) == before


def test_a_registry_that_cannot_be_read_is_a_finding(tmp_path):
    home = home_copy(tmp_path)
    state = home / ".openclaw-work"
    registry = state / "state" / "openclaw.sqlite"
    registry.write_bytes(registry.read_bytes()[:100] + b"\0" * 8000)   # a SQLite header, then nothing readable
    target = tmp_path / "t.sqlite"
    cli_json("reconcile", "--sessions", state, "--dest", target, env=env_of(home))
    audited = run_cli("audit", "--sessions", state, "--dest", target, "--json", env=env_of(home))
    assert audited.returncode == 3
    (finding,) = json.loads(audited.stdout)["differences"]
    assert (finding["kind"], finding["problem"], finding["source_id"]) == (
        "agent database", "registry not read", str(registry))


def test_a_state_folder_whose_agents_all_live_in_registered_agent_dirs_is_the_default_installation(tmp_path):
    home = home_copy(tmp_path)
    state = home / ".openclaw-work"
    shutil.rmtree(state / "agents")   # only state/openclaw.sqlite is left, naming the agentDir's database
    sql(state / "state" / "openclaw.sqlite", "DELETE FROM agent_databases WHERE agent_id = 'main'")
    before = tree(home)
    env = env_of(home, OPENCLAW_STATE_DIR=str(state))
    target = tmp_path / "t.sqlite"
    assert cli_json("reconcile", "--dest", target, env=env)["messages"]["inserted"] == 6
    assert entry_ids(target) == [m["id"] for m in expected("layout.agentdir.research")["activePath"]]
    audited = run_cli("audit", "--dest", target, env=env)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert tree(home) == before


# one decision for both commands' default sources

def test_reconcile_reads_the_lcm_db_beside_the_state_folder_as_audit_does(tmp_path):
    copy = copy_state("pending/state", tmp_path / "state")
    shutil.copyfile(ROOT / "fixtures" / "lossless-claw" / "basic-0.9.4.db", copy / "lcm.db")
    target = tmp_path / "t.sqlite"
    report = cli_json("reconcile", "--sessions", copy, "--dest", target)
    assert report["source"] == str(copy / "lcm.db")
    audited = cli_json_any("audit", "--sessions", copy, "--dest", target)
    assert audited["source"] == str(copy / "lcm.db")


def cli_json_any(*args) -> dict:
    proc = run_cli(*args, "--json")
    assert proc.returncode in (0, 3), proc.stderr
    return json.loads(proc.stdout)


def test_audit_of_a_target_that_does_not_exist_names_it_first_exits_3_and_creates_nothing(tmp_path):
    copy = copy_state("cold/state", tmp_path / "state")
    target = tmp_path / "none" / "t.sqlite"
    proc = run_cli("audit", "--sessions", copy, "--dest", target, "--json")
    assert proc.returncode == 3
    first = json.loads(proc.stdout)["differences"][0]
    assert first == {"kind": "target", "problem": "target does not exist", "session_id": None,
                     "source_id": str(target), "detail": "everything the sources hold is pending: check --dest, "
                     "or run reconcile or migrate first"}
    assert not target.parent.exists()
    assert run_cli("audit", "--sessions", copy, "--dest", empty_target(tmp_path / "e.sqlite")).returncode == 3


# the smaller defects

def test_exclude_deleted_reads_an_evicted_windows_published_file_whose_store_row_is_gone(tmp_path):
    copy = copy_state("evicted/state", tmp_path / "state")
    sql(copy / "agents" / "main" / "agent" / "openclaw-agent.sqlite", "DELETE FROM session_transcript_archives")
    before = tree(copy)
    target = tmp_path / "t.sqlite"
    report = cli_json("reconcile", "--sessions", copy, "--dest", target, "--exclude-deleted")
    assert report["messages"]["inserted"] == 94
    archive = expected("evicted.telegram.gen1.archive")
    assert entry_ids(target, archive["sessionId"]) == [m["id"] for m in archive["activePath"]]
    assert run_cli("audit", "--sessions", copy, "--dest", target, "--exclude-deleted").returncode == 0
    assert tree(copy) == before


def test_already_present_counts_each_held_message_once(tmp_path):
    copy = copy_state("evicted/state", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    first = cli_json("reconcile", "--sessions", copy, "--dest", target)
    assert (first["messages"]["inserted"], first["messages"]["already_present"]) == (94, 0)
    second = cli_json("reconcile", "--sessions", copy, "--dest", target)
    held = sql(target, "SELECT count(*) FROM lcm_messages")[0][0]
    assert (second["messages"]["inserted"], second["messages"]["already_present"]) == (0, held) == (0, 94)


def test_reconcile_full_reads_every_transcript_whole_and_repairs_what_no_record_check_sees(tmp_path):
    copy = copy_state("cold/state", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    cli_json("reconcile", "--sessions", copy, "--dest", target)
    session = expected("cold.plain-chat")["sessionId"]
    gone = entry_ids(target, session)[-1]
    # a row deleted and the session's marked count and highest id made to match: the cheap check cannot see it
    sql(target, "DELETE FROM lcm_messages WHERE json_extract(metadata, '$.transcript_entry_id') = ?", gone)
    sql(target, "UPDATE lcm_etl_session_marks SET (messages, max_message_id) = (SELECT count(*), max(id) FROM "
                "lcm_messages WHERE session_id = ?) WHERE source_path = '' AND session_id = ?", session, session)
    assert cli_json("reconcile", "--sessions", copy, "--dest", target)["messages"]["inserted"] == 0
    assert run_cli("audit", "--sessions", copy, "--dest", target).returncode == 3
    full = cli_json("reconcile", "--sessions", copy, "--dest", target, "--full")
    assert full["messages"]["inserted"] == 1
    assert full["sync_decision"]["line"] == ("offsets: 0 of 9 transcripts read from where the last run stopped; "
                                             "9 read whole: 9 --full: every transcript read whole")
    assert gone in entry_ids(target, session)
    assert run_cli("audit", "--sessions", copy, "--dest", target).returncode == 0


def test_audit_reads_the_targets_transcript_metadata_in_one_scan_for_both_checks(tmp_path):
    """The duplicate and the changed-content checks share one pass of json_extract over the target's rows."""
    from lcm_etl.commands.audit import _STORED_AS_READ
    from lcm_etl.read.sessions.run_file import SCHEMA

    target = empty_target(tmp_path / "t.sqlite")
    con = sqlite3.connect(":memory:")
    for statement in SCHEMA:
        con.execute(statement)
    con.execute("ATTACH ? AS target", (str(target),))
    plan = [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + _STORED_AS_READ)]
    assert [step for step in plan if "lcm_messages" in step and step.startswith("SCAN")] == ["SCAN target.lcm_messages"]
