"""Domain errors and the one place that maps them to exit codes (listed in `--help` and docs/cli.md).

Every failure a user can cause or meet is one of these; the CLI prints `str(error)` as a single line on
stderr and exits with `error.exit_code`. Anything else is a bug and is shown as a one-line internal error
(with the traceback only under --debug).
"""
from __future__ import annotations

EXIT_FAILURE = 1      # runtime failure; nothing partial is left behind
EXIT_BAD_INPUT = 2    # bad usage or bad input
EXIT_PENDING = 3      # audit found pending work or differences
EXIT_INTERRUPTED = 130   # 128 + SIGINT (lcm_etl/interrupts.py)
EXIT_TERMINATED = 143    # 128 + SIGTERM

# what `--help` lists (and docs/cli.md explains)
EXIT_CODES = {
    0: "success (audit: the target holds every source fact)",
    EXIT_FAILURE: "runtime failure (locked target, disk full...); the target is as it was or holds whole sessions",
    EXIT_BAD_INPUT: "bad usage or bad input (one line on stderr); nothing was written",
    EXIT_PENDING: "audit: pending work or differences",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); every session written so far is complete, re-run to finish",
    EXIT_TERMINATED: "terminated (SIGTERM, e.g. a service manager stopping it); as 130, every session written so far "
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
    """The user pointed us at something we cannot use; nothing was written."""
    exit_code = EXIT_BAD_INPUT


class RunFailed(LcmEtlError):
    """The run could not complete (locked target, disk full...); the target is as it was."""
    exit_code = EXIT_FAILURE
