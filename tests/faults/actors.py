"""Other processes the fault tests run beside lcm-etl: `python actors.py ROLE ARGS...`.

source-writer DB STOP [SECONDS [compact]]
                          a live lossless-claw: commits 3 messages and a leaf summary linking them, in a
                          loop, until the file STOP exists (or SECONDS passed); prints one line per commit
                          ("commit N"). With `compact`, every third commit is followed by a condensed pass
                          (condense(): a new summary over the oldest uncovered ones, as compaction does).
lock-holder DB SECONDS    holds a write lock (BEGIN IMMEDIATE) on DB for SECONDS (or, given "released", until
                          its stdin is closed), then rolls back; prints "locked" once it holds it.
run-lock-holder LOCK      another lcm-etl run as far as the run lock goes: holds flock on the file LOCK
                          until its stdin is closed; prints "locked" once it holds it.
remnic-writer DB STOP OUT a live Remnic: every ~100 ms opens DB with busy_timeout=5000 and appends a native
                          row to session agent:main:main (with its FTS row) in its own transaction; writes
                          {"waits": [...], "committed_at": [...], "errors": [...]} to OUT when STOP exists
                          (committed_at: the wall-clock time of each commit).
"""
from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path


def commit_messages(con: sqlite3.Connection, cid: int, n: int) -> list[int]:
    """One lossless-claw turn commit: 3 messages and a leaf summary linking them (commit number n)."""
    con.execute("BEGIN IMMEDIATE")
    seq = con.execute("SELECT coalesce(max(seq), 0) FROM messages WHERE conversation_id = ?", (cid,)).fetchone()[0]
    ids = []
    for k in range(3):
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1893456000 + n * 10 + k))   # after every generated row
        cur = con.execute(
            "INSERT INTO messages (conversation_id, seq, role, content, token_count, identity_hash, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (cid, seq + 1 + k, ("user", "assistant", "user")[k], f"live message {n}.{k}", 5 + k,
             f"live-{n}-{k}", ts))
        ids.append(cur.lastrowid)
    sid = f"sum_live_{n:06d}"
    con.execute("INSERT INTO summaries (summary_id, conversation_id, kind, depth, content, token_count, "
                "earliest_at, latest_at, created_at, file_ids, model) VALUES (?, ?, 'leaf', 0, ?, 7, ?, ?, ?, "
                "'[]', 'unknown')", (sid, cid, f"live summary {n}", "2030-01-01T00:00:00.000Z",
                                     "2030-01-01T00:00:02.000Z", "2030-01-01 00:00:03"))
    con.executemany("INSERT INTO summary_messages (summary_id, message_id, ordinal) VALUES (?, ?, ?)",
                    [(sid, m, o) for o, m in enumerate(ids)])
    con.execute("COMMIT")
    return ids


def condense(con: sqlite3.Connection, cid: int, n: int, fan_in: int = 4) -> str | None:
    """A lossless-claw condensed pass (as lossless-claw's compaction writes it): one summary at
    depth d+1 over the oldest `fan_in` summaries of depth d that no condensed summary covers yet, with
    its summary_parents edges (summary_id = the new summary, parent_summary_id = each source). Existing
    rows are not changed. Returns the new summary id, or None when no depth has enough to condense."""
    con.execute("BEGIN IMMEDIATE")
    for depth in range(0, 4):
        sources = [r[0] for r in con.execute(
            "SELECT summary_id FROM summaries s WHERE conversation_id = ? AND depth = ? AND NOT EXISTS "
            "(SELECT 1 FROM summary_parents p WHERE p.parent_summary_id = s.summary_id) "
            "ORDER BY created_at, summary_id LIMIT ?", (cid, depth, fan_in))]
        if len(sources) == fan_in:
            sid = f"sum_cond_{n:06d}"
            con.execute("INSERT INTO summaries (summary_id, conversation_id, kind, depth, content, token_count, "
                        "earliest_at, latest_at, created_at, file_ids, model) VALUES (?, ?, 'condensed', ?, ?, 9, ?, "
                        "?, ?, '[]', 'unknown')",
                        (sid, cid, depth + 1, f"condensed summary {n} over depth {depth}", "2030-01-01T00:00:00.000Z",
                         "2030-01-01T00:00:02.000Z", "2030-01-01 00:00:04"))
            con.executemany("INSERT INTO summary_parents (summary_id, parent_summary_id, ordinal) VALUES (?, ?, ?)",
                            [(sid, p, o) for o, p in enumerate(sources)])
            con.execute("COMMIT")
            return sid
    con.execute("ROLLBACK")
    return None


