"""A file's identity as the caches compare it: what a write, a checkpoint, a WAL reset or a restore changes.

A module of its own, below read/ and duck: the snapshot's seal (read/sources.py), the kept copy's cache and the
extension check's record (duck.py) all compare it, and duck is imported by read/ (tests/test_import_graph.py)."""
from __future__ import annotations

from pathlib import Path


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
