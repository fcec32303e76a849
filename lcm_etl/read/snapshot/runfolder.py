"""A run's private temporary folder (its snapshot, the plan's DuckDB spill files, the stage), and the removal of
those that killed runs left behind.

A run removes its folder when it ends, however it ends, except when it is killed (kill -9, a power cut): then
the folder stays, with up to the source's size in it. So each folder is held, for its run's life, by an
`fcntl.flock` on the folder itself, which the OS drops when the process dies; the next run that makes a folder
in the same place removes every such folder that no process holds. A folder is locked before it gets the
name the sweep looks for (it is made under another prefix, locked, then renamed), so a sweep never meets a
folder whose run has not locked it yet. Folders of other commands (tempfile's own) are never touched.
"""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

PREFIX = "lcm-etl-run-"     # a held run folder: removed by the next run once nothing holds it
_MAKING = "lcm-etl-new-"    # made but not yet held: never swept


def make(tmp_root: str | None) -> tuple[Path, int]:
    """A new run folder in tmp_root (else TMPDIR), and the descriptor that holds it (close it to let it go).
    Folders that killed runs left there are removed first."""
    sweep(tmp_root)
    made = Path(tempfile.mkdtemp(prefix=_MAKING, dir=tmp_root))
    fd = os.open(made, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        while True:
            named = made.with_name(PREFIX + os.urandom(6).hex())
            try:
                os.rename(made, named)   # no-op for the lock: it is on the folder, not its name
                return named, fd
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
    except BaseException:
        os.close(fd)
        shutil.rmtree(made, ignore_errors=True)
        raise


def sweep(tmp_root: str | None) -> list[Path]:
    """Remove the run folders in tmp_root (else TMPDIR) that no live run holds; the ones removed."""
    root = Path(tmp_root or tempfile.gettempdir())
    try:
        found = [p for p in root.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return []
    return [p for p in found if remove_unheld(p)]


def remove_unheld(folder: Path, keep: Callable[[], bool] | None = None) -> bool:
    """Remove `folder` when no process holds it (holding it meanwhile, so no run can take it up) and, asked
    once it is held, `keep()` is not true."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False   # a live run's
        if keep is not None and keep():
            return False
        shutil.rmtree(folder, ignore_errors=True)
        return not folder.exists()
    finally:
        os.close(fd)


def held(folder: Path) -> bool:
    """Some process holds `folder` (a shared lock is tried and let go at once: nothing is changed)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


class Held:
    """A held run folder used as tempfile.TemporaryDirectory is: `.name`, `.cleanup()`, and as a context manager
    that gives the name; a killed run's is removed by the next run (make)."""

    def __init__(self, tmp_root: str | None = None):
        folder, fd = make(tmp_root)
        self.name = str(folder)
        self._fd: int | None = fd

    def cleanup(self) -> None:
        if self._fd is not None:
            shutil.rmtree(self.name, ignore_errors=True)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc) -> None:
        self.cleanup()
