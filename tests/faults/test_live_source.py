"""A live lossless-claw appends to the source while migrate reads it (one consistent snapshot: docs/design.md, "The source snapshot")."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from faultlib import HERE, PATIENCE_S, assert_sound, connect, generate_source, run

pytestmark = pytest.mark.slow


class Writer:
    def __init__(self, db: Path, folder: Path):
        self.stop = folder / "stop-writer"
        self.proc = subprocess.Popen([sys.executable, str(HERE / "actors.py"), "source-writer", str(db),
                                      str(self.stop)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self.commits = 0

    def wait_for_commits(self, n: int) -> None:
        target = self.commits + n
        while self.commits < target:
            line = self.proc.stdout.readline()
            assert line, "the source writer died"
            self.commits = int(line.split()[1])

    def finish(self) -> int:
        self.stop.touch()
        for line in self.proc.stdout:
            self.commits = int(line.split()[1])
        assert self.proc.wait(timeout=PATIENCE_S) == 0
        return self.commits


def source_links(src: Path) -> dict[str, list[tuple[int, int]]]:
    """summary id -> its linked messages as (conversation_id, seq), read from a private copy."""
    con = sqlite3.connect(src)
    try:
        out: dict[str, list] = {}
        for sid, cid, seq in con.execute("SELECT sm.summary_id, m.conversation_id, m.seq FROM summary_messages sm "
                                         "JOIN messages m USING (message_id)"):
            out.setdefault(sid, []).append((cid, seq))
        return out
    finally:
        con.close()


def imported(target: Path) -> tuple[set, dict]:
    con = connect(target)
    try:
        msgs = {}
        for r in con.execute("SELECT session_id, turn_index, metadata FROM lcm_messages"):
            meta = json.loads(r["metadata"])
            msgs[(int(meta["conversation_id"]), meta["source_seq"])] = (r["session_id"], r["turn_index"])
        sums = {r["id"]: tuple(r) for r in con.execute("SELECT id, session_id, msg_start, msg_end FROM lcm_summary_nodes")}
        return msgs, sums
    finally:
        con.close()


def live_messages(target: Path) -> list[str]:
    con = connect(target)
    try:
        return [r[0] for r in con.execute("SELECT json_extract(metadata, '$.identity_hash') FROM lcm_messages "
                                          "WHERE json_extract(metadata, '$.identity_hash') LIKE 'live-%'")]
    finally:
        con.close()


def test_a_source_written_to_during_the_run_imports_one_consistent_snapshot_and_the_next_run_takes_the_rest(
        tmp_path):
    src = generate_source(tmp_path / "openclaw" / "lcm.db", messages=3000, seed=3)
    target = tmp_path / "remnic" / "lcm.sqlite"
    writer = Writer(src, tmp_path)
    try:
        writer.wait_for_commits(5)
        first = run("migrate", "--src", src, "--dest", target, "--json", tmp=tmp_path / "tmp")
        writer.wait_for_commits(3)            # something the first run cannot have seen
    finally:
        total = writer.finish()
    assert first.returncode == 0, first.stderr
    assert total >= 8

    # one snapshot: every imported summary's linked messages are imported, and every range is real
    assert_sound(target)
    msgs, sums = imported(target)
    links = source_links(src)
    turns = {}
    for session, turn in msgs.values():
        turns.setdefault(session, set()).add(turn)
    for sid, (_, session, lo, hi) in sums.items():
        assert lo in turns[session] and hi in turns[session], f"{sid}: range {lo}..{hi} points past the import"
        assert all(m in msgs for m in links.get(sid, [])), f"{sid} links messages the import lacks"
    live = live_messages(target)
    live_sums = [s for s in sums if s.startswith("sum_live_")]
    assert len(live) == 3 * len(live_sums), "a commit of the live writer was imported in part"
    commits = sorted({int(h.split("-")[1]) for h in live})
    assert commits == list(range(1, len(commits) + 1)), "the import is not the source as of one commit"
    assert 5 <= len(live_sums) < total

    # the rest is pending, and the next run completes it
    audit = run("audit", "--src", src, "--dest", target, "-q", tmp=tmp_path / "tmp")
    assert audit.returncode == 3, audit.stderr
    second = run("migrate", "--src", src, "--dest", target, "--json", tmp=tmp_path / "tmp")
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["messages"]["inserted"] == 3 * (total - len(live_sums))
    assert report["summaries"]["inserted"] == total - len(live_sums)
    audit = run("audit", "--src", src, "--dest", target, "-q", tmp=tmp_path / "tmp")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert_sound(target)
    msgs, sums = imported(target)
    assert sum(1 for s in sums if s.startswith("sum_live_")) == total
