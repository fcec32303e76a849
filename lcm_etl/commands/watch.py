"""`--watch`: stay running and sync again whenever the inputs change.

A sync is an ordinary `migrate()` / `reconcile()` run, called in this process: it takes its own
snapshot, plans, writes and releases everything before it returns, so the watch loop only decides
*when* to run one and prints what it did.

Why polling, not a watcher library (watchfiles/inotify): lossless-claw writes through SQLite in WAL
mode, so a commit touches `lcm.db-wal` (created, appended, truncated, deleted by checkpoints) and
only sometimes `lcm.db`; inotify events on a file that is replaced or recreated, on network or
container filesystems, and after the watched file disappears need care of their own. Two `stat()`
calls per poll (`sqlite_copy.file_signature`: inode, size, mtime, ctime of the file and its -wal; the no-op
shortcut compares the file's header and the -wal's frames besides) see every one of those changes, cost nothing measurable at
the default 0.5 s, and need no thread and no extra dependency.

Debounce: a change is synced once the signature has stayed the same for one interval (so a burst of
commits is one sync, not one per commit). A source that never goes quiet is still synced every
`max_wait_intervals` intervals, so a busy lossless-claw does not starve the target.

Signals: SIGINT and SIGTERM stop the watch between syncs, exit 0. One arriving during a sync lets
that sync finish (it is an ordinary run and leaves a whole target; a line on stderr says so), then
the watch exits 0; a second one during the same sync abandons it as a signal abandons any run (the
run's own interruption path, lcm_etl/interrupts.py: every session written is complete; exit 130 for
SIGINT, 143 for SIGTERM).
"""
from __future__ import annotations

import gc
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from lcm_etl.errors import EXIT_BAD_INPUT, LcmEtlError, error_line
from lcm_etl.interrupts import interrupt, swallowed
from lcm_etl.report import SCHEMA_VERSION, RunReport, emit, now_iso, one_line, say
from lcm_etl.read.snapshot.sqlite_copy import file_signature

DEFAULT_INTERVAL = 0.5
MAX_BACKOFF_S = 60.0


@dataclass
class WatchOptions:
    interval: float = DEFAULT_INTERVAL   # poll period, and how long the inputs must stay quiet before a sync
    as_json: bool = False
    quiet: bool = False
    max_wait_intervals: int = 20         # a source that keeps changing is synced at least this often


@dataclass
class SyncOutcome:
    number: int
    started_at: str
    finished_at: str
    elapsed_s: float
    report: RunReport | None = None
    error: LcmEtlError | None = None

    def as_text(self) -> str:
        """One line per sync: when, what it added, how long, then a line per warning (a finding, a skipped line):
        a sync that counts them shows them. A sync that added nothing says so briefly."""
        head = f"{self.finished_at} sync {self.number}:"
        r = self.report
        assert r is not None, "only a sync that succeeded has a line"
        added = [(r.messages.inserted, "messages"), (r.parts.inserted, "parts"), (r.summaries.inserted, "summaries"),
                 (r.boundary_events, "boundary events")]
        what = ", ".join(f"+{n} {name}" for n, name in added if n) or "nothing new"
        what += f", {r.boundaries_moved} boundary events moved" if r.boundaries_moved else ""
        n = len(r.warnings)
        tail = f", {n} warning{'s' if n != 1 else ''}" if n else ""
        return "\n".join([f"{head} {what}{tail} ({self.elapsed_s:.2f} s)"] + [f"  warning: {one_line(w)}"
                                                                            for w in r.warnings])

    def as_dict(self) -> dict:
        """--json: the run report's as_dict(), plus when (timestamp: finished) and which sync; a failed sync
        carries its error instead (docs/schemas/watch.schema.json: a field added here goes there too)."""
        base = {"timestamp": self.finished_at, "started_at": self.started_at, "sync": self.number}
        if self.error is not None:
            return {"schema_version": SCHEMA_VERSION, **base, "error": str(self.error),
                    "exit_code": self.error.exit_code, "elapsed_s": round(self.elapsed_s, 3)}
        assert self.report is not None, "a sync without an error has a report"
        return {**self.report.as_dict(), **base}


