#!/usr/bin/env python3
"""The gateway regime: a `reconcile --watch` (or `migrate --watch`) following a database that one process keeps open.

OpenClaw 2026.9.6 keeps each agent database's handle open while the gateway runs (journal_mode=WAL,
wal_autocheckpoint=1000 pages, journal_size_limit=64 MiB, a TRUNCATE checkpoint when it closes the handle);
lossless-claw keeps lcm.db open the same way (WAL, synchronous=NORMAL, SQLite's default auto-checkpoint),
as their own code opens them. So between two auto-checkpoints only the -wal grows, and the
main file changes only at one. bench/openclaw_append.py closes the store after every append: the idle regime, where
every sync follows a TRUNCATE checkpoint.

The writer here is this Python process holding one sqlite3 connection open with those pragmas, appending rows as
OpenClaw's appendMessage does (fixtures/generate_store.py's port, `append(con=...)`), not OpenClaw itself. The
cases, each the sync a `--watch` already running makes of one change, in this order:
  - opened: the writer opens the store (-wal and -shm appear, no frame);
  - WAL grew: a handful of events appended, the main file untouched; repeated until one of them ends in an
    auto-checkpoint (its sync is the next case), each sync a sample;
  - auto-checkpoint: the append whose commit crossed 1000 pages of WAL, checkpointed by SQLite (main file written);
  - restarted: the next append, which restarts the WAL (checkpoint sequence + 1, new salts);
  - closed: the writer checkpoints (TRUNCATE) and closes (-wal and -shm go).
For each: the sync's own elapsed_s (its --json line), the CPU time the lcm-etl process spent meanwhile (user +
system: a shared host's load moves wall time, hardly this), the bytes the lcm-etl process read during it
(/proc/<pid>/io read_bytes: from the disk; rchar: every read() however served), its peak RSS so far (VmHWM), and
the bytes the writer wrote for the change (this process's wchar: WAL frames, and the main file at a checkpoint).
A first run (a fresh process, its /proc/self/io at exit) gives the shares.

usage: python bench/gateway.py [--store-sizes 500000] [--reuse]   (also run by `make bench` for GATEWAY_SIZES)
"""
from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))
import generate_store  # noqa: E402  (fixtures/, the port of OpenClaw's append)
import run  # noqa: E402  (bench/run.py: the cached generated stores, GNU time's peak, the CLI's path)

LCM_ETL = run.LCM_ETL
HANDFUL = 6          # events per change: a turn in each of three windows
MAX_ROUNDS = 200     # appends before giving up waiting for an auto-checkpoint


class Gateway:
    """One connection held open with OpenClaw's pragmas for a session store (configureSqliteWalMaintenance;
    lcm.db's, lossless-claw's, are bench/run.py's wal_writer(gateway=True))."""

    def __init__(self, path: Path):
        self.path = path
        self.con = generate_store.connect(path)
        self.con.execute("PRAGMA journal_mode=WAL")
        for p in ("wal_autocheckpoint=1000", f"journal_size_limit={64 << 20}"):
            self.con.execute(f"PRAGMA {p}")
        self.con.execute("SELECT count(*) FROM sqlite_master").fetchone()   # opened: -wal and -shm appear

    def append(self, events: int) -> None:
        generate_store.append(self.path, events=events, con=self.con)

    def close(self) -> None:
        self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.con.close()


def io_of(pid: int | str) -> dict[str, int]:
    return io_text(Path(f"/proc/{pid}/io").read_text())


def io_text(text: str) -> dict[str, int]:
    """/proc/<pid>/io's lines as numbers (read_bytes, rchar...)."""
    return {k: int(v) for k, v in (line.split(": ") for line in text.splitlines())}


def cpu_s(pid: int | str) -> float:
    """The process's CPU time so far, user + system (/proc/<pid>/stat): what a sync costs whatever else the host runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main_mtime(path: Path) -> int:
    return path.stat().st_mtime_ns


def wal_seq(path: Path) -> int | None:
    """The -wal header's checkpoint sequence (it changes when the WAL restarts)."""
    try:
        with open(f"{path}-wal", "rb") as fh:
            head = fh.read(32)
    except FileNotFoundError:
        return None
    return int.from_bytes(head[12:16], "big") if len(head) == 32 else None


