"""Boundary events under repeated syncs (docs/mapping.md, "Boundary events"; transforms/89_move_boundary.sql): a sync
that only extends the rows a run of the same command and source left at a session's end moves that run's boundary
to the new end; after Remnic's own rows or another source's, a new seam. `undo` puts a moved boundary back. The
CLI on real files, as `--watch` runs it: one sync after each append."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import fetch, run_cli
from test_reconcile import build_pair, migrate, reconcile
from undolib import add_native_messages, refused, undo


def events(target: Path) -> list[tuple]:
    return fetch(target, "SELECT id, session_id, fired_at, msg_before, tokens_before, tokens_after "
                         "FROM lcm_compaction_events ORDER BY id")


def session_end(target: Path, session: str) -> tuple[int, int]:
    """(max turn + 1, token sum) of a session: where a boundary at its end stands."""
    con = sqlite3.connect(target)
    try:
        return con.execute("SELECT max(turn_index) + 1, sum(token_count) FROM lcm_messages WHERE session_id = ?",
                           (session,)).fetchone()
    finally:
        con.close()


class Gateway:
    """A state dir whose transcript grows the way OpenClaw appends it; `sync(n)`: the transcript holds its first n
    lines, then one reconcile (as a `--watch` sync)."""

    def __init__(self, tmp_path: Path):
        pair = build_pair("tool-heavy", tmp_path / "state")
        self.session = pair["session_id"]
        self.src = tmp_path / "state" / "lcm.db"
        self.transcript = Path(pair["transcript"])
        self.lines = self.transcript.read_bytes().splitlines(keepends=True)
        self.target = tmp_path / "t.sqlite"

    def sync(self, n: int) -> dict:
        self.transcript.write_bytes(b"".join(self.lines[:n]))
        return reconcile("--sessions", self.transcript.parent, "--dest", self.target)

    def audit(self, *extra) -> int:
        proc = run_cli("audit", "--sessions", self.transcript.parent, "--dest", self.target, "--json", *extra)
        assert proc.returncode in (0, 3), proc.stderr
        return proc.returncode


def test_syncs_that_only_extend_their_own_rows_leave_one_boundary_at_the_session_end(tmp_path):
    gw = Gateway(tmp_path)
    first = gw.sync(10)
    assert (first["boundary_events"], first["boundaries_moved"]) == (1, 0)
    for n in (15, 20, 24, len(gw.lines)):
        report = gw.sync(n)
        assert report["messages"]["inserted"] > 0
        assert (report["boundary_events"], report["boundaries_moved"]) == (0, 1)
        assert report["warnings"] == []
        ((_, session, fired_at, msg_before, before, after),) = events(gw.target)
        assert session == gw.session and (msg_before, before) == session_end(gw.target, gw.session) and before == after
    proc = run_cli("reconcile", "--sessions", gw.transcript.parent, "--dest", gw.target)
    assert proc.returncode == 0 and "  boundary events written 0\n" in proc.stdout   # nothing added: nothing moved
    assert gw.audit() == 0


def test_a_sync_after_remnic_appended_to_the_session_places_a_new_seam(tmp_path):
    gw = Gateway(tmp_path)
    gw.sync(10)
    con = sqlite3.connect(gw.target)
    with con:
        add_native_messages(con, gw.session, 2)
    con.close()
    report = gw.sync(15)
    assert (report["boundary_events"], report["boundaries_moved"]) == (1, 0)
    first, second = events(gw.target)
    assert second[3:5] == session_end(gw.target, gw.session) and first[3] < second[3]
    # the next sync extends only its own rows again: the new seam moves, the one before Remnic's rows stays
    report = gw.sync(20)
    assert (report["boundary_events"], report["boundaries_moved"]) == (0, 1)
    assert events(gw.target)[0] == first and events(gw.target)[1][3:5] == session_end(gw.target, gw.session)


def test_a_sync_after_another_source_extended_the_session_places_a_new_seam(tmp_path):
    gw = Gateway(tmp_path)
    gw.sync(10)   # 6 messages of the transcript; lcm.db holds 9
    between = migrate(gw.src, gw.target)   # lcm.db's 3 more messages, after reconcile's: a seam of its own
    assert between["messages"]["inserted"] == 3
    assert (between["boundary_events"], between["boundaries_moved"]) == (1, 0)
    report = gw.sync(15)   # after migrate's rows: a new seam, migrate's stays
    assert report["messages"]["inserted"] > 0
    assert (report["boundary_events"], report["boundaries_moved"]) == (1, 0)
    assert len(events(gw.target)) == 3
    report = gw.sync(len(gw.lines))
    assert (report["boundary_events"], report["boundaries_moved"]) == (0, 1)
    got = events(gw.target)
    assert len(got) == 3 and got[2][3:5] == session_end(gw.target, gw.session)
    assert [e[3] for e in got] == sorted(e[3] for e in got)
    assert gw.audit("--src", gw.src) == 0


def test_undo_of_a_sync_puts_the_boundary_it_moved_back(tmp_path):
    gw = Gateway(tmp_path)
    runs, states = [], [events(gw.target) if gw.target.exists() else []]
    for n in (10, 15, 20):
        runs.append(gw.sync(n)["run_id"])
        states.append(events(gw.target))
    assert [len(s) for s in states] == [0, 1, 1, 1] and states[1] != states[2] != states[3]
    # the second sync's boundary was moved by the third: the third is undone first
    assert "undo that run first" in refused(gw.target, runs[1])
    report = undo(gw.target, runs[2])
    assert report["restored"].get("boundary_events") == 1 and report["removed"]["boundary_events"] == 0
    assert events(gw.target) == states[2]
    undo(gw.target, runs[1])
    assert events(gw.target) == states[1]
    assert undo(gw.target, runs[0])["removed"]["boundary_events"] == 1
    assert events(gw.target) == []
    # synced again from there: the same seam as before the undos
    gw.sync(20)
    (event,) = events(gw.target)
    assert event[3:] == states[3][0][3:]
    assert gw.audit() == 0


def test_the_report_says_what_was_moved(tmp_path):
    gw = Gateway(tmp_path)
    gw.sync(10)
    gw.transcript.write_bytes(b"".join(gw.lines[:15]))
    proc = run_cli("reconcile", "--sessions", gw.transcript.parent, "--dest", gw.target)
    assert proc.returncode == 0, proc.stderr
    assert "  boundary events written 0, moved 1 (the session's last seam, to its new end)\n" in proc.stdout
    gw.transcript.write_bytes(b"".join(gw.lines[:20]))
    args = ("reconcile", "--sessions", gw.transcript.parent, "--dest", gw.target, "--json")
    dry = json.loads(run_cli(*args, "--dry-run").stdout)
    real = json.loads(run_cli(*args).stdout)
    assert (dry["boundary_events"], dry["boundaries_moved"]) == (real["boundary_events"], real["boundaries_moved"]) \
        == (0, 1)


def long_transcript(path: Path, messages: int) -> list[bytes]:
    """A header and `messages` plain messages, each the child of the one before (lines, to append in steps)."""
    lines = [b'{"type":"session","version":3,"id":"long","timestamp":"2026-06-21T14:00:00.000Z","cwd":"/"}\n']
    parent = None
    for i in range(messages):
        eid = f"e{i:05d}"
        lines.append(json.dumps({"type": "message", "id": eid, "parentId": parent,
                                 "timestamp": f"2026-06-21T14:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
                                 "message": {"role": "user" if i % 2 == 0 else "assistant",
                                             "content": f"message {i}", "timestamp": 1782050400000 + i}}).encode()
                     + b"\n")
        parent = eid
    return lines


def test_a_killed_sync_completed_by_the_next_run_leaves_the_seams_an_uninterrupted_sync_leaves(tmp_path):
    import os
    import signal
    import subprocess
    import time

    from conftest import LCM_ETL

    lines = long_transcript(tmp_path, 1200)
    ends = {}
    for name, kill in (("twin", False), ("killed", True)):
        folder = tmp_path / name
        folder.mkdir()
        jsonl, target = folder / "long.jsonl", folder / "t.sqlite"
        jsonl.write_bytes(b"".join(lines[:200]))
        reconcile("--sessions", jsonl, "--dest", target)
        jsonl.write_bytes(b"".join(lines))
        proc = subprocess.Popen([str(LCM_ETL), "reconcile", "--sessions", str(jsonl), "--dest", str(target),
                                 "--batch-rows", "100", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        if kill:   # once it has committed a batch of the sync (if it is not done by then: the test still holds)
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                con = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
                n = con.execute("SELECT count(*) FROM lcm_etl_run_ranges WHERE tbl = 'lcm_messages'").fetchone()[0]
                con.close()
                if n > 1:
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
                time.sleep(0.005)
        proc.communicate(timeout=300)
        reconcile("--sessions", jsonl, "--dest", target)   # the next sync completes what a kill left
        ends[name] = [e[1:2] + e[3:] for e in events(target)]
        assert ends[name] and ends[name][-1][1:3] == session_end(target, "long")
    assert ends["killed"] == ends["twin"] and len(ends["twin"]) == 1