def open_live(db: str) -> tuple[sqlite3.Connection, int]:
    """A connection as lossless-claw holds one (WAL mode), and the conversation it appends to."""
    con = sqlite3.connect(db, isolation_level=None, timeout=600)   # generous: the suite runs on busy machines
    con.execute("PRAGMA journal_mode=WAL")
    return con, con.execute("SELECT max(conversation_id) FROM conversations").fetchone()[0]


def source_writer(db: str, stop: str, seconds: str | None = None, compact: str | None = None) -> None:
    con, cid = open_live(db)
    deadline = time.monotonic() + float(seconds) if seconds else None
    n = 0
    print("ready", flush=True)
    while not Path(stop).exists() and (deadline is None or time.monotonic() < deadline):
        n += 1
        commit_messages(con, cid, n)
        if compact and n % 3 == 0:
            condense(con, cid, n)
        if n % 25 == 0:
            con.execute("PRAGMA wal_checkpoint(PASSIVE)")   # rewrite the main file under the reader, too
        print(f"commit {n}", flush=True)
        time.sleep(0.01)
    con.close()


def lock_holder(db: str, seconds: str) -> None:
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    if seconds == "released":
        sys.stdin.read()   # until the test closes our stdin: however long the run takes to get here
    else:
        time.sleep(float(seconds))
    con.execute("ROLLBACK")
    con.close()


def run_lock_holder(lock: str) -> None:
    import fcntl

    with open(lock, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        print("locked", flush=True)
        sys.stdin.read()   # until the test closes our stdin (or dies)


def remnic_writer(db: str, stop: str, out: str) -> None:
    waits, committed_at, errors = [], [], []
    n = 0
    print("ready", flush=True)
    while not Path(stop).exists():
        n += 1
        t0 = time.monotonic()
        try:
            con = sqlite3.connect(db, isolation_level=None, timeout=5.0)
            try:
                con.execute("PRAGMA busy_timeout=5000")
                con.execute("BEGIN IMMEDIATE")
                turn = con.execute("SELECT coalesce(max(turn_index), -1) + 1 FROM lcm_messages WHERE session_id = ?",
                                   ("agent:main:main",)).fetchone()[0]
                text = f"remnic live turn {n}"
                cur = con.execute("INSERT INTO lcm_messages (session_id, turn_index, role, content, token_count, "
                                  "created_at, metadata) VALUES (?, ?, 'user', ?, 4, ?, NULL)",
                                  ("agent:main:main", turn, text,
                                   time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())))
                con.execute("INSERT INTO lcm_messages_fts (rowid, content) VALUES (?, ?)", (cur.lastrowid, text))
                con.execute("COMMIT")
            finally:
                con.close()
            waits.append(time.monotonic() - t0)
            committed_at.append(time.time())
        except sqlite3.Error as exc:
            errors.append(f"{time.monotonic() - t0:.2f}s: {exc}")
        time.sleep(0.1)
    Path(out).write_text(json.dumps({"waits": waits, "committed_at": committed_at, "errors": errors}))


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    {"source-writer": source_writer, "lock-holder": lock_holder, "run-lock-holder": run_lock_holder, "remnic-writer": remnic_writer}[role](*args)
