#!/usr/bin/env python3
"""Two micro-measurements behind design choices in docs/benchmarks.md (figures printed, nothing asserted):

1. SQLite's allocation counter: two threads of one process each flattening every part of a source
   (74_part_rows.sql into a scratch table), with the counter on (SQLite's default) and off
   (lcm_etl/sqlite_runtime.py); one thread alone for reference. Each case runs in a fresh process.
2. The part payload: `json_patch('{}', json_object(...))` against lcm-etl's printf form, over every part.

usage: .venv/bin/python bench/micro.py [SOURCE]     (default bench/out/source-200000.db; `make bench` makes it)
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLATTEN = """
import sqlite3, sys, tempfile, threading, time
from pathlib import Path
if sys.argv[3] == "off":
    from lcm_etl.sqlite_runtime import disable_memstatus
    assert disable_memstatus()
from lcm_etl.read import source_schema
from lcm_etl.steps import engine
from lcm_etl.sqlite_runtime import attach_all
src = Path(sys.argv[1])
views = source_schema.normalized_views(source_schema.detect_schema(src, src), "sqlite")
took = {}
def work(i):
    con = sqlite3.connect(":memory:", check_same_thread=False)
    con.execute("ATTACH ? AS src", (f"file:{src}?mode=ro",))
    attach_all(con, {}, views)   # the views, and the function the part view calls
    engine.run_step(engine.step("74_part_rows"), con)
    t = time.monotonic()
    con.execute("CREATE TEMP TABLE flat AS SELECT * FROM part_rows")
    took[i] = time.monotonic() - t
threads = [threading.Thread(target=work, args=(i,)) for i in range(int(sys.argv[2]))]
[t.start() for t in threads]; [t.join() for t in threads]
print(" ".join(f"{s:.2f}" for s in took.values()))
"""


def flatten(src: Path, threads: int, counter: str) -> str:
    out = subprocess.run([sys.executable, "-c", FLATTEN, str(src), str(threads), counter], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def payload(src: Path) -> None:
    import sqlite3

    from lcm_etl.read import source_schema

    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    extra = [c for c in source_schema.detect_schema(src, src).columns["message_parts"] if c not in source_schema.PART_MAPPED]
    patched = "json_patch('{}', json_object(" + ", ".join(f"'{c}', \"{c}\"" for c in extra) + "))"
    for name, expr in (("json_patch(json_object)", patched), ("printf (lcm-etl)", source_schema._json_object_of_non_null(extra))):
        t = time.monotonic()
        n, size = con.execute(f"SELECT count(*), sum(length(p)) FROM (SELECT {expr} AS p FROM message_parts)").fetchone()
        print(f"  payload with {name:24} {time.monotonic() - t:5.2f} s  ({n:,} parts, {size:,} bytes)")


def main() -> None:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "bench" / "out" / "source-200000.db")
    print(f"flattening every part of {src.name} (seconds per thread):")
    for threads, counter in ((1, "on"), (2, "on"), (2, "off")):
        print(f"  {threads} thread(s), allocation counter {counter:3}: {flatten(src, threads, counter)}")
    payload(src)


if __name__ == "__main__":
    main()
