"""Findings: history a source holds that cannot be read (docs/design.md, "Words"; docs/mapping.md, "Damage").

Each transcript, archive, cold file, pending input, session store and registered database is read on its own. What
cannot be read (unparsable, unreadable, not a regular file, cut short, failing the hash, size or counts its row
declares) is a **finding** naming it and what is wrong, and everything else is read: reconcile reports each as a
warning and exits 0 (`--strict`: exit 2, nothing written), audit as a difference (exit 3). A finding is a dict of
FINDING_KEYS, the shape of audit's differences; whoever reads a source appends its findings to a list the run
gathers (`Inputs.findings`, `OpenStore.findings`, `Reading.findings()`).

Source files are read here only when they are regular files (a FIFO would block a read for ever, a symlink to
/dev/zero never ends), opened without blocking and read to at most `limit` bytes.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from lcm_etl.errors import BadInput

FINDING_KEYS = ("kind", "problem", "session_id", "source_id", "detail")


def finding(kind: str, source_id: str | Path, problem: str, session_id: str | None = None,
            detail: str = "not read") -> dict:
    """One finding: what it is (`kind`), where (`source_id`: a path, `<store>#<table or name>`), what is wrong."""
    return dict(zip(FINDING_KEYS, (kind, problem, session_id, str(source_id), detail)))


def as_warning(f: dict) -> str:
    """A finding as reconcile's warning line."""
    return (f"{f['kind']} {f['source_id']}" + (f" (window {f['session_id']})" if f["session_id"] else "")
            + f": {f['problem']}; {f['detail']}")


def refuse_under_strict(findings: list[dict]) -> None:
    """--strict: a finding is an error (exit 2), and nothing is written."""
    if findings:
        more = f" (and {len(findings) - 1} more)" if len(findings) > 1 else ""
        raise BadInput(f"--strict: {as_warning(findings[0])}{more}; nothing was written")


class Unreadable(Exception):
    """A source file that cannot be read: `problem` says why, in a finding's words."""

    def __init__(self, problem: str, reason: str | None = None, larger: bool = False):
        super().__init__(problem)
        self.problem, self.reason = problem, reason   # reason: the system's word (Permission denied), if any
        self.larger = larger   # longer than the limit it was read with (read_regular)


_TYPES = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def not_regular(mode: int) -> str | None:
    """Why a file of this mode is never opened as a source, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _TYPES if test(mode)), "not a regular file")
    return f"not a regular file ({kind}): not opened"


def open_regular(path: Path) -> int:
    """A descriptor of `path` opened for reading when it is a regular file (a symlink is followed to one); else
    Unreadable. Opened without blocking (a FIFO swapped in after the stat opens at once), checked again by fstat."""
    try:
        why = not_regular(os.stat(path).st_mode)
        if why is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
            why = not_regular(os.fstat(fd).st_mode)
            if why is None:
                os.set_blocking(fd, True)
                return fd
            os.close(fd)
    except OSError as exc:
        raise Unreadable(f"cannot be read ({exc.strerror or exc})", exc.strerror or str(exc)) from None
    raise Unreadable(why)


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """A regular file's bytes (open_regular), at most `limit` of them: a longer file is Unreadable."""
    fd = open_regular(path)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read() if limit is None else fh.read(limit + 1)
    except OSError as exc:
        raise Unreadable(f"cannot be read ({exc.strerror or exc})", exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if limit is not None and len(data) > limit:
        raise Unreadable(f"larger than the {limit} bytes expected: not read", larger=True)
    return data
