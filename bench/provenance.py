#!/usr/bin/env python3
"""What provenance costs (issue 14): migrate a generated source into a new target and into an existing one
with this checkout's lcm-etl and with another one (the version before provenance), alternating, and time
`undo` of the run into the existing target (and its --dry-run). Prints medians of wall time and peak RSS,
and the size of the provenance tables. Nothing here asserts a time.

usage: python bench/provenance.py --before /path/to/old/.venv/bin/lcm-etl [--messages 200000] [--repeat 3]
(the source is bench/out/source-N.db, made by `python fixtures/generate.py bench/out/source-N.db --messages N`)
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import LCM_ETL, OUT, clean, run  # bench/run.py: one command timed in a fresh process


def native_target(path: Path) -> None:
    clean(path)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.executescript((Path(__file__).resolve().parent.parent / "tests" / "conftest.py").read_text()
                      .split('REMNIC_DDL = """')[1].split('"""')[0])
    con.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the lcm-etl console script to compare with")
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    src = OUT / f"source-{args.messages}.db"
    tools = {"before": args.before, "now": str(LCM_ETL)}
    times: dict[str, list[dict]] = {}
    for _ in range(args.repeat):
        for name, tool in tools.items():
            fresh = OUT / f"prov-{name}-new.sqlite"
            clean(fresh)
            times.setdefault(f"{name} new target", []).append(run([tool, "migrate", "--src", str(src), "--dest",
                                                                   str(fresh), "-q"]))
            existing = OUT / f"prov-{name}-existing.sqlite"
            native_target(existing)
            times.setdefault(f"{name} existing target", []).append(run([tool, "migrate", "--src", str(src), "--dest",
                                                                        str(existing), "-q"]))
    existing = OUT / "prov-now-existing.sqlite"
    con = sqlite3.connect(existing)
    run_id = con.execute("SELECT run_id FROM lcm_etl_runs").fetchone()[0]
    sizes = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("lcm_etl_run_ranges", "lcm_etl_run_rows")}
    pages = {r[0]: r[1] for r in con.execute("SELECT name, sum(pgsize) FROM dbstat WHERE name LIKE 'lcm_etl_run_%' "
                                             "GROUP BY name")} if _has_dbstat(con) else {}
    con.close()
    times["undo --dry-run"] = [run([str(LCM_ETL), "undo", run_id, "--dest", str(existing), "--dry-run", "-q"])]
    times["undo"] = [run([str(LCM_ETL), "undo", run_id, "--dest", str(existing), "-q"])]
    out = {}
    for case, rs in times.items():
        bad = [r for r in rs if r["exit"] != 0]
        assert not bad, bad
        walls = [r["wall_s"] for r in rs]
        out[case] = {"wall_s": statistics.median(walls), "range": [min(walls), max(walls)],
                     "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs)}
        print(f"{case:<26} {out[case]['wall_s']:>7.2f} s  ({min(walls):.2f}-{max(walls):.2f})  "
              f"{out[case]['peak_rss_mb']:>6.0f} MB")
    print("provenance rows:", sizes, "bytes:", pages)
    (OUT / "provenance.json").write_text(json.dumps({"cases": out, "rows": sizes, "bytes": pages}, indent=1))


def _has_dbstat(con: sqlite3.Connection) -> bool:
    try:
        con.execute("SELECT 1 FROM dbstat LIMIT 1")
        return True
    except sqlite3.Error:
        return False


if __name__ == "__main__":
    main()
