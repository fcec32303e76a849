"""Shared machinery of the fault suite (tests/faults/) and of bench/soak_kill.py.

Everything here drives the real `lcm-etl` console script as a subprocess and inspects the resulting
SQLite files with Python's sqlite3: no mocks. The central oracle is `check_cut`: the state a killed or
failed run leaves must be one an uninterrupted run passes through at a session boundary or (for a
session written in chunks: docs/design.md, "Atomicity") a turn-order prefix of one session without its boundary event.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LCM_ETL = Path(sys.executable).parent / "lcm-etl"
NATIVE_SESSION = "agent:main:main"

# How long a fault test waits for something that must happen: generous, because the suite must pass on a
# machine whose cores are busy with other work (issue 12). Waits end as soon as their condition holds.
PATIENCE_S = 600.0


def generate_source(path: Path, messages: int, sessions: int | None = None, seed: int = 1) -> Path:
    """A lossless-claw lcm.db from fixtures/generate.py (WAL mode, same seed -> same rows)."""
    sys.path.insert(0, str(ROOT / "fixtures"))
    try:
        from generate import generate
    finally:
        sys.path.remove(str(ROOT / "fixtures"))
    path.parent.mkdir(parents=True, exist_ok=True)
    kwargs = {"messages": messages, "seed": seed}
    if sessions:
        kwargs["sessions"] = sessions
    generate(str(path), **kwargs)
    return path


def make_existing_target(path: Path) -> Path:
    """A Remnic target as a live Remnic leaves it: schema v2, WAL, two native rows (with FTS)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import make_native_target

    con = make_native_target(path)
    for turn, (role, text) in enumerate((("user", "native hello from remnic"), ("assistant", "native reply"))):
        cur = con.execute("INSERT INTO lcm_messages (session_id, turn_index, role, content, token_count, created_at, "
                          "metadata) VALUES (?, ?, ?, ?, ?, ?, NULL)",
                          (NATIVE_SESSION, turn, role, text, 3, f"2025-12-01T00:00:0{turn}.000Z"))
        con.execute("INSERT INTO lcm_messages_fts (rowid, content) VALUES (?, ?)", (cur.lastrowid, text))
    con.close()
    return path


def copy_db(src: Path, dest: Path) -> Path:
    """A consistent copy of a (closed or open) database, as a single WAL-mode file."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    a, b = sqlite3.connect(src), sqlite3.connect(dest)
    try:
        a.backup(b)
        b.execute("PRAGMA journal_mode=WAL")
    finally:
        a.close()
        b.close()
    return dest


def env_for(tmp: Path, **extra: str) -> dict:
    """Child environment with its own TMPDIR, so a killed run's snapshot folder stays inside the test."""
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), **extra}


def run(*args, tmp: Path, timeout: float = PATIENCE_S, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(LCM_ETL), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=env_for(tmp, **(env or {})), **kw)


