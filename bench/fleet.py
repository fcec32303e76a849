#!/usr/bin/env python3
"""The cost of running a fleet on Dask instead of the local process pool (docs/benchmarks.md, "Fleets").

N small sources (copies of fixtures/lossless-claw/*.db, cycling) are migrated into N new targets twice,
through the CLI as an operator runs it: `migrate --manifest --jobs W` (the local pool), then
`migrate --manifest --scheduler` on a LocalCluster of W worker processes of one thread each started here
(already running before the clock starts, as a real cluster is). Both runs use W parallel pairs.

Printed per engine: wall time, wall time per pair, the pairs' own migrate time (the reports' elapsed_s,
summed) and the overhead per pair = (wall x W - sum of elapsed_s) / N: what it costs to hand a pair to a
worker and get its report back, beyond the migration itself. Figures only; nothing is asserted.

usage: .venv/bin/python bench/fleet.py [--pairs 200] [--workers 2] [--out bench/out/fleet]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures" / "lossless-claw").glob("*.db"))
LCM_ETL = Path(sys.executable).parent / "lcm-etl"


def make_sources(out: Path, pairs: int) -> list[Path]:
    sources = []
    for n in range(pairs):
        fixture = FIXTURES[n % len(FIXTURES)]
        folder = out / "src" / f"{n:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        for side in ("", "-wal", "-shm"):
            if Path(f"{fixture}{side}").exists():
                shutil.copyfile(f"{fixture}{side}", folder / f"lcm.db{side}")
        sources.append(folder / "lcm.db")
    return sources


def run(engine: str, sources: list[Path], out: Path, extra: list[str]) -> dict:
    dest = out / engine
    shutil.rmtree(dest, ignore_errors=True)
    manifest = out / f"{engine}.txt"
    manifest.write_text("".join(f"{s} {dest / f'{n:03d}' / 'lcm.sqlite'}\n" for n, s in enumerate(sources)))
    t0 = time.monotonic()
    proc = subprocess.run([str(LCM_ETL), "migrate", "--manifest", str(manifest), "--json", *extra],
                          capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"{engine}: exit {proc.returncode}: {proc.stderr.strip()}")
    report = json.loads(proc.stdout)
    return {"wall": wall, "work": sum(p["report"]["elapsed_s"] for p in report["pairs"]), "n": len(report["pairs"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "fleet")
    args = ap.parse_args()
    from distributed import LocalCluster

    shutil.rmtree(args.out, ignore_errors=True)
    sources = make_sources(args.out, args.pairs)
    w = args.workers
    results = {"local pool": run("local", sources, args.out, ["--jobs", str(w)])}
    with LocalCluster(n_workers=w, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        results["dask"] = run("dask", sources, args.out, ["--scheduler", cluster.scheduler_address])
    print(f"{args.pairs} pairs ({len(FIXTURES)} fixtures, cycling), {w} parallel pairs")
    print(f"{'engine':<11} {'wall s':>8} {'s/pair':>7} {'migrate s (sum)':>16} {'overhead s/pair':>16}")
    for name, r in results.items():
        print(f"{name:<11} {r['wall']:>8.2f} {r['wall'] / r['n']:>7.3f} {r['work']:>16.2f} "
              f"{(r['wall'] * w - r['work']) / r['n']:>16.3f}")
    local, dask = results["local pool"], results["dask"]
    print(f"dask - local: {(dask['wall'] - local['wall']) / args.pairs * 1000:+.1f} ms of wall time per pair")


if __name__ == "__main__":
    main()
