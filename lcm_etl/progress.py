"""Progress on a terminal: a tqdm bar for each phase of a run, so that something moves from the first
second to the last (reading the source, planning, staging, building or writing).

Only when the CLI asks for it (stderr is a TTY, neither --json nor --quiet: cli.progress_wanted);
otherwise every method is a no-op and no thread is started. Some phases are one long SQLite or DuckDB
statement with nothing to count (a new target's parts and FTS rows, the plan's staging): a small thread
refreshes the current bar twice a second, so its clock moves while such a statement runs.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from lcm_etl.interrupts import Worker

if TYPE_CHECKING:
    from tqdm import tqdm

TICK_S = 0.5
_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}]{postfix}"
_BYTES = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}B/{total_fmt}B [{elapsed}, {rate_fmt}]{postfix}"   # unit="B"
_TICKER = "{desc}: {n_fmt} {unit} [{elapsed}]{postfix}"   # no total known ahead (steps=None): a count and a clock


class Progress:
    """One bar at a time: `phase()` closes the current bar and opens the next; `step()` advances it."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar: tqdm | None = None
        self.labels: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def phase(self, desc: str, steps: tuple[str, ...] | int | None = 1, unit: str = "step") -> None:
        """Start a phase of `steps` steps (a count, or their labels in order, shown as each begins; None: a
        ticker, counting what is done with no end known, such as the transcripts of stores not yet opened)."""
        if not self.enabled:
            return
        from tqdm import tqdm   # here: a run without bars (--quiet, --json, no TTY) is spared its 40 ms import
        with self._lock:
            self._close_bar()
            self.labels = steps if isinstance(steps, tuple) else ()
            in_bytes = unit == "B"   # a copy: sizes as 451M, not 473,000,000 steps
            self.bar = tqdm(total=len(steps) if isinstance(steps, tuple) else steps, desc=desc, unit=unit,
                            leave=False, bar_format=_BYTES if in_bytes else _TICKER if steps is None else _FORMAT,
                            unit_scale=in_bytes, unit_divisor=1024)
            if self.labels:
                self.bar.set_postfix_str(self.labels[0])
        if self._ticker is None:
            self._stop.clear()
            self._ticker = Worker(target=self._tick, name="lcm-etl-progress")
            self._ticker.start()

    def step(self, label: str | None = None) -> None:
        """The current step is done; with a label, every step before `label` is, and `label` begins."""
        if not self.enabled:
            return
        with self._lock:
            if self.bar is None:
                return
            if label is None:
                self.bar.update(1)
            else:   # drawn at once: tqdm would skip a redraw within 0.1 s of the last, and steps are few
                self.bar.set_postfix_str(label, refresh=False)
                self.bar.n = self.labels.index(label)
                self.bar.refresh()

    def count(self, done: int, total: int) -> None:
        """A phase measured in units (bytes copied): `done` of `total` so far. Drawn by the ticker twice a
        second, and at once when done, so the bar's end shows whatever the copy's length."""
        if not self.enabled:
            return
        with self._lock:
            if self.bar is None:
                return
            self.bar.total, self.bar.n = total, done
            if done >= total:
                self.bar.refresh()

    def close(self) -> None:
        if not self.enabled:
            return
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
        with self._lock:
            self._close_bar()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                if self.bar is not None:
                    self.bar.refresh()
