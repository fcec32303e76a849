#!/usr/bin/env python3
"""What the WAL-only path's check of the kept snapshot costs (lcm_etl/read/snapcheck.py; figures printed, nothing
asserted): a source kept open in WAL mode is migrated once, then re-run after a few messages were appended to its
WAL (the main file untouched: the WAL-only path); each re-run is timed, and the check it makes (a rotating
1/CHECK_RUNS of the copy's chunks) is timed on its own, with the copy in the page cache and with it evicted
from it (posix_fadvise DONTNEED on that file alone).

usage: .venv/bin/python bench/cache_check.py [SOURCE] [--runs N]   (default bench/out/source-200000.db)
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lcm_etl.read import snapcheck, sources  # noqa: E402
from lcm_etl.read.snapcache import SnapshotCache  # noqa: E402

LCM_ETL = Path(sys.executable).parent / "lcm-etl"
APPEND = ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
          "SELECT conversation_id, max(seq) + 1, 'user', ?, 5, '2026-11-23 09:00:00' FROM messages "
          "WHERE conversation_id = (SELECT min(conversation_id) FROM conversations)")


def settle(db: Path) -> None:
    st = db.stat()
    wait = (max(st.st_mtime_ns, st.st_ctime_ns) + sources.SETTLED_NS) / 1e9 - time.time() + 0.05
    if wait > 0:
        time.sleep(wait)


def migrate(src: Path, target: Path, env: dict) -> float:
    t = time.monotonic()
    subprocess.run([str(LCM_ETL), "migrate", "--src", str(src), "--dest", str(target), "-q"], env=env, check=True)
    return time.monotonic() - t


def timed_check(cache: SnapshotCache, cold: bool) -> float:
    digests, size = cache.sealed_digests()
    chunks, _ = snapcheck.rotation(0, len(digests))
    if cold:
        fd = os.open(cache.db, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    t = time.monotonic()
    assert snapcheck.first_damaged(cache.db, digests, size, chunks) is None
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source", nargs="?", default=str(ROOT / "bench" / "out" / "source-200000.db"))
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cache-check-"))
    try:
        src, target = work / "lcm.db", work / "out" / "lcm.sqlite"
        shutil.copyfile(args.source, src)
        env = {**os.environ, "LCM_ETL_CACHE_DIR": str(work / "cache"), "TMPDIR": str(work)}
        os.environ.update(LCM_ETL_CACHE_DIR=env["LCM_ETL_CACHE_DIR"])
        live = sqlite3.connect(src, isolation_level=None)
        live.execute("PRAGMA journal_mode=WAL")
        live.execute("PRAGMA wal_autocheckpoint=0")
        settle(src)
        first = migrate(src, target, env)
        cache = SnapshotCache.for_pair(src, target)
        assert cache is not None
        runs, warm, cold = [], [], []
        for k in range(args.runs):
            for j in range(20):
                live.execute(APPEND, (f"appended {k}.{j}",))
            settle(src)
            runs.append(migrate(src, target, env))
            warm.append(timed_check(cache, cold=False))
            cold.append(timed_check(cache, cold=True))
        count = len(cache.sealed_digests()[0])
        checked = len(snapcheck.rotation(0, count)[0])
        live.close()
        print(f"source {args.source}: {src.stat().st_size / 1e6:.0f} MB, {count} chunks; a WAL-only run checks "
              f"{checked} ({checked * sources.DIGEST_CHUNK / 1e6:.1f} MB), every chunk within "
              f"{snapcheck.CHECK_RUNS} runs")
        print(f"first run {first:.2f} s; WAL-only re-run (20 messages appended) median {statistics.median(runs):.3f} s "
              f"of {len(runs)}")
        print(f"the check alone: median {statistics.median(warm) * 1e3:.1f} ms with the copy in the page cache, "
              f"{statistics.median(cold) * 1e3:.1f} ms with it evicted")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
