"""SIGINT and SIGTERM stop a run the same way: as an exception raised in the main thread.

Python's default SIGTERM ends the process at once: no `finally` runs, so the run lock, a new target's
building file, the private folder (snapshot, plan, DuckDB's spill files) and an unsealed kept snapshot
stayed behind. Raised as `Interrupted`, a signal unwinds the run like Ctrl-C does: every context manager
releases what it holds, and the CLI (`cli.handled`, the one place that turns errors into exit codes) prints
one line and exits 128 + the signal's number (130, 143).

`Interrupted` is a KeyboardInterrupt so that what already stops on Ctrl-C stops on it too. DuckDB catches
what a signal handler raises inside a query and raises `RuntimeError('Query interrupted')` from it, and a
cleanup that fails while a run unwinds raises its own error: `interruption()` finds the signal in the
exception's chain, so a signal is reported as a signal whatever phase it lands in.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# what each signal's line says after "lcm-etl: " (the exit code is 128 + the signal's number)
_WHAT: dict[int, str] = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}


class Interrupted(KeyboardInterrupt):
    """A SIGINT or SIGTERM, raised where the main thread was when it arrived."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def line(self) -> str:
        return f"{_WHAT.get(self.signum, f'stopped by signal {self.signum}')}; every session written so far is " \
               "complete, re-run to finish"


class _Received:
    """The signal that stopped this process's run, once one arrived. A signal handler raises where the main thread
    is, and where that is a SQLite callback (a user-defined function such as lcm_etl_utf8_json) SQLite swallows
    the exception and fails the statement with "user-defined function raised exception": no Interrupted is left
    in the error's chain. So the handler records the signal too, and interruption() reports it whatever error the
    run then ends with. Process state, as a signal's disposition is."""
    signum: int | None = None


def swallowed() -> None:
    """Raise the signal a run received and some library swallowed whole (the run went on and completed): DuckDB
    imports pyarrow.compute lazily inside to_arrow_table() and drops an exception raised during that import, and a
    Ctrl-C there was lost (the run said "Done." and exited 0, about 1 in 8 tries). The signal still ends the
    command as a signal: exit 130 or 143, every session written complete."""
    if _Received.signum is not None:
        raise Interrupted(_Received.signum)


def interrupt(signum: int) -> Interrupted:
    """What a handler raises for a signal that stops the run, the signal recorded first (_Received: a SQLite
    callback swallows what is raised in it)."""
    _Received.signum = signum
    return Interrupted(signum)


def _raise(signum: int, frame) -> None:
    raise interrupt(signum)


@contextmanager
def raised_as_interrupted() -> Iterator[None]:
    """For the block, SIGINT and SIGTERM raise Interrupted; the previous handlers come back after it. Only
    the main thread can install a handler (a command run from another thread, as some tests do, keeps them)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Received.signum = None
    previous = {sig: signal.signal(sig, _raise) for sig in _WHAT}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop_worker(signum: int, frame) -> None:
    """A fleet worker's handler: from now on it ignores both signals (worker_stopped), and a pair it is
    running unwinds as a run does; an idle worker has nothing to unwind (a raise there would end the process
    with multiprocessing's traceback) and exits when its pool shuts down."""
    running = signal.getsignal(signum) is _stop_pair
    for sig in _WHAT:
        signal.signal(sig, signal.SIG_IGN)
    _Received.signum = signum   # a pair queued to an idle worker is not started, with this signal's exit code
    if running:
        raise Interrupted(signum)


def _stop_pair(signum: int, frame) -> None:
    _stop_worker(signum, frame)


def in_a_worker() -> None:
    """A fleet's worker process (its pool's initializer). Ctrl-C reaches the workers from the terminal, and a
    SIGTERM sent to the parent alone is forwarded to them (fleet.run_fleet): either way each stops once."""
    for sig in _WHAT:
        signal.signal(sig, _stop_worker)


@contextmanager
def pair_in_worker() -> Iterator[None]:
    """While a worker runs a pair, a signal stops the pair as it stops a run (Interrupted)."""
    for sig in _WHAT:
        signal.signal(sig, _stop_pair)
    try:
        yield
    finally:
        if not worker_stopped():
            for sig in _WHAT:
                signal.signal(sig, _stop_worker)


def worker_stopped() -> Interrupted | None:
    """In a fleet's worker (in_a_worker): the signal that has stopped it, if one has, so it starts no further pair
    (a pair queued to it before the parent could cancel it)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return None
    return Interrupted(_Received.signum or signal.SIGINT)


def interruption(exc: BaseException | None) -> Interrupted | None:
    """The signal that stopped the run, if `exc` is one or was raised while one was being handled (a plain
    KeyboardInterrupt is a SIGINT)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Interrupted):
            return exc
        if isinstance(exc, KeyboardInterrupt):
            return Interrupted(signal.SIGINT)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    # a signal whose exception SQLite swallowed (a user-defined function's): the error is its consequence
    return Interrupted(_Received.signum) if _Received.signum is not None and seen else None


class Worker(threading.Thread):
    """A run's background thread (daemon: the run's cleanup, not the interpreter, stops it), whose join() and
    is_alive() stay true to it after a signal interrupted a join. CPython before 3.13 handles an exception
    raised while Thread.join() waits by releasing the thread's own lock and marking it stopped although it
    still runs (bpo-45274): the cleanup's second join returned at once, the strategy saw no live builder to
    cancel, and the process exited with the thread inside DuckDB (which then aborts: exit -6) or SQLite (a
    building file written after its removal). An Event set when the target returns is what join waits for."""

    def __init__(self, target, name: str, args: tuple = (), kwargs: dict | None = None):
        super().__init__(target=target, name=name, args=args, kwargs=kwargs or {}, daemon=True)
        self.finished = threading.Event()
        self.launched = False

    def start(self) -> None:
        try:
            super().start()
        except Exception:   # the thread could not be made
            raise
        except BaseException:   # a signal while start() waited for the new thread: that thread runs
            self.launched = True
            raise
        self.launched = True

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.finished.set()

    def join(self, timeout: float | None = None) -> None:
        if not self.launched:   # never started: nothing to wait for
            return
        if self.finished.wait(timeout):
            super().join(timeout)   # the thread's last steps after its target

    def is_alive(self) -> bool:
        return self.launched and not self.finished.is_set()
