"""A source that keeps growing converges (docs/design.md, "Sync"): migrate the source as it was before it grew
(tests/tools/earlier.py, a copy of the contract's own tool), then the source as it is now, into one target;
the independent checker (tests/tools/lcmcheck.py) and `audit` must then find nothing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import FIXTURES, copy_fixture, migrate_api, open_db, run_cli

TOOLS = Path(__file__).parent / "tools"
FIXTURE_SESSIONS = Path(__file__).resolve().parent.parent / "fixtures" / "sessions"


def earlier(src: Path, out: Path, shape: str, share: float = 1 / 3) -> None:
    proc = subprocess.run([sys.executable, str(TOOLS / "earlier.py"), str(src), str(out), "--shape", shape,
                           "--share", str(share)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def lcmcheck(src: Path, target: Path) -> str:
    proc = subprocess.run([sys.executable, str(TOOLS / "lcmcheck.py"), str(src), str(target)],
                          capture_output=True, text=True)
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 else proc.stdout + proc.stderr


def audit_exit(src: Path, target: Path) -> int:
    return run_cli("audit", "--src", src, "--dest", target, "--quiet").returncode


def grow(tmp_path, name: str, shape: str, between=None) -> tuple[Path, Path, dict]:
    """Migrate the source as it was before it grew, run `between(before, target)`, then migrate the source
    as it is now into the same target. Returns the source, the target and the second migrate's report."""
    src = copy_fixture(name, tmp_path / "src")
    before = tmp_path / "before.db"
    earlier(src, before, shape)
    target = tmp_path / "out" / "lcm.sqlite"
    migrate_api(before, target)
    if between:
        between(before, target)
    return src, target, migrate_api(src, target)


@pytest.mark.parametrize("shape", ["tail", "condense"])
@pytest.mark.parametrize("name", FIXTURES)
def test_a_source_that_grew_between_two_migrates_converges(tmp_path, name, shape):
    src, target, second = grow(tmp_path, name, shape)
    assert lcmcheck(src, target).startswith("lcmcheck: 0 problems"), lcmcheck(src, target)
    assert audit_exit(src, target) == 0
    # a third run finds nothing left to do
    third = migrate_api(src, target, full=True)
    assert (third["messages"]["inserted"], third["summaries"]["inserted"], third["parents_updated"],
            third["boundary_events"]) == (0, 0, 0, 0)
    if shape == "condense" and second["summaries"]["inserted"]:
        # lossless-claw condensed summaries the first run had imported: they got their parent now
        con = open_db(target)
        orphans_covered = con.execute("""
            SELECT count(*) FROM lcm_etl_summary_edges e JOIN lcm_summary_nodes n ON n.id = e.summary_id
            WHERE e.kept = 1 AND n.parent_id IS NOT e.covering_summary_id""").fetchone()[0]
        assert orphans_covered == 0
        assert second["parents_updated"] > 0


@pytest.mark.parametrize("shape", ["tail", "condense"])
@pytest.mark.parametrize("name", ["basic-0.15.3.db", "multiparent-newest.db"])
def test_a_reconcile_between_two_migrates_of_a_growing_source_does_not_disturb_convergence(tmp_path, name, shape):
    def reconcile(before, target):
        proc = run_cli("reconcile", "--sessions", FIXTURE_SESSIONS / "tool-heavy.jsonl", "--src", before,
                       "--dest", target, "--quiet")
        assert proc.returncode == 0, proc.stderr

    src, target, _ = grow(tmp_path, name, shape, between=reconcile)
    assert lcmcheck(src, target).startswith("lcmcheck: 0 problems"), lcmcheck(src, target)
    assert audit_exit(src, target) == 0


def content_of(target: Path) -> dict:
    """What a target holds, by content: messages and summaries without ids or the turn order of appended rows."""
    con = open_db(target)
    messages = sorted((r["session_id"], r["role"], r["content"], r["token_count"], r["created_at"],
                       json.loads(r["metadata"])["source_message_id"])
                      for r in con.execute("SELECT * FROM lcm_messages"))
    parts = con.execute("SELECT count(*), sum(length(payload)) FROM lcm_message_parts").fetchone()
    summaries = sorted(tuple(r) for r in con.execute(
        "SELECT id, session_id, depth, parent_id, summary_text, token_count FROM lcm_summary_nodes"))
    fts = con.execute("SELECT count(*) FROM lcm_messages_fts_docsize").fetchone()[0]
    return {"messages": messages, "parts": tuple(parts), "summaries": summaries, "fts": fts}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["basic-0.15.3.db", "multiparent-newest.db", "wal-newest.db"]),
       shares=st.lists(st.floats(min_value=0.05, max_value=0.9), min_size=1, max_size=3, unique=True),
       condense_before_end=st.booleans())
def test_random_growth_sequences_end_equal_to_one_import_of_the_final_source(tmp_path_factory, name, shares,
                                                                              condense_before_end):
    folder = tmp_path_factory.mktemp("growth")
    src = copy_fixture(name, folder / "src")
    steps = []
    for n, share in enumerate(sorted(shares, reverse=True)):   # the source, smaller to larger
        steps.append(folder / f"step{n}.db")
        earlier(src, steps[-1], "tail", share)
    if condense_before_end:
        steps.append(folder / "condensed-later.db")
        earlier(src, steps[-1], "condense")
    target = folder / "grown" / "lcm.sqlite"
    for step in [*steps, src]:
        migrate_api(step, target)
    once = folder / "once" / "lcm.sqlite"
    migrate_api(src, once)
    assert content_of(target) == content_of(once)
    assert lcmcheck(src, target).startswith("lcmcheck: 0 problems"), lcmcheck(src, target)
