"""reconcile and migrate over the same messages, in either order, converge: transcripts without
entry ids (v1 files) are matched to lcm.db's rows by lossless-claw's identity, and audit compares a
transcript row's time in lcm.db's unit (whole seconds)."""
from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from conftest import run_cli, target_rows
from test_reconcile import ACTIVE_PATH, build_pair, migrate, reconcile


def v1_pair(name: str, folder: Path) -> dict:
    """A crash pair (fixtures/build_crash_pair.py) as it is for a v1 transcript: the file has no entry ids and no
    version, and lossless-claw's backfill of it stored no transcript_entry_id."""
    pair = build_pair(name, folder)
    path = Path(pair["transcript"])
    entries = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        e = json.loads(line)
        if e["type"] == "session":
            e.pop("version", None)
        else:
            e.pop("id", None)
            e.pop("parentId", None)
        entries.append(e)
    path.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries), encoding="utf-8")
    con = sqlite3.connect(folder / "lcm.db")
    with con:
        con.execute("UPDATE messages SET transcript_entry_id = NULL")
    con.close()
    return pair


def identities(target: Path) -> Counter:
    return Counter((r["session_id"], r["role"], json.loads(r["metadata"])["identity_hash"]) for r in target_rows(target))


def audit(state: Path, target: Path) -> tuple[int, dict]:
    proc = run_cli("audit", "--src", state / "lcm.db", "--sessions", state / "agents" / "main" / "sessions",
                   "--dest", target, "--json")
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def run_in_order(state: Path, target: Path, order: str, with_src: bool) -> None:
    sessions = state / "agents" / "main" / "sessions"
    held = ["--src", state / "lcm.db"] if with_src else []
    steps = [lambda: migrate(state / "lcm.db", target), lambda: reconcile("--sessions", sessions, *held, "--dest", target)]
    for step in steps if order == "migrate-first" else steps[::-1]:
        step()


@pytest.mark.parametrize("name", ["tool-heavy", "channel-telegram"])
@pytest.mark.parametrize("with_src", [False, True], ids=["reconcile-alone", "reconcile-with-src"])
def test_reconcile_of_a_v1_transcript_then_migrate_of_its_lcm_db_holds_each_message_once(tmp_path, name, with_src):
    v1_pair(name, tmp_path / "state")
    target = tmp_path / "reconcile-first" / "lcm.sqlite"
    run_in_order(tmp_path / "state", target, "reconcile-first", with_src)
    got = target_rows(target)
    assert len(got) == ACTIVE_PATH[name]
    assert [r["turn_index"] for r in got] == list(range(len(got)))
    code, report = audit(tmp_path / "state", target)
    assert (code, report["differences"]) == (0, [])
    again = migrate(tmp_path / "state" / "lcm.db", target)
    assert (again["messages"]["inserted"], again["boundary_events"]) == (0, 0)


@pytest.mark.parametrize("name", ["tool-heavy", "channel-telegram"])
def test_both_orders_of_reconcile_and_migrate_end_with_the_same_messages(tmp_path, name):
    v1_pair(name, tmp_path / "state")
    ends = {}
    for order in ("migrate-first", "reconcile-first"):
        target = tmp_path / order / "lcm.sqlite"
        run_in_order(tmp_path / "state", target, order, with_src=False)
        run_in_order(tmp_path / "state", target, order, with_src=False)   # and again: nothing new
        ends[order] = identities(target)
        assert audit(tmp_path / "state", target)[0] == 0
    assert ends["migrate-first"] == ends["reconcile-first"]
    assert sum(ends["migrate-first"].values()) == ACTIVE_PATH[name]


def test_a_v3_transcript_reconciled_first_audits_clean_after_the_migrate(tmp_path):
    """The transcript's rows carry millisecond times, lcm.db's rows whole seconds: the same message."""
    build_pair("tool-heavy", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    run_in_order(tmp_path / "state", target, "reconcile-first", with_src=False)
    code, report = audit(tmp_path / "state", target)
    assert (code, report["differences"]) == (0, [])


def test_a_transcript_row_whose_time_really_differs_is_still_named(tmp_path):
    build_pair("tool-heavy", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    run_in_order(tmp_path / "state", target, "reconcile-first", with_src=False)
    con = sqlite3.connect(target)
    with con:
        con.execute("UPDATE lcm_messages SET created_at = '2026-06-21T15:00:00.000Z' WHERE turn_index = 2")
    con.close()
    code, report = audit(tmp_path / "state", target)
    assert code == 3
    assert [(d["problem"], d["source_id"]) for d in report["differences"]] == [("differs: created_at", "1:3")]


@pytest.mark.parametrize("v1", [False, True], ids=["v3", "v1"])
def test_audit_names_a_message_held_both_as_an_lcm_db_row_and_as_a_transcript_row(tmp_path, v1):
    """A target an earlier lcm-etl left with both copies (reconcile, then a migrate that did not see the
    transcript rows): audit names each message held twice; nothing is deleted by a migrate."""
    pair = (v1_pair if v1 else build_pair)("tool-heavy", tmp_path / "state")
    target, other = tmp_path / "t.sqlite", tmp_path / "transcript-only.sqlite"
    migrate(tmp_path / "state" / "lcm.db", target)
    reconcile("--sessions", pair["transcript"], "--dest", other)
    con = sqlite3.connect(target)
    with con:
        con.execute("ATTACH ? AS o", (str(other),))
        con.execute("""INSERT INTO lcm_messages (session_id, turn_index, role, content, token_count, created_at,
                                                 metadata)
                       SELECT session_id, turn_index + 100, role, content, token_count, created_at, metadata
                       FROM o.lcm_messages WHERE turn_index < 9""")
    con.close()
    code, report = audit(tmp_path / "state", target)
    assert code == 3
    dups = [d for d in report["differences"] if d["problem"].startswith("duplicated in target")]
    assert sorted(d["source_id"] for d in dups) == sorted(f"1:{seq}" for seq in range(1, 10))
    assert {d["problem"] for d in dups} == {"duplicated in target (2 rows)"}
    assert migrate(tmp_path / "state" / "lcm.db", target)["messages"]["inserted"] == 0
    assert len(target_rows(target)) == 9 + 9
