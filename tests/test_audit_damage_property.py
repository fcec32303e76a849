"""audit is the proof (issue 36, "Done when"): a reconciled installation damaged at random (a cold transcript cut
short or NUL-filled, target rows deleted or duplicated, a registered database gone) makes audit exit 0 only when
nothing was damaged; after a reconcile, audit exits 0 or names every part no reconcile can bring back.

The installation is fixtures/openclaw-hidden/cold/state (written by OpenClaw 2026.9.6: five cold windows, four live
ones) with the gateway state database of layout/ (OpenClaw's own agent_databases registry) registering the state's
own agent and, outside the state folder, the custom agentDir of layout/'s `research` agent. Each example runs the CLI
on a private copy; few examples, as each costs three runs.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from conftest import ROOT, run_cli

HIDDEN = ROOT / "fixtures" / "openclaw-hidden"
COLD = ("agents", "main", "sessions", "cold")
RESEARCH = ("agentdir", "openclaw-agent.sqlite")


def audit(home: Path) -> tuple[int, list[dict]]:
    proc = run_cli("audit", "--sessions", home / "state", "--dest", home / "t.sqlite", "--json")
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["differences"]


def reconcile(home: Path) -> None:
    proc = run_cli("reconcile", "--sessions", home / "state", "--dest", home / "t.sqlite", "-q")
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr


@pytest.fixture(scope="module")
def installation(tmp_path_factory) -> Path:
    """The installation and its target, reconciled once and audited clean (copied for each example)."""
    home = tmp_path_factory.mktemp("installation")
    shutil.copytree(HIDDEN / "cold" / "state", home / "state")
    (home / "state" / "state").mkdir()
    shutil.copyfile(HIDDEN / "layout" / "home" / ".openclaw-work" / "state" / "openclaw.sqlite",
                    home / "state" / "state" / "openclaw.sqlite")
    home.joinpath(*RESEARCH).parent.mkdir()
    shutil.copyfile(HIDDEN / "layout" / "home" / "agents" / "research" / "openclaw-agent.sqlite", home.joinpath(*RESEARCH))
    for p in home.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    con = sqlite3.connect(home / "state" / "state" / "openclaw.sqlite")
    with con:   # the research agent's database where this copy keeps it (a path outside the state: absolute)
        con.execute("UPDATE agent_databases SET path = ? WHERE agent_id = 'research'", (str(home.joinpath(*RESEARCH)),))
    con.close()
    reconcile(home)
    assert audit(home) == (0, [])
    return home


def rebased(home: Path, into: Path) -> Path:
    """A copy of the installation at `into`, its registry naming the copy's agentDir."""
    shutil.copytree(home, into)
    con = sqlite3.connect(into / "state" / "state" / "openclaw.sqlite")
    with con:
        con.execute("UPDATE agent_databases SET path = ? WHERE agent_id = 'research'", (str(into.joinpath(*RESEARCH)),))
    con.close()
    return into


def sessions_of(target: Path) -> list[str]:
    con = sqlite3.connect(target)
    try:
        return [r[0] for r in con.execute("SELECT DISTINCT session_id FROM lcm_messages ORDER BY 1")]
    finally:
        con.close()


damages = st.fixed_dictionaries({
    # a cold transcript (by its index in name order) cut to a fraction of its bytes, or its bytes all NUL
    "cut": st.one_of(st.none(), st.tuples(st.integers(0, 4), st.floats(0.0, 0.95))),
    "nul": st.one_of(st.none(), st.integers(0, 4)),
    # target rows of a session (by index), the session's last `n` rows deleted; another session's first row twice
    "delete": st.one_of(st.none(), st.tuples(st.integers(0, 9), st.integers(1, 3))),
    "duplicate": st.one_of(st.none(), st.integers(0, 9)),
    "drop_database": st.booleans(),
})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=damages)
# found by this test: a row duplicated in a session whose cold file is unreadable (the duplicate check covered only the
# sessions read)
@example(damage={"cut": None, "nul": 2, "delete": None, "duplicate": 3, "drop_database": False})
def test_audit_is_clean_only_when_nothing_was_damaged_and_after_a_reconcile_names_what_cannot_be_repaired(
        installation, damage):
    with tempfile.TemporaryDirectory() as tmp:
        home = rebased(installation, Path(tmp) / "home")
        target = home / "t.sqlite"
        cold = sorted(home.joinpath("state", *COLD).iterdir())
        sessions = sessions_of(target)
        unrecoverable: set[str] = set()     # each must be named by a finding's source_id (or entry, for a duplicate)
        damaged = False
        if damage["cut"] is not None:
            f, fraction = cold[damage["cut"][0]], damage["cut"][1]
            f.write_bytes(f.read_bytes()[:int(f.stat().st_size * fraction)])
            unrecoverable.add(str(f))
            damaged = True
        if damage["nul"] is not None:
            f = cold[damage["nul"]]
            f.write_bytes(b"\0" * f.stat().st_size)
            unrecoverable.add(str(f))
            damaged = True
        con = sqlite3.connect(target)
        with con:
            dup_session = sessions[damage["duplicate"] % len(sessions)] if damage["duplicate"] is not None else None
            if damage["delete"] is not None:
                index, n = damage["delete"]
                session = sessions[index % len(sessions)]
                if session == dup_session:   # the rows of another session: a copy of a deleted row is no duplicate
                    session = sessions[(sessions.index(session) + 1) % len(sessions)]
                con.execute("DELETE FROM lcm_messages WHERE id IN (SELECT id FROM lcm_messages WHERE session_id = ? "
                            "ORDER BY id DESC LIMIT ?)", (session, n))
                damaged = True   # repaired by the reconcile, when its transcript is intact
            if dup_session is not None:
                (entry,) = con.execute("SELECT json_extract(metadata, '$.transcript_entry_id') FROM lcm_messages "
                                       "WHERE session_id = ? ORDER BY id LIMIT 1", (dup_session,)).fetchone()
                con.execute("INSERT INTO lcm_messages (session_id, turn_index, role, content, token_count, "
                            "created_at, metadata) SELECT session_id, turn_index + 1000, role, content, token_count, "
                            "created_at, metadata FROM lcm_messages WHERE session_id = ? ORDER BY id LIMIT 1",
                            (dup_session,))
                unrecoverable.add(f"duplicated {entry}")
                damaged = True
        con.close()
        if damage["drop_database"]:
            home.joinpath(*RESEARCH).unlink()
            unrecoverable.add(str(home.joinpath(*RESEARCH)))
            damaged = True
        before = tree_of(home / "state")

        code, _ = audit(home)
        assert code == (3 if damaged else 0)
        reconcile(home)
        code, findings = audit(home)
        named = {f["source_id"] for f in findings} | {f"duplicated {f['source_id']}" for f in findings
                                                      if f["problem"] == "duplicated in target"}
        assert unrecoverable <= named, findings
        assert code == (3 if unrecoverable else 0), findings
        assert tree_of(home / "state") == before   # the sources as the damage left them, nothing beside them


def tree_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