def first_run(cmd: list[str], env: dict) -> dict:
    """`cmd` in a fresh process under GNU time, its /proc/self/io read as it exits."""
    with tempfile.TemporaryDirectory() as tmp:
        io_file, peak = Path(tmp) / "io", Path(tmp) / "peak"
        code = ("import atexit, sys\n"
                f"atexit.register(lambda: open({str(io_file)!r}, 'w').write(open('/proc/self/io').read()))\n"
                f"sys.argv = {['lcm-etl', *cmd]!r}\n"
                "from lcm_etl.cli import main\nsys.exit(main())\n")
        os.sync()
        t0 = time.monotonic()
        proc = subprocess.run(run.peak_of([sys.executable, "-c", code], peak),
                              env={**os.environ, **env}, capture_output=True)
        wall = time.monotonic() - t0
        io = io_text(io_file.read_text())
        return {"wall_s": round(wall, 2), "peak_rss_mb": run.peak_mb(peak),
                "exit": proc.returncode, "read_bytes": io["read_bytes"], "rchar": io["rchar"],
                "stderr": proc.stderr.decode(errors="replace")[-300:]}


class Watch:
    """A `--watch --json` run under GNU time; its lcm-etl process (time's child) is the one whose io is read."""

    def __init__(self, cmd: list[str], env: dict):
        self.tmp = tempfile.TemporaryDirectory()
        self.proc = subprocess.Popen(run.peak_of([str(LCM_ETL), *cmd, "--watch", "--json"], Path(self.tmp.name) / "peak"),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**os.environ, **env}, start_new_session=True)
        self.first = self.next_sync(600)
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        self.pid = int(children[0])

    def next_sync(self, timeout: float) -> dict | None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the watch ended: {self.proc.stderr.read().decode()[-300:]}")   # type: ignore[union-attr]
        return json.loads(line)

    def stop(self) -> float:
        os.killpg(self.proc.pid, signal.SIGINT)
        self.proc.wait()
        peak = run.peak_mb(Path(self.tmp.name) / "peak")
        self.tmp.cleanup()
        return peak


def synced(watch: Watch, change, timeout: float = 30) -> dict:
    """Make `change()` and return the sync that follows it, with the bytes read and written around it."""
    me, it, cpu = io_of("self"), io_of(watch.pid), cpu_s(watch.pid)
    change()
    written = io_of("self")["wchar"] - me["wchar"]
    sync = watch.next_sync(timeout)
    after = io_of(watch.pid)
    row = {"writer_wrote": written, "read_bytes": after["read_bytes"] - it["read_bytes"],
           "rchar": after["rchar"] - it["rchar"], "hwm_mb": hwm_mb(watch.pid), "cpu_s": round(cpu_s(watch.pid) - cpu, 3)}
    if sync is None:
        return {**row, "wall_s": None, "sync": "no sync"}
    sd = sync.get("sync_decision") or {}
    kept = [st.get("kept_snapshot") for st in (sync.get("extra") or {}).get("stores") or []]   # reconcile: how the store's copy was read
    return {**row, "wall_s": round(sync["elapsed_s"], 3), "sync": "; ".join(filter(None, kept)) or sd.get("line", ""),
            "inserted": (sync.get("messages") or {}).get("inserted")}