def spawn(*args, tmp: Path) -> subprocess.Popen:
    return subprocess.Popen([str(LCM_ETL), *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env_for(tmp), start_new_session=True)


def wait_until(condition, what: str, proc: subprocess.Popen | None = None, patience: float = PATIENCE_S,
               every: float = 0.002) -> bool:
    """Poll `condition()` until it holds (True), or `proc` has ended (False, when given). Fails the test
    with `what` if neither happens within `patience` seconds: a hung run, not a slow machine."""
    deadline = time.monotonic() + patience
    while not condition():
        if proc is not None and proc.poll() is not None:
            return False
        assert time.monotonic() < deadline, f"gave up after {patience:g} s waiting for {what}"
        time.sleep(every)
    return True


def has_data(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except FileNotFoundError:
        return False


def wait_for_data(proc: subprocess.Popen, watch: Path) -> None:
    """Block until `watch` holds data (e.g. the target's -wal: the run has begun writing) or the run ends."""
    wait_until(lambda: has_data(watch), f"{watch.name} to hold data", proc)


def kill_after(proc: subprocess.Popen, started: float, delay: float) -> bool:
    """SIGKILL the run's process group `delay` s after `started`. False if it had already finished."""
    remaining = started + delay - time.monotonic()
    if remaining > 0:
        try:
            proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            pass
    finished = proc.poll() is not None
    if not finished:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    return not finished


def timed_run(*args, tmp: Path, watch: Path) -> tuple[float, float]:
    """Run to completion; return (duration, when `watch` first held data): the start of the writing
    phase when `watch` is the target's -wal (a kill before it can only find the target untouched)."""
    t0 = time.monotonic()
    proc = spawn(*args, tmp=tmp)
    first = None
    while proc.poll() is None:
        if first is None and watch.exists() and watch.stat().st_size > 0:
            first = time.monotonic() - t0
        time.sleep(0.002)
    duration = time.monotonic() - t0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.returncode == 0, err
    return duration, first if first is not None else 0.1


def interrupt_checkpoint(db: Path) -> None:
    """Do to `db` what a checkpoint interrupted by a kill or a full disk does: copy the newest WAL image of
    every page that lies inside the main file into it, leaving the pages beyond its end (and the WAL) as
    they are. The database stays sound (its truth is main file + WAL); the main file alone does not."""
    wal = Path(str(db) + "-wal").read_bytes()
    page_size = int.from_bytes(wal[8:12], "big")
    pages = {}
    at = 32
    while at + 24 + page_size <= len(wal):
        pages[int.from_bytes(wal[at:at + 4], "big")] = wal[at + 24:at + 24 + page_size]
        at += 24 + page_size
    in_file = db.stat().st_size // page_size
    with open(db, "r+b") as fh:
        for number, image in sorted(pages.items()):
            if number <= in_file:
                fh.seek((number - 1) * page_size)
                fh.write(image)




def one_error_line(stderr: str) -> str:
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("lcm-etl: error:"), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return lines[0]


# --------------------------------------------------------------------------------------------------
# Reading a target


def connect(path: Path) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.row_factory = sqlite3.Row
    return con


def assert_sound(path: Path) -> None:
    """integrity_check, foreign_key_check and both FTS indexes' integrity-check."""
    con = connect(path)
    try:
        assert [tuple(r) for r in con.execute("PRAGMA integrity_check")] == [("ok",)]
        assert [tuple(r) for r in con.execute("PRAGMA foreign_key_check")] == []
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
        for fts in ("lcm_messages_fts", "lcm_summaries_fts"):
            if fts in names:
                con.execute(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')")
    finally:
        con.close()


PROVENANCE = ("lcm_etl_summaries", "lcm_etl_summary_edges", "lcm_etl_conversations", "lcm_etl_skipped",
              "lcm_etl_large_files")


@dataclass
class Content:
    """A target's content without what legitimately differs between runs (ids, fired_at, the ledger)."""
    messages: dict = field(default_factory=dict)    # session -> [row tuple in turn order]
    parts: dict = field(default_factory=dict)       # (session, turn) -> [part tuple in ordinal order]
    summaries: dict = field(default_factory=dict)   # id -> row tuple
    events: dict = field(default_factory=dict)      # session -> [(msg_before, tokens_before, tokens_after)]
    provenance: dict = field(default_factory=dict)  # table -> sorted rows

    def __eq__(self, other):
        return all(getattr(self, k) == getattr(other, k)
                   for k in ("messages", "parts", "summaries", "events", "provenance"))

    def diff(self, other) -> str:
        out = []
        for k in ("messages", "parts", "summaries", "events", "provenance"):
            a, b = getattr(self, k), getattr(other, k)
            if a != b:
                keys = sorted(set(a) ^ set(b) | {x for x in set(a) & set(b) if a[x] != b[x]}, key=str)
                out.append(f"{k}: {len(keys)} keys differ, e.g. {keys[:3]}")
        return "; ".join(out) or "equal"


def read_content(path: Path) -> Content:
    con = connect(path)
    try:
        c = Content()
        msgs = defaultdict(list)
        for r in con.execute("SELECT session_id, turn_index, role, content, token_count, created_at, metadata "
                             "FROM lcm_messages ORDER BY session_id, turn_index, id"):
            msgs[r[0]].append(tuple(r))
        c.messages = dict(msgs)
        parts = defaultdict(list)
        for r in con.execute("SELECT m.session_id, m.turn_index, p.ordinal, p.kind, p.payload, p.tool_name, "
                             "p.file_path, p.created_at FROM lcm_message_parts p JOIN lcm_messages m "
                             "ON m.id = p.message_id ORDER BY 1, 2, 3, p.id"):
            parts[(r[0], r[1])].append(tuple(r)[2:])
        c.parts = dict(parts)
        c.summaries = {r[0]: tuple(r) for r in con.execute(
            "SELECT id, session_id, depth, parent_id, summary_text, token_count, msg_start, msg_end, escalation, "
            "created_at FROM lcm_summary_nodes")}
        ev = defaultdict(list)
        for r in con.execute("SELECT session_id, msg_before, tokens_before, tokens_after FROM lcm_compaction_events "
                             "ORDER BY id"):
            ev[r[0]].append(tuple(r)[1:])
        c.events = dict(ev)
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        c.provenance = {t: sorted((tuple(r) for r in con.execute(f'SELECT * FROM "{t}"')), key=repr)
                        for t in PROVENANCE if t in names}
        return c
    finally:
        con.close()


def source_weights(src: Path) -> dict[str, int]:
    """Rows (messages + parts) per resolved session of a lossless-claw source: what 60_batches.sql packs."""
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        out: dict[str, int] = defaultdict(int)
        conv = {cid: (sid or "").strip() or str(cid)
                for cid, sid in con.execute("SELECT conversation_id, session_id FROM conversations")}
        for cid, n in con.execute("SELECT conversation_id, count(*) FROM messages GROUP BY conversation_id"):
            out[conv[cid]] += n
        for cid, n in con.execute("SELECT m.conversation_id, count(*) FROM message_parts p JOIN messages m "
                                  "USING (message_id) GROUP BY m.conversation_id"):
            out[conv[cid]] += n
        return dict(out)
    finally:
        con.close()


def file_copy(path: Path, folder: Path) -> Path:
    """Copy a database's files as they lie (main file and -wal; SQLite rebuilds -shm), so that inspecting
    the copy cannot checkpoint, recover or otherwise heal the original the next run will meet."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / path.name
    shutil.copyfile(path, out)
    wal = Path(str(path) + "-wal")
    if wal.exists():
        shutil.copyfile(wal, str(out) + "-wal")
    return out


def check_cut(path: Path, full: Content, chunked: set[str], scratch: Path | None = None) -> dict[str, str]:
    """The target at `path` is a clean cut of the run that produces `full`. Returns session -> state.
    With `scratch`, a file copy made there is inspected and the target itself is not opened.

    Per session: complete (every message, part, summary and its one boundary event, all identical to
    the uninterrupted run), absent (none of it), or - only for a session in `chunked` - a turn-order
    prefix of its messages with their parts, without the boundary event, whose summaries (if any) are
    identical to the full run's and point at imported turns.
    """
    if scratch is not None:
        path = file_copy(path, scratch)
    assert_sound(path)
    got = read_content(path)
    states = {}
    for session in set(full.messages) | set(got.messages):
        want_rows, rows = full.messages.get(session, []), got.messages.get(session, [])
        k = len(rows)
        assert rows == want_rows[:k], f"{session}: imported rows are not a turn-order prefix of the full run"
        for row in rows:
            key = (session, row[1])
            assert got.parts.get(key, []) == full.parts.get(key, []), f"{session} turn {row[1]}: parts differ"
        sums = {i: s for i, s in got.summaries.items() if s[1] == session}
        want_sums = {i: s for i, s in full.summaries.items() if s[1] == session}
        for i, s in sums.items():
            assert want_sums.get(i) == s, f"{session}: summary {i} differs from the full run"
            assert s[7] < k, f"{session}: summary {i} points at turn {s[7]}, only {k} imported"
        events = got.events.get(session, [])
        if k == len(want_rows):
            assert sums == want_sums, f"{session}: complete messages but summaries missing"
            assert events == full.events.get(session, []), f"{session}: boundary event wrong or missing"
            states[session] = "complete"
        elif k == 0:
            assert not events and not sums, f"{session}: untouched session has rows"
            states[session] = "absent"
        else:
            assert session in chunked, f"{session}: {k}/{len(want_rows)} rows of a session written in one batch"
            assert events == [], f"{session}: a prefix carries a boundary event"
            states[session] = "prefix"
    return states


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "lcm-etl-building" in p.name)


def summary_line(states: dict[str, str]) -> str:
    from collections import Counter

    return json.dumps(Counter(states.values()), sort_keys=True)
