"""Property tests over generated lossless-claw sources.

The source schema is lossless-claw's own (the CREATE TABLE statements copied from a fixture's
sqlite_master); the data is random: sessions shared by several conversations, blank and padded
session ids, tied and mixed-format timestamps, seq gaps, parts, leaf and condensed summaries with tied
parent ordinals. Each example runs the real migration in-process (real run, re-run) and
checks idempotency (a re-run, and a `--full` re-run that plans everything again), no duplicates, turn_index order, token sums and summary ranges."""
from __future__ import annotations

import datetime as dt
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import copy_fixture, migrate_api, open_db, source_messages, table_counts, target_messages
from test_migrate_fixtures import expected_summaries

TABLES = ("conversations", "messages", "message_parts", "summaries", "summary_messages", "summary_parents")


@pytest.fixture(scope="module")
def lossless_claw_ddl(tmp_path_factory) -> list[str]:
    path = copy_fixture("basic-0.15.3.db", tmp_path_factory.mktemp("schema"))
    con = sqlite3.connect(path)
    try:
        ddl = [r[0] for r in con.execute(
            f"SELECT sql FROM sqlite_master WHERE type = 'table' AND name IN ({','.join('?' * len(TABLES))}) "
            "ORDER BY rootpage", TABLES)]
    finally:
        con.close()
    assert len(ddl) == len(TABLES)
    return ddl


SESSION_IDS = ["s-alpha", "  s-alpha\t", "s-beta", "", "   "]
ROLES = ["system", "user", "assistant", "tool"]
PART_TYPES = ["text", "reasoning", "tool", "file", "patch"]
BASE = dt.datetime(2026, 3, 1, 12, 0, 0)
text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@st.composite
def sources(draw):
    convs = []
    for cid in range(1, draw(st.integers(1, 4)) + 1):
        convs.append((cid, draw(st.sampled_from(SESSION_IDS)), draw(st.none() | st.sampled_from(["k1", " k2 "]))))
    messages, parts = [], []
    mid = 0
    for cid, _, _ in convs:
        seq = 0
        for _ in range(draw(st.integers(0, 6))):
            mid += 1
            seq += draw(st.integers(1, 3))                      # gaps are kept, never renumbered
            at = BASE + dt.timedelta(seconds=draw(st.integers(0, 4)))   # ties within and across conversations
            stamp = at.strftime("%Y-%m-%d %H:%M:%S") if draw(st.booleans()) else at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
            messages.append((mid, cid, seq, draw(st.sampled_from(ROLES)), draw(text), draw(st.integers(0, 99)), stamp))
            for ordinal in range(draw(st.integers(0, 2))):
                parts.append((f"p{mid}-{ordinal}", mid, "sess", draw(st.sampled_from(PART_TYPES)), ordinal,
                              draw(st.none() | text), draw(st.none() | st.sampled_from(["bash", "read"]))))
    summaries, links, edges = [], [], []
    leaves = []
    for cid, _, _ in convs:
        own = [m[0] for m in messages if m[1] == cid]
        for k in range(draw(st.integers(0, 2))):
            sid = f"sum_leaf_{cid}_{k}"
            summaries.append((sid, cid, "leaf", 0, draw(text), draw(st.integers(0, 50))))
            chosen = draw(st.lists(st.sampled_from(own), unique=True, max_size=4)) if own else []
            links += [(sid, m, i) for i, m in enumerate(chosen)]
            leaves.append(sid)
    for k in range(draw(st.integers(0, 2)) if leaves else 0):
        sid = f"sum_cond_{k}"
        cid = draw(st.sampled_from([c[0] for c in convs]))
        summaries.append((sid, cid, "condensed", 1, draw(text), draw(st.integers(0, 50))))
        for src in draw(st.lists(st.sampled_from(leaves), unique=True, min_size=1, max_size=3)):
            edges.append((sid, src, draw(st.integers(0, 1))))    # ordinals tie
    return convs, messages, parts, summaries, links, edges


