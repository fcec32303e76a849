"""Domain errors and the one place that maps them to exit codes (listed in `--help` and docs/cli.md).

Every failure a user can cause or meet is one of these; `error_line` makes its single line and exit code, which
the CLI prints on stderr and exits with (a watch prints it and goes on). A SIGINT or SIGTERM is its own line and
128 + its number (lcm_etl/interrupts.py). Anything else is a bug and is shown as a one-line internal error (with
the traceback only under --debug).
"""
from __future__ import annotations

import signal
import traceback

from lcm_etl.interrupts import Interrupted, interruption
from lcm_etl.report import one_line

EXIT_FAILURE = 1      # runtime failure; nothing partial is left behind
EXIT_BAD_INPUT = 2    # bad usage or bad input
EXIT_PENDING = 3      # audit found pending work or differences

# what `--help` lists (and docs/cli.md explains)
EXIT_CODES = {
    0: "success (audit: the target holds every source fact)",
    EXIT_FAILURE: "runtime failure (locked target, disk full...); the target is as it was or holds whole sessions",
    EXIT_BAD_INPUT: "bad usage or bad input (one line on stderr); nothing was written",
    EXIT_PENDING: "audit: pending work or differences",
    Interrupted(signal.SIGINT).exit_code: "interrupted (Ctrl-C); every session written so far is complete, re-run "
                                          "to finish",
    Interrupted(signal.SIGTERM).exit_code: "terminated (SIGTERM, e.g. a service manager stopping it); as 130, every session written so far "
                     "is complete",
}


class LcmEtlError(Exception):
    exit_code = EXIT_FAILURE

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # always one line, whatever the cause carried
        return " ".join(self.message.split("\n"))


class BadInput(LcmEtlError):
    """The user pointed us at something we cannot use; nothing was written. `problem`: what is wrong, without the
    remedy the message adds (a finding says it in its own words)."""
    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, problem: str | None = None):
        super().__init__(message)
        self.problem = problem or message


class RunFailed(LcmEtlError):
    """The run could not complete (locked target, disk full...); the target is as it was."""
    exit_code = EXIT_FAILURE


def error_line(exc: BaseException, debug: bool = False) -> tuple[str, int]:
    """The one line on stderr for an error, and the exit code it means; under --debug the traceback first."""
    stop = interruption(exc)
    if stop is not None:
        return f"lcm-etl: {stop.line()}", stop.exit_code
    if debug:
        traceback.print_exception(exc)
    if isinstance(exc, LcmEtlError):
        return f"lcm-etl: error: {one_line(str(exc))}", exc.exit_code   # a path or an id may hold controls
    # a bug: still one line unless asked
    first = str(exc).splitlines()[0] if str(exc) else ""
    return (f"lcm-etl: internal error: {type(exc).__name__}: {one_line(first)} (re-run with --debug and report it)",
            EXIT_FAILURE)
