"""A file's identity: the one spelling of its path that anything is keyed on, and what a write, a checkpoint, a WAL
reset or a restore changes (as the caches compare it).

A module of its own, below read/ and duck: the kept snapshot's seal (read/snapshot/snapcache.py), the source's
copy (read/snapshot/sqlite_copy.py) and the extension check's record (duck.py) all compare it, and duck is imported by
read/ (tests/test_import_graph.py)."""
from __future__ import annotations

import os
from pathlib import Path


def real_path(path: Path | str, within: str | None = None) -> str:
    """A file's one key (symlinks, `~`, relative spellings are one file), and `<real path>#<within>` for a part of
    it: every command and table keys on it. A source's identity (lcm_etl/sync/identity.py: its ledger rows, marks,
    provenance, a reconcile record's --src), a transcript's record (lcm_etl/read/sessions/transcript_decision.py: a file, a
    store's window or archive row) and the kept snapshot (lcm_etl/read/snapshot/snapcache.py)."""
    real = os.path.realpath(os.path.expanduser(str(path)))
    return real if within is None else f"{real}#{within}"


def file_signature(path: Path) -> list:
    """[inode, size, mtime_ns, ctime_ns] of the database and of its -wal (None when absent). Any write,
    checkpoint, WAL reset or restore changes it (ctime cannot be set back)."""
    out: list[list[int] | None] = []
    for p in (path, Path(str(path) + "-wal")):
        try:
            st = p.stat()
            out.append([st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
        except FileNotFoundError:
            out.append(None)
    return out
