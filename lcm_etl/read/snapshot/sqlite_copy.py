"""Reading a lossless-claw lcm.db: validate the path and take a consistent snapshot of it.

Why a snapshot: lossless-claw keeps its database in WAL mode, and SQLite (and DuckDB's sqlite_scanner,
which embeds SQLite) creates `-wal`/`-shm` files beside any WAL database it opens, even read-only. The
source directory is the user's OpenClaw state: we must not add files there, and committed rows that
still live only in `lcm.db-wal` must be read. So the main file and its `-wal` are copied into a private
temporary folder (retrying while a live writer changes them under us), the copy is checkpointed there,
and every reader attaches the copy. `immutable=1` is never used: it silently ignores the WAL.

What the copy holds (its schema generation, read as one fixed column set) is lcmdb/source_schema.py's concern.
"""
from __future__ import annotations

import errno
import os
import shutil
from lcm_etl.sqlite_runtime import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lcm_etl.errors import BadInput, RunFailed
from lcm_etl.read.findings import Unreadable, open_regular
from lcm_etl.file_identity import file_signature   # the snapshot's seal; its importers take it from here too
from lcm_etl.interrupts import Worker
from lcm_etl.read.snapshot import runfolder

SQLITE_HEADER = b"SQLite format 3\x00"


def expand(path: str | os.PathLike) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(str(path))))


def _remedy(what: str) -> str:
    return ("point --src at lossless-claw's lcm.db" if what == "source"
            else "point --dest at a Remnic lcm.sqlite, or at a new path")


def unreadable(what: str, path: Path, exc: Exception) -> BadInput:
    """The one-line error for a file SQLite cannot read (a damaged file can make SQLite's message undecodable)."""
    why = ("its schema holds bytes that are not UTF-8: the file is damaged" if isinstance(exc, UnicodeDecodeError)
           else str(exc))
    return BadInput(f"{what} is not a readable SQLite database: {path} ({why}; {_remedy(what)})")


def check_sqlite_file(path: Path, what: str = "source") -> Path:
    """Stat the path ourselves: DuckDB attaches a missing path lazily and fails late with a vague error."""
    if not path.exists():
        raise BadInput(f"{what} not found: {path} (pass --src with the path of lossless-claw's lcm.db)")
    if path.is_dir():
        raise BadInput(f"{what} is a directory, not a database file: {path} (point --src at the lcm.db inside it)")
    try:
        with open(open_regular(path), "rb") as fh:   # a FIFO or a device is never opened
            head = fh.read(len(SQLITE_HEADER))
    except Unreadable as exc:
        raise BadInput(f"{what} {exc.problem}: {path}") from None
    if head != SQLITE_HEADER:
        raise BadInput(f"{what} is not a SQLite database: {path} ({_remedy(what)})")
    return path


@dataclass
class Snapshot:
    """A private, consistent, single-file copy of a source database (WAL content folded in)."""
    original: Path
    path: Path
    folder: Path
    size: int
    _discard: threading.Thread | None = None
    folded: int = 0   # the WAL frames SQLite folded into the copy (its valid frames up to the last commit)
    hold: int | None = None   # the descriptor holding `folder` (lcm_etl/read/snapshot/runfolder.py), let go by close()

    def discard_in_background(self) -> None:
        """Start deleting the folder (snapshot, plan, stage, scratch: gigabytes on a large source, seconds
        of unlinking) once nothing reads it any more, so it overlaps with the target's final fsync."""
        self._discard = Worker(target=shutil.rmtree, args=(self.folder,), kwargs={"ignore_errors": True},
                               name="lcm-etl-discard")
        self._discard.start()

    def close(self) -> None:
        if self._discard is not None:
            self._discard.join()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.hold is not None:
            os.close(self.hold)
            self.hold = None


COPY_CHUNK = 8 << 20   # what copy_file moves between two reports of its progress


def copy_file(src: Path | str, dst: Path | str, copied: Callable[[int], None] | None = None,
              size: int | None = None) -> None:
    """shutil.copyfile (of the first `size` bytes, fewer if the file is shorter), telling `copied` the bytes each
    chunk moved (os.sendfile, as copyfile uses on Linux: no copy through user space). Where sendfile cannot copy file
    to file (macOS: to sockets only), copyfile does it in one go."""
    if copied is None and size is None:
        shutil.copyfile(src, dst)
        return
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while size is None or fout.tell() < size:
            try:
                n = os.sendfile(fout.fileno(), fin.fileno(), None,
                                COPY_CHUNK if size is None else min(COPY_CHUNK, size - fout.tell()))
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK) or fout.tell():
                    raise
                break   # no sendfile between these files: copied whole below
            if n == 0:
                return
            if copied is not None:
                copied(n)
        else:
            return
    shutil.copyfile(src, dst)
    if size is not None:
        os.truncate(dst, min(size, os.path.getsize(dst)))