def build_source(path: Path, ddl: list[str], data) -> None:
    convs, messages, parts, summaries, links, edges = data
    con = sqlite3.connect(path)
    for stmt in ddl:
        con.execute(stmt)
    con.executemany("INSERT INTO conversations (conversation_id, session_id, session_key) VALUES (?, ?, ?)", convs)
    con.executemany("INSERT INTO messages (message_id, conversation_id, seq, role, content, token_count, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", messages)
    con.executemany("INSERT INTO message_parts (part_id, message_id, session_id, part_type, ordinal, text_content, "
                    "tool_name) VALUES (?, ?, ?, ?, ?, ?, ?)", parts)
    con.executemany("INSERT INTO summaries (summary_id, conversation_id, kind, depth, content, token_count) "
                    "VALUES (?, ?, ?, ?, ?, ?)", summaries)
    con.executemany("INSERT INTO summary_messages (summary_id, message_id, ordinal) VALUES (?, ?, ?)", links)
    con.executemany("INSERT INTO summary_parents (summary_id, parent_summary_id, ordinal) VALUES (?, ?, ?)", edges)
    con.commit()
    con.close()


def run(src: Path, dest: Path, dry_run: bool = False, full: bool = False) -> dict:
    return migrate_api(src, dest, dry_run=dry_run, full=full)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=sources())
def test_generated_sources_import_once_in_turn_order_with_token_sums_and_rerun_as_a_no_op(lossless_claw_ddl, data):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "src" / "lcm.db"
        src.parent.mkdir()
        build_source(src, lossless_claw_ddl, data)
        dest = tmp / "out" / "lcm.sqlite"

        run(src, dest)

        oracle = open_db(src)
        tgt = open_db(dest)
        try:
            src_rows = source_messages(oracle)
            imported = target_messages(tgt)       # asserts no (conversation, seq) is imported twice
            assert len(imported) == len(src_rows) == tgt.execute("SELECT count(*) FROM lcm_messages").fetchone()[0]
            by_session: dict[str, list] = {}
            for m in src_rows:                    # sorted by (session, time, conversation, seq)
                t = imported[(str(m["conversation_id"]), m["seq"])]
                assert (t["session_id"], t["role"], t["content"], t["token_count"]) == \
                    (m["session"], m["role"], m["content"], m["token_count"])
                by_session.setdefault(m["session"], []).append(t)
            for session, rows in by_session.items():
                assert [t["turn_index"] for t in rows] == list(range(len(rows))), session
            events = {r[0]: tuple(r[1:]) for r in tgt.execute(
                "SELECT session_id, msg_before, tokens_before, tokens_after FROM lcm_compaction_events")}
            assert events == {s: (len(rows), sum(t["token_count"] for t in rows), sum(t["token_count"] for t in rows))
                              for s, rows in by_session.items()}
            n_parts = oracle.execute("SELECT count(*) FROM message_parts").fetchone()[0]
            assert tgt.execute("SELECT count(*) FROM lcm_message_parts").fetchone()[0] == n_parts
            assert tgt.execute("SELECT count(*) FROM (SELECT DISTINCT message_id, ordinal FROM lcm_message_parts)"
                               ).fetchone()[0] == n_parts
            want = expected_summaries(oracle, tgt)
            got = {r["id"]: (r["session_id"], r["msg_start"], r["msg_end"], r["parent_id"])
                   for r in tgt.execute("SELECT * FROM lcm_summary_nodes")}
            assert got == {k: v[:4] for k, v in want.items()}
            assert tgt.execute("PRAGMA foreign_key_check").fetchall() == []
            before = table_counts(tgt)
        finally:
            oracle.close()
            tgt.close()

        # the plain re-run meets the unchanged-source shortcut; --full plans everything again and must find
        # every row already present, not merely skip the work
        second, third = run(src, dest), run(src, dest, full=True)
        assert second["sync_decision"]["how"] == "no-op" and third["sync_decision"]["how"] != "no-op"
        for rerun in (second, third):
            for kind in ("messages", "parts", "summaries"):
                assert rerun[kind]["inserted"] == 0 and rerun[kind]["updated"] == 0
            assert rerun["boundary_events"] == 0 and rerun["sessions_touched"] == [] and rerun["parents_updated"] == 0
        assert third["messages"]["already_present"] == len(src_rows)
        tgt = open_db(dest)
        try:
            after = table_counts(tgt)
        finally:
            tgt.close()
        assert after.pop("lcm_etl_runs") == before.pop("lcm_etl_runs") + 2
        assert after.pop("lcm_etl_sync_state") == before.pop("lcm_etl_sync_state") + 2   # beside their ledger rows
        assert after == before