# what signal.signal() installs and returns
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class StopFlag:
    """SIGINT/SIGTERM handlers that ask the loop to stop instead of raising in the middle of a sync."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.event = threading.Event()   # its wait() is the loop's sleep: a signal ends the sleep at once
        self.in_sync = False
        self._previous: dict[int, Handler] = {}

    def install(self) -> StopFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame) -> None:
        again = self.event.is_set()
        self.event.set()   # first: another signal may run its handler between any two lines of this one
        if self.in_sync:
            if again:
                raise interrupt(signum)   # the second signal of one sync: abandon it like any interrupted run
            if not self.quiet:   # os.write: a signal handler must not re-enter a buffered stream mid-write
                os.write(2, b"lcm-etl: stopping after this sync (signal again to abandon it)\n")


# --------------------------------------------------------------------------------------------------
# What to watch


def path_signature(path: Path) -> list:
    """A file: its file_signature. A folder: every regular file in it (name and signature), so a new
    transcript, a removed one or a changed sessions.json is a change too."""
    if path.is_dir():
        try:
            children = sorted(path.iterdir())
        except OSError:
            return ["unreadable folder"]
        return [[c.name, file_signature(c)] for c in children if c.is_file()]
    return file_signature(path)


def reconcile_inputs(sessions: list[str], src: Path | None) -> Callable[[], list]:
    """What --sessions names (or the state folder, looked up again at every poll, so a new agent is seen): each
    session store (its file and -wal: a gateway's commit is a change), each folder of transcripts (a new file is
    a change), and the --src database when one is given."""
    from lcm_etl.read.openclaw.openclaw_state import find_inputs
    from lcm_etl.read.snapshot.sqlite_copy import expand

    def signature() -> list:
        inputs = find_inputs([expand(p) for p in sessions])
        paths = inputs.stores + sorted({f.parent for f in inputs.files + inputs.archive_files}) + inputs.files
        if src is not None:
            paths.append(src)
        return [[str(p), path_signature(p)] for p in paths]
    return signature


# --------------------------------------------------------------------------------------------------
# The loop


def watch(run_once: Callable[[], RunReport], inputs: Callable[[], list], opts: WatchOptions) -> int:
    """Sync at start, then at every debounced change, until SIGINT/SIGTERM. Returns the exit code.

    A bad-input error at the first sync ends the watch with that error (the command line is wrong);
    any error of a later sync, and a runtime failure of the first, is one line and is retried at the
    next change, or after a backoff of interval * 2^failures (at most a minute) when nothing changes.
    """
    stop = StopFlag(opts.quiet).install()
    try:
        _announce(opts)
        synced = last_seen = inputs()   # read before the run: a change during the run is a change
        outcome = _sync(1, run_once, stop)
        if outcome.error is not None and outcome.error.exit_code == EXIT_BAD_INPUT:
            raise outcome.error
        _print(outcome, opts)
        number, failures, dirty_since, retry_at = 1, 0, None, None
        if outcome.error is not None:
            failures, retry_at = 1, time.monotonic() + _backoff(opts.interval, 1)
        while not stop.event.wait(opts.interval):   # True: a stop was asked meanwhile
            now, current = time.monotonic(), inputs()
            if current != last_seen:   # still changing: wait for a quiet poll, unless it has been too long
                dirty_since = now if dirty_since is None else dirty_since
                last_seen, retry_at = current, None   # a new change also retries a failed sync at once
                if now - dirty_since < opts.interval * opts.max_wait_intervals:
                    continue
            if (current == synced and not failures) or (retry_at is not None and now < retry_at):
                continue
            number += 1
            outcome = _sync(number, run_once, stop)
            _print(outcome, opts)
            dirty_since = None
            if outcome.error is None:
                synced, failures, retry_at = current, 0, None
            else:
                failures += 1
                retry_at = time.monotonic() + _backoff(opts.interval, failures)
        return 0
    finally:
        stop.restore()


def _sync(number: int, run_once: Callable[[], RunReport], stop: StopFlag) -> SyncOutcome:
    started, t0 = now_iso(), time.monotonic()
    stop.in_sync = True
    try:
        report, error = run_once(), None
    except LcmEtlError as exc:
        swallowed()   # the second signal, raised in a SQLite callback and failed as a write: abandoned as a signal
        report, error = None, exc
    finally:
        stop.in_sync = False
    # the sync's objects are garbage now: collect reference cycles at once (a failed sync's traceback holds
    # its frames, and with them connections and plans), rather than when the collector's thresholds say
    gc.collect()
    return SyncOutcome(number=number, started_at=started, finished_at=now_iso(), elapsed_s=time.monotonic() - t0,
                       report=report, error=error)


def _backoff(interval: float, failures: int) -> float:
    return min(MAX_BACKOFF_S, interval * 2 ** min(failures, 16))


def _announce(opts: WatchOptions) -> None:
    if not opts.as_json and not opts.quiet:
        say(f"lcm-etl: watching (polling every {opts.interval:g} s; Ctrl-C stops)")


def _print(outcome: SyncOutcome, opts: WatchOptions) -> None:
    if outcome.error is not None:   # errors go to stderr as every error does, whatever the output mode
        say(f"{error_line(outcome.error)[0]} (sync {outcome.number}; the watch goes on)")
    if opts.as_json or outcome.error is None:   # a failed sync's text is its line on stderr
        emit(outcome, opts.as_json, opts.quiet)
