#!/usr/bin/env python3
"""Per-step timings of one lcm-etl command: prints, on stderr, when each transform step ends, on which
thread (the parts thread is `lcm-etl-flatten`) and how long it took, then the target's final fsync.
The per-step figures in docs/benchmarks.md come from it.

usage: python bench/profile_steps.py migrate --src bench/out/source-200000.db --dest /tmp/b1/lcm.sqlite -q
"""
from __future__ import annotations

import os
import sys
import threading
import time

from lcm_etl import cli
from lcm_etl.steps import engine

T0 = time.monotonic()


def log(what: str) -> None:
    print(f"[{time.monotonic() - T0:7.2f}] {threading.current_thread().name[:16]:16} {what}", file=sys.stderr)


def timed_step(step, con, params=None):
    t = time.monotonic()
    counts = real_step(step, con, params)
    log(f"{step.name} {time.monotonic() - t:.2f}s")
    return counts


def timed_fsync(fd: int) -> None:
    t = time.monotonic()
    real_fsync(fd)
    log(f"fsync {time.monotonic() - t:.2f}s")


real_fsync, real_step = os.fsync, engine.run_step
engine.run_step = timed_step   # every runner reaches a step through engine.run_stage -> engine.run_step
os.fsync = timed_fsync

if __name__ == "__main__":
    sys.argv = ["lcm-etl", *sys.argv[1:]]
    try:
        cli.main()
    finally:
        log("done")
