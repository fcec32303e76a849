"""Helpers of the runs/undo tests: a target's content digest, a target with Remnic's own rows, the ledger."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import sys

from conftest import ROOT, make_native_target, run_cli

sys.path.insert(0, str(ROOT / "tests" / "faults"))
from faultlib import generate_source  # noqa: F401  (re-exported: a generated lcm.db, as the fault suite makes it)

# What a target holds, Remnic's tables and lcm-etl's provenance of source facts; not the ledger or lcm-etl's
# record of runs (undo adds to those by design).
CONTENT_TABLES = ("lcm_meta", "lcm_messages", "lcm_message_parts", "lcm_summary_nodes", "lcm_compaction_events",
                  "lcm_etl_summaries", "lcm_etl_summary_edges", "lcm_etl_conversations", "lcm_etl_large_files",
                  "lcm_etl_skipped")
NATIVE_SESSION = "agent:main:main"


def digest(path: Path, ids: bool = True) -> dict[str, str]:
    """Per table, a hash of its rows (and the FTS indexes checked against their content). ids=False
    identifies messages by (session, turn) instead of id, for a target whose ids legitimately differ
    (one built new from source ids against one written into an existing file); fired_at of boundary
    events is the run's clock and is always left out."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        for fts in ("lcm_messages_fts", "lcm_summaries_fts"):
            if fts in names:   # raises if the index and its external content disagree
                con.execute(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')")
        queries = {t: f"SELECT * FROM {t}" for t in CONTENT_TABLES if t in names}
        if "lcm_messages" in names:
            turn = "(SELECT json_array(m.session_id, m.turn_index) FROM lcm_messages m WHERE m.id = p.message_id)"
            queries["lcm_messages"] = ("SELECT id, session_id, turn_index, role, content, token_count, created_at, "
                                       "metadata FROM lcm_messages") if ids else (
                "SELECT session_id, turn_index, role, content, token_count, created_at, metadata FROM lcm_messages")
            queries["lcm_message_parts"] = (f"SELECT p.*, {turn} FROM lcm_message_parts p" if ids else
                                            f"SELECT {turn}, ordinal, kind, payload, tool_name, file_path, created_at "
                                            "FROM lcm_message_parts p")
            queries["lcm_compaction_events"] = ("SELECT " + ("id, " if ids else "") + "session_id, msg_before, "
                                                "tokens_before, tokens_after FROM lcm_compaction_events")
            queries["lcm_summary_nodes"] = "SELECT " + ("rowid, " if ids else "") + "* FROM lcm_summary_nodes"
            queries["fts_messages"] = ("SELECT rowid FROM lcm_messages_fts_docsize" if ids else
                                       "SELECT count(*) FROM lcm_messages_fts_docsize")
            queries["fts_summaries"] = ("SELECT rowid FROM lcm_summaries_fts_docsize" if ids else
                                        "SELECT count(*) FROM lcm_summaries_fts_docsize")
        if ids and "sqlite_sequence" in names:
            queries["sqlite_sequence"] = "SELECT * FROM sqlite_sequence WHERE seq > 0"
        out = {}
        for name, sql in queries.items():
            rows = sorted(json.dumps(list(r), default=repr) for r in con.execute(sql))
            if not rows:   # an empty table is no content: a run may create lcm-etl's tables in the file
                continue
            out[name] = f"{len(rows)} rows " + hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]
        return out
    finally:
        con.close()


def native_target(path: Path, turns: int = 2, session: str = NATIVE_SESSION) -> Path:
    """A Remnic target as a live Remnic leaves it: schema v2, WAL, a native session (with FTS rows)."""
    con = make_native_target(path)
    add_native_messages(con, session, turns)
    con.close()
    return path


def add_native_messages(con: sqlite3.Connection, session: str, n: int) -> list[int]:
    """n messages appended to `session` as Remnic appends them: after its highest turn, with FTS rows."""
    base = con.execute("SELECT coalesce(max(turn_index), -1) + 1 FROM lcm_messages WHERE session_id = ?",
                       (session,)).fetchone()[0]
    ids = []
    for i in range(n):
        text = f"native message {base + i} of {session}"
        cur = con.execute("INSERT INTO lcm_messages (session_id, turn_index, role, content, token_count, created_at, "
                          "metadata) VALUES (?, ?, 'user', ?, 4, '2026-01-01T00:00:00.000Z', NULL)",
                          (session, base + i, text))
        con.execute("INSERT INTO lcm_messages_fts (rowid, content) VALUES (?, ?)", (cur.lastrowid, text))
        ids.append(cur.lastrowid)
    return ids


def cli_ok(*args) -> dict | None:
    """Run the CLI with --json; it must succeed silently on stderr. Returns its JSON report."""
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return json.loads(proc.stdout)


def runs(target: Path) -> list[dict]:
    return cli_ok("runs", "--dest", target)["runs"]


def undo(target: Path, run_id: str, *extra) -> dict:
    return cli_ok("undo", run_id, "--dest", target, *extra)


def refused(target: Path, run_id: str, *extra) -> str:
    """Undo must refuse with exit 2 and one line on stderr; returns that line."""
    proc = run_cli("undo", run_id, "--dest", target, *extra)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def kill_after_batches(proc, target: Path, n: int = 2) -> None:
    """SIGKILL the run (its own process group) once it has committed `n` batches into `target`: one message
    range each (lcm_etl_run_ranges)."""
    import os
    import signal
    import time

    deadline = time.monotonic() + 600

    def committed() -> int:
        con = sqlite3.connect(f"file:{target}?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM lcm_etl_run_ranges WHERE tbl = 'lcm_messages'").fetchone()[0]
        except sqlite3.OperationalError:   # the first batch has not created the table yet
            return 0
        finally:
            con.close()

    while committed() < n and proc.poll() is None:
        assert time.monotonic() < deadline, "the run committed no batch"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "the run finished before it could be killed"
