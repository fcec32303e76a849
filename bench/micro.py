#!/usr/bin/env python3
"""Two micro-measurements behind design choices in docs/benchmarks.md (figures printed, nothing asserted):

1. SQLite's allocation counter: two threads of one process each flattening every part of a source
   (74_part_rows.sql into a scratch table), with the counter on (SQLite's default) and off
   (lcm_etl/sqlite_runtime.py); one thread alone for reference. Each case runs in a fresh process.
2. The part payload: `json_patch('{}', json_object(...))` against lcm-etl's printf form, over every part.
3. The UTF-8 repair (sqlite_runtime.utf8_json, called by SQLite for every part's payload): the CPU time of
   reading every payload through the part view with it, with a function that only returns its argument (the
   call's own cost) and with no call; then what a check finding the rows that need it would cost instead:
   SQLite's length() and LIKE over the built payloads, DuckDB's try(decode(...)) over every text column of the
   parts and over the messages' metadata columns (15_kept_sessions.sql would read them).

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
from lcm_etl.read.lcmdb import source_schema
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

    from lcm_etl.read.lcmdb import source_schema

    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    extra = [c for c in source_schema.detect_schema(src, src).columns["message_parts"] if c not in source_schema.PART_MAPPED]
    patched = "json_patch('{}', json_object(" + ", ".join(f"'{c}', \"{c}\"" for c in extra) + "))"
    for name, expr in (("json_patch(json_object)", patched), ("printf (lcm-etl)", source_schema._json_object_of_non_null(extra))):
        t = time.monotonic()
        n, size = con.execute(f"SELECT count(*), sum(length(p)) FROM (SELECT {expr} AS p FROM message_parts)").fetchone()
        print(f"  payload with {name:24} {time.monotonic() - t:5.2f} s  ({n:,} parts, {size:,} bytes)")


def utf8_repair(src: Path) -> None:
    import sqlite3

    from lcm_etl import duck, sqlite_runtime
    from lcm_etl.read.lcmdb import source_schema

    views = source_schema.normalized_views(source_schema.detect_schema(src, src), "sqlite")
    repaired = f"CAST({sqlite_runtime.UTF8_JSON}(CAST("
    bare = {k: v.replace(repaired, "((((").replace(" AS BLOB)) AS TEXT)", "))))") for k, v in views.items()}
    for name, fn, vw in (("utf8_json", sqlite_runtime.utf8_json, views), ("a call returning its argument",
                                                                         lambda v: v, views), ("no call", None, bare)):
        con = sqlite3.connect(":memory:")
        con.execute("ATTACH ? AS src", (f"file:{src}?mode=ro",))
        con.create_function(sqlite_runtime.UTF8_JSON, 1, fn, deterministic=True)
        for view, sql in vw.items():
            con.execute(f"CREATE TEMP VIEW {view} AS {sql}")
        t = time.process_time()
        con.execute("SELECT sum(length(CAST(payload AS BLOB))) FROM src_parts").fetchone()
        print(f"  every payload, {name:30} {time.process_time() - t:5.2f} s CPU")
    con.execute("CREATE TEMP TABLE built AS SELECT payload FROM src_parts")
    t = time.process_time()
    n = con.execute("SELECT count(*) FROM built WHERE length(payload) <> length(CAST(payload AS BLOB)) "
                    "OR payload LIKE '%' || char(65533) || '%'").fetchone()[0]
    print(f"  SQLite: length() and LIKE over the built payloads {time.process_time() - t:5.2f} s CPU ({n:,} not ASCII)")
    d = duck.connect(keeps_records=False)
    d.execute("SET enable_progress_bar = false")
    duck.attach_sqlite(d, str(src), "src")
    bad = "{c} IS NOT NULL AND try(decode(encode(CAST({c} AS VARCHAR)))) IS NULL"
    for table, cols in (("message_parts", [c for c, t in d.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_catalog = 'src' AND "
            "table_name = 'message_parts'").fetchall() if t == "VARCHAR"]),
                        ("messages", ["identity_hash", "transcript_entry_id", "openclaw_sender_metadata",
                                      "stable_event_key", "large_content", "created_at"])):
        t = time.monotonic()
        n = d.execute(f"SELECT count(*) FROM src.{table} WHERE " + " OR ".join(bad.format(c=f'"{c}"') for c in cols)
                      ).fetchone()[0]
        print(f"  DuckDB: {len(cols)} text columns of {table:13} {time.monotonic() - t:5.2f} s ({n} not UTF-8)")


def main() -> None:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "bench" / "out" / "source-200000.db")
    print(f"flattening every part of {src.name} (seconds per thread):")
    for threads, counter in ((1, "on"), (2, "on"), (2, "off")):
        print(f"  {threads} thread(s), allocation counter {counter:3}: {flatten(src, threads, counter)}")
    payload(src)
    print("the UTF-8 repair of the part payloads, and checks that would find the rows needing it:")
    utf8_repair(src)


if __name__ == "__main__":
    main()