def bench_store(n: int, store: Path, out: Path, reuse: bool = False) -> list[dict]:
    """The gateway regime's cases on a copy of `store` (n events). `reuse`: a work folder an earlier `--reuse` run
    left (its copy, target and kept snapshot, as that run's writer left them) is synced on, not made again by a
    first run (5M events: half an hour), and is kept."""
    work = out / f"work-gateway-{n}"
    src = work / "agent" / "openclaw-agent.sqlite"
    target = work / "lcm.sqlite"
    env = {"LCM_ETL_CACHE_DIR": str(work / "cache")}
    cmd = ["reconcile", "--sessions", str(src), "--dest", str(target)]
    if reuse and target.exists():
        rows = [{"case": "first run: reused", "wall_s": None, "read_bytes": 0, "rchar": 0}]
    else:
        shutil.rmtree(work, ignore_errors=True)
        (work / "agent").mkdir(parents=True)
        shutil.copyfile(store, src)
        rows = [dict(first_run([*cmd, "-q"], env), case="first run (new target)")]
        _say(n, rows[-1])
    watch = Watch(cmd, env)
    gw: Gateway | None = None

    def opened():
        nonlocal gw
        gw = Gateway(src)

    rows.append(dict(synced(watch, opened), case="writer opened the store (0 frames)"))
    _say(n, rows[-1])
    assert gw is not None
    for _ in range(MAX_ROUNDS):
        before = main_mtime(src)
        row = synced(watch, lambda: gw.append(HANDFUL))   # type: ignore[union-attr]
        checkpointed = main_mtime(src) != before
        rows.append(dict(row, case="auto-checkpoint since the last sync" if checkpointed else "only the WAL grew"))
        _say(n, rows[-1])
        if checkpointed:
            break
    seq = wal_seq(src)
    rows.append(dict(synced(watch, lambda: gw.append(HANDFUL)), case="WAL restarted (sequence +1, new salts)"))   # type: ignore[union-attr]
    rows[-1]["restarted"] = wal_seq(src) != seq
    _say(n, rows[-1])
    # the main file changed with no frame left: compared whole (2 x 3 GB at 2M from disk, over 30 s on a busy host)
    rows.append(dict(synced(watch, gw.close, timeout=900), case="writer closed it (TRUNCATE)"))
    _say(n, rows[-1])
    peak = watch.stop()
    for r in rows:
        r.update(size=n, watch_peak_rss_mb=peak)
    if not reuse:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def _say(n: int, r: dict) -> None:
    wall = "no sync" if r.get("wall_s") is None else f"{r['wall_s']:8.3f} s"
    cpu = f"cpu {r['cpu_s']:6.3f} s" if "cpu_s" in r else " " * 12
    print(f"  {n:>9,}  {r['case']:<40} {wall} {cpu}  read {r['read_bytes'] / 1e6:9.2f} MB (rchar {r['rchar'] / 1e6:9.2f})"
          f"  writer wrote {r.get('writer_wrote', 0) / 1e6:7.3f} MB  RSS {r.get('hwm_mb', r.get('peak_rss_mb'))} MB"
          f"  {r.get('sync', '')[:160]}", flush=True)


def summary(rows: list[dict]) -> list[str]:
    """Per size: the WAL-grew syncs' median and max, each against the first run and the bytes the writer added."""
    out = []
    for n in sorted({r["size"] for r in rows}):
        first = next(r for r in rows if r["size"] == n and r["case"].startswith("first run"))
        first_s = first["wall_s"]
        grew = sorted((r for r in rows if r["size"] == n and r["case"] == "only the WAL grew" and r["wall_s"]),
                      key=lambda r: r["wall_s"])
        if not grew:
            continue
        med = grew[len(grew) // 2]
        cpus = sorted(r["cpu_s"] for r in grew)
        worst = max(r["read_bytes"] - 4 * r["writer_wrote"] for r in grew)
        worst_rchar = max(r["rchar"] - 4 * r["writer_wrote"] for r in grew)
        share = f"({med['wall_s'] / first_s:.2%} of the first run's {first_s:.1f} s)" if first_s else "(first run reused)"
        out.append(f"  {n:>9,}: WAL grew, {len(grew)} syncs: median {med['wall_s']:.3f} s {share}, max "
                   f"{grew[-1]['wall_s']:.3f} s; CPU median {cpus[len(cpus) // 2]:.3f} s ({cpus[0]:.3f}-{cpus[-1]:.3f}); worst read_bytes - 4 x written: {worst / 1e6:.2f} MB, rchar - 4 x written: "
                   f"{worst_rchar / 1e6:.2f} MB")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store-sizes", default="500000")
    ap.add_argument("--reuse", action="store_true", help="sync on bench/out/work-gateway-N as a --reuse run left it "
                    "(made by a first run when absent), and keep it")
    args = ap.parse_args()
    run.OUT.mkdir(parents=True, exist_ok=True)   # a fresh clone has no bench/out yet
    rows: list[dict] = []
    for n in (int(x) for x in args.store_sizes.split(",") if x):
        rows += bench_store(n, run.store(n), run.OUT, args.reuse)
    print("\n".join(summary(rows)))
    (run.OUT / "gateway.json").write_text(json.dumps(rows, indent=1))
    return 1 if any(r.get("exit") not in (None, 0) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
