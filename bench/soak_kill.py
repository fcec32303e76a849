#!/usr/bin/env python3
"""Kill soak: SIGKILL `lcm-etl migrate` at random instants, many times (the long form of
tests/faults/test_kill.py, same oracle).

    python bench/soak_kill.py [--trials 200] [--messages 4000] [--sessions 24] [--batch-rows 500]
                              [--fresh-share 0.3] [--seed K] [--keep DIR]

Each trial copies a Remnic target holding native rows (or, for a share of the trials, starts with no
target at all), starts a migration, kills its process group at a uniformly random instant between
0.1 s and the length of an uninterrupted run (half of them within its writing phase), and checks the state left behind (on a file copy, so the
check cannot heal it): integrity_check and foreign_key_check clean, and per session complete, absent,
or - for a session written in chunks - a turn-order prefix without its boundary event; a new target is
absent or complete. It then re-runs and requires exactly the content of an uninterrupted run.

Exit 0 when every trial held, 1 otherwise (the failing trials' folders are kept and listed).
"""
from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "faults"))

from faultlib import (check_cut, copy_db, generate_source, kill_after,
                      leftovers, make_existing_target, read_content, run, source_weights, spawn, timed_run)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--sessions", type=int, default=24)
    ap.add_argument("--batch-rows", type=int, default=500)
    ap.add_argument("--fresh-share", type=float, default=0.3, help="share of trials that build a new target")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", metavar="DIR", help="work folder (kept); default a temporary one, removed if all pass")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="lcm-soak-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"soak: seed {seed}, {a.trials} trials, work folder {base}", flush=True)

    src = generate_source(base / "src" / "lcm.db", a.messages, a.sessions, seed=7)
    chunked = {s for s, w in source_weights(src).items() if w > a.batch_rows}
    args = ("--batch-rows", a.batch_rows, "-q")
    initial = make_existing_target(base / "initial" / "lcm.sqlite")
    full_existing_path = copy_db(initial, base / "full-existing" / "lcm.sqlite")
    t_existing, w_existing = timed_run("migrate", "--src", src, "--dest", full_existing_path, *args, tmp=base / "tmp",
                              watch=Path(str(full_existing_path) + "-wal"))
    full_fresh_path = base / "full-fresh" / "lcm.sqlite"
    t_fresh, w_fresh = timed_run("migrate", "--src", src, "--dest", full_fresh_path, *args, tmp=base / "tmp",
                           watch=full_fresh_path.with_name(".lcm.sqlite.lcm-etl-building"))
    full_existing, full_fresh = read_content(full_existing_path), read_content(full_fresh_path)
    print(f"uninterrupted: existing target {t_existing:.2f}s (writing from {w_existing:.2f}s), "
          f"new target {t_fresh:.2f}s (writing from {w_fresh:.2f}s); "
          f"{len(chunked)} of {len(full_fresh.messages)} sessions written in chunks", flush=True)

    tally, failures = Counter(), []
    t0 = time.monotonic()
    for trial in range(a.trials):
        fresh = rng.random() < a.fresh_share
        duration, writes = (t_fresh, w_fresh) if fresh else (t_existing, w_existing)
        # half the kills anywhere in the run, half in its writing phase (where a kill can cut a session)
        delay = rng.uniform(0.1 if rng.random() < 0.5 else max(0.1, writes), duration)
        folder = base / f"trial-{trial:04d}"
        target = folder / "t" / "lcm.sqlite"
        if not fresh:
            copy_db(initial, target)
        full = full_fresh if fresh else full_existing
        try:
            proc = spawn("migrate", "--src", src, "--dest", target, *args, tmp=folder / "tmp")
            killed = kill_after(proc, time.monotonic(), delay)
            if fresh and not target.exists():
                state = "no target" + (" +building file" if target.parent.exists() and leftovers(target.parent) else "")
            else:
                states = check_cut(target, full, chunked if not fresh else set(), scratch=folder / "inspect")
                state = " ".join(f"{k}={v}" for k, v in sorted(Counter(states.values()).items()))
            proc = run("migrate", "--src", src, "--dest", target, *args, tmp=folder / "tmp")
            assert proc.returncode == 0, proc.stderr.strip()
            after = read_content(target)
            assert after == full, after.diff(full)
            tally["fresh" if fresh else "existing"] += 1
            tally["killed" if killed else "finished first"] += 1
            print(f"trial {trial}: {'new' if fresh else 'existing'} target, kill at {delay:.3f}s: "
                  f"{'killed' if killed else 'finished first'}, {state}; re-run identical", flush=True)
            shutil.rmtree(folder, ignore_errors=True)
        except Exception as exc:  # report every broken trial, keep going
            failures.append(trial)
            print(f"trial {trial}: FAILED ({'new' if fresh else 'existing'} target, kill at {delay:.3f}s): "
                  f"{type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc(limit=3)

    print(f"\nsoak: {a.trials} trials in {time.monotonic() - t0:.0f}s, seed {seed}: {dict(tally)}; "
          f"{len(failures)} failed {failures or ''}")
    if failures:
        print(f"failing trial folders kept under {base}")
        return 1
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