def take_snapshot(path: Path, what: str = "source", tmp_root: str | None = None, attempts: int = 20,
                  into: Path | None = None, progress: Callable[[int, int], None] | None = None,
                  wal_seen: Callable[[Path, list], None] | None = None) -> Snapshot:
    """Copy db + -wal until an unchanged signature brackets the copy, then checkpoint the copy. The copy is
    made in a private temporary folder, or at `into` (the kept copy of lcm_etl/read/snapshot/snapcache.py).
    `progress(done, total)` follows the copy in bytes (an attempt that has to start over starts at 0).
    `wal_seen(copied -wal, signature before the copy)` is told of the copied -wal before it is folded.

    A live writer appending to the WAL cannot hurt a copy: SQLite reads WAL frames only up to the last
    commit whose checksum chain is intact. A checkpoint or WAL reset during the copy changes the main
    file's or the WAL's signature and the copy is retried.
    """
    check_sqlite_file(path, what)
    folder, hold = runfolder.make(tmp_root)
    copy = into or folder / "snapshot.db"
    try:
        for _ in range(attempts):
            before = file_signature(path)
            for suffix in ("-wal", "-journal"):
                Path(str(copy) + suffix).unlink(missing_ok=True)
            copied = _counter(before, progress)
            copy_file(path, copy, copied)
            wal = Path(str(path) + "-wal")
            if wal.exists():
                copy_file(wal, str(copy) + "-wal", copied)
            if unchanged_but_appended(before, file_signature(path)):
                break
        else:
            raise RunFailed(f"{what} kept changing while it was copied: {path}; retry when it is quieter")
        if wal_seen is not None:
            wal_seen(Path(str(copy) + "-wal"), before)
        folded = fold_wal(copy, path, what)
        return Snapshot(original=path, path=copy, folder=folder, size=copy.stat().st_size, hold=hold, folded=folded)
    except OSError as exc:
        _remove(folder, into, hold)
        if into is not None:   # the kept copy's folder: the caller copies again where a run's copy goes
            raise CacheUnwritable(exc) from None
        raise RunFailed(f"cannot copy the {what} into the temporary folder {folder.parent}: {why_failed(exc)} "
                        "(free space there, or point TMPDIR elsewhere); nothing was written") from None
    except BaseException:
        _remove(folder, into, hold)
        raise


class CacheUnwritable(Exception):
    """The cache folder could not take a kept copy (lcm_etl/read/snapshot/snapcache.py goes on without one)."""

    def __init__(self, cause: OSError):
        super().__init__(why_failed(cause))
        self.why = why_failed(cause)


def why_failed(exc: OSError) -> str:
    return "disk full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)


def _counter(signature: list, progress: Callable[[int, int], None] | None) -> Callable[[int], None] | None:
    """What copy_file tells, summed over the main file and its -wal (their sizes in `signature`)."""
    if progress is None:
        return None
    total = sum(side[1] for side in signature if side is not None)
    done = [0]

    def copied(n: int) -> None:
        done[0] += n
        progress(done[0], max(total, done[0]))   # a WAL may grow while it is copied
    progress(0, total)
    return copied


def _remove(folder: Path, into: Path | None, hold: int) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    os.close(hold)
    if into is not None:
        for suffix in ("", "-wal", "-journal"):
            Path(str(into) + suffix).unlink(missing_ok=True)


def unchanged_but_appended(before: list, after: list) -> bool:
    """The copy brackets one consistent state: the main file did not change, and the WAL is the same file and
    only grew. Frames appended to the WAL while it was copied cannot hurt: SQLite reads frames only up to the
    last commit whose checksum chain is intact (a torn last frame is ignored), so the copy is the state at
    some commit. A checkpoint (the main file changes) or a WAL reset or truncation (it shrinks, or a new file)
    is retried. Demanding an unchanged WAL as well made a copy under a steadily writing lossless-claw on a
    busy machine retry until it gave up."""
    (db0, wal0), (db1, wal1) = before, after
    if db0 != db1:
        return False
    if wal0 is None or wal1 is None:
        return wal0 == wal1
    return wal0[0] == wal1[0] and wal1[1] >= wal0[1]


def fold_wal(copy: Path, original: Path, what: str) -> int:
    """Checkpoint the copy's -wal into it and leave it in rollback mode: the number of WAL frames folded (SQLite's
    own count of the valid frames up to the last commit, its checksum chain verified)."""
    try:
        con = sqlite3.connect(copy, isolation_level=None)
        try:
            # a private copy: a crash loses only the copy, so no fsync (on a freshly copied file, the first
            # fsync writes the whole file back to disk: 1.6 s of a 452 MB source's re-run)
            con.execute("PRAGMA synchronous=OFF")
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            # PASSIVE first: it says how many frames the WAL holds (TRUNCATE says 0, having reset it)
            _busy, folded, _ = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.execute("PRAGMA journal_mode=DELETE")
            return max(folded, 0)   # -1: the copy is not in WAL mode (no -wal beside it)
        finally:
            con.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        # the copy's own disk full, or its folder unwritable, is the copy's failure, not the source's
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code in _COPY_FAILED:
            raise OSError(errno.ENOSPC if code == _SQLITE_FULL else errno.EIO, str(exc)) from None
        raise unreadable(what, original, exc) from None


_SQLITE_FULL = 13
_COPY_FAILED = {8, 10, 13, 14}   # SQLITE_READONLY, SQLITE_IOERR, SQLITE_FULL, SQLITE_CANTOPEN
