"""One lcm-etl run per target at a time: an advisory lock on a small file beside the target.

Two runs on one target (a cron run overlapping a manual one) would otherwise both decide the target is
new and both build it, or both plan the same rows of an existing one. A writing run therefore holds
`fcntl.flock` on `.NAME.lcm-etl-lock` in the target's folder from before it decides whether the target
exists until the target is written (linked into place or committed); a second run waits up to
--lock-timeout for it, then looks again and finds the first run's target (a re-run: it adds nothing).

- The OS drops a flock when its process dies, kill -9 included: a lock is never stale, and the empty
  file a killed run leaves is simply locked again by the next run.
- The file is removed at the end of every run, while it is still locked, so a finished or failed run
  leaves the folder as it found it (and a folder the lock created goes again if nothing else is in it).
  A run that waited on the removed file finds, once it holds that file's lock, that the name no longer
  leads to it, and starts over on a fresh file: two runs never both hold the lock of the live name.
- Only lcm-etl takes this lock. A live Remnic does not, and need not: SQLite's own locking still governs
  every write into an existing target (`target.begin_immediate`).
- Dry runs take no lock: they write nothing, not even this file.

flock with a deadline is a non-blocking attempt polled until the deadline (Python has no timed flock);
the py-filelock package does the same, but neither removes its file safely nor tidies the folder.
"""
from __future__ import annotations

import errno
import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path

from lcm_etl.errors import BadInput, RunFailed

POLL_S = 0.05   # how often a waiting run tries the lock again (its wait is bounded by --lock-timeout)


def lock_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.lcm-etl-lock")


@contextmanager
def target_lock(target: Path, timeout: float, dry_run: bool = False):
    """Hold the target's run lock for the block (nothing at all for a dry run)."""
    if dry_run:
        yield
        return
    path = lock_path(target)
    fd, made = _acquire(path, target, timeout)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)   # still locked: no other run can be holding this name
        os.close(fd)                   # releases the lock
        remove_folders(made)           # the ones the lock file needed, when the run left them empty


def _acquire(path: Path, target: Path, timeout: float) -> tuple[int, list[Path]]:
    deadline = time.monotonic() + timeout
    while True:
        made = folders_to_make(path)
        fd = _open(path, target)
        try:
            _wait_for_lock(fd, target, timeout, deadline)
            if _same_file(fd, path):
                return fd, made
        except BaseException:
            os.close(fd)
            remove_folders(made)
            raise
        os.close(fd)   # locked a name the previous holder removed: try again with the live one


def _open(path: Path, target: Path) -> int:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise RunFailed(f"disk full: cannot create {path.name} beside the target {target}; "
                            "free space and re-run; nothing was written") from None
        raise BadInput(f"target folder is not writable: {path.parent} ({exc.strerror}); lcm-etl writes its run "
                       f"lock and SQLite its journal beside the target {target} (choose a --dest you can "
                       "write to)") from None


def held(target: Path) -> bool:
    """A live lcm-etl run holds the target's run lock now (read-only: no file is created, none is kept
    locked). A killed run's lock went with its process, so its ledger row still `running` is a dead run's."""
    try:
        fd = os.open(lock_path(target), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:   # no lock file: no run
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)   # releases the shared lock if it was taken
    return False


def _wait_for_lock(fd: int, target: Path, timeout: float, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise RunFailed(f"another lcm-etl run holds the target: {target} (waited {timeout:g} s for it to "
                                "finish; re-run later or raise --lock-timeout); nothing was written") from None
            time.sleep(POLL_S)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def folders_to_make(target: Path) -> list[Path]:
    """The target's folders that do not exist yet, deepest first (the run creates them)."""
    return [p for p in (target.parent, *target.parent.parents) if not p.exists()]


def remove_folders(made: list[Path]) -> None:
    for folder in made:
        try:
            folder.rmdir()
        except OSError:   # not empty: something else lives there now
            break
