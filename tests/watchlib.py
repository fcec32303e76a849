"""Driving `lcm-etl ... --watch` as a user would: a real subprocess, its stdout read line by line.

Shared by tests/test_watch.py and tests/faults/test_watch_live.py. Every wait polls with a generous
deadline; nothing sleeps for a fixed time.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LCM_ETL = Path(sys.executable).parent / "lcm-etl"
sys.path.insert(0, str(HERE / "faults"))
import actors  # noqa: E402  (the fault suite's live lossless-claw writer: one implementation of a commit)

sys.path.remove(str(HERE / "faults"))


class Watcher:
    """`lcm-etl COMMAND ... --watch --json`: each stdout line is one sync's JSON object."""

    def __init__(self, *args, tmp: Path, as_json: bool = True):
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp   # the child's TMPDIR: a sync in progress shows as an lcm-etl-* folder there
        cmd = [str(LCM_ETL), *map(str, args), "--watch"] + (["--json"] if as_json else [])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "TMPDIR": str(tmp)}, start_new_session=True)
        self.as_json = as_json
        self.lines: queue.Queue = queue.Queue()
        self.seen: list = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_sync(self, timeout: float = 120) -> dict | str:
        """The next sync's line (parsed under --json); fails if the watcher ends or nothing comes in time."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no sync line within {timeout} s") from None
        assert line is not None, f"the watcher ended (exit {self.proc.wait()}): {self.proc.stderr.read()}"
        item = json.loads(line) if self.as_json else line.rstrip("\n")
        self.seen.append(item)
        return item

    def sync_until(self, done, timeout: float = 120) -> dict:
        """Read syncs until done(sync) holds; returns that sync."""
        deadline = time.monotonic() + timeout
        while True:
            item = self.next_sync(max(0.1, deadline - time.monotonic()))
            if done(item):
                return item

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self, sig: int = signal.SIGINT, timeout: float = 120) -> tuple[int, str]:
        """Send `sig` to the watcher alone (as `kill` does) and return (exit code, stderr)."""
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout)
        while True:   # what was printed before the exit
            line = self.lines.get_nowait() if not self.lines.empty() else None
            if line is None:
                break
            self.seen.append(json.loads(line) if self.as_json else line.rstrip("\n"))
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        self.proc.stdout.close()
        return code, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()


def append_turns(db: Path, commits: int, first: int = 1) -> int:
    """What lossless-claw does on a turn, `commits` times (WAL mode, one transaction each): 3 messages
    and a leaf summary over them. Returns how many messages were added."""
    con, cid = actors.open_live(str(db))
    try:
        for n in range(first, first + commits):
            actors.commit_messages(con, cid, n)
    finally:
        con.close()
    return 3 * commits


def counts(target: Path) -> dict[str, int]:
    con = sqlite3.connect(target)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("lcm_messages", "lcm_message_parts", "lcm_summary_nodes", "lcm_compaction_events")}
    finally:
        con.close()


def integrity(target: Path) -> str:
    con = sqlite3.connect(target)
    try:
        return con.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        con.close()
