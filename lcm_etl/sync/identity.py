"""One source identity: which lcm.db a target's rows, marks and ledger rows came from.

A source is the file its path resolves to (symlinks, `~`, relative spellings are one source) and, within that
path, the database it holds: the first conversation lossless-claw wrote there (its id and creation time, which
lossless-claw never changes; a backup restored in place keeps them). Another database put at the same path
is another source, so its provenance rows do not replace the first one's (conversation ids start at 1 in both).
Its key, `<real path>#<origin>`, is what lcm_etl_conversations, lcm_etl_skipped, lcm_etl_large_files,
the marks (lcm_etl/store/marks.py) and lcm_etl_runs hold as `source_path`.
"""
from __future__ import annotations

import hashlib
import re
from lcm_etl.sqlite_runtime import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import orjson

from lcm_etl import sqlite_runtime
from lcm_etl.file_identity import real_path

# a database with no conversation yet has no origin: its first conversation gives it one, and that run plans
# the source whole (nothing of it is in the target to re-use)
EMPTY_ORIGIN = "empty"


@dataclass(frozen=True)
class SourceIdentity:
    path: str     # the real path
    origin: str   # the database at that path

    @property
    def key(self) -> str:
        return real_path(self.path, self.origin)


def path_of(source_path: str) -> str:
    """The path part of a stored `source_path` (a key, or a path stored without an origin)."""
    path, _, origin = source_path.rpartition("#")
    return path if path and (origin == EMPTY_ORIGIN or re.fullmatch(r"[0-9a-f]{12}", origin)) else source_path


def of_snapshot(original: Path, snapshot: Path) -> SourceIdentity:
    """The identity of the source `original`, read from its snapshot (the source itself is never opened)."""
    with closing(sqlite_runtime.connect(snapshot)) as con:
        try:
            row = con.execute("SELECT conversation_id, created_at FROM conversations "
                              "ORDER BY conversation_id LIMIT 1").fetchone()
        except sqlite3.Error:
            row = None   # not lossless-claw's: the run reports that itself
    origin = EMPTY_ORIGIN if row is None else \
        hashlib.sha256(orjson.dumps([str(row[0]), str(row[1])])).hexdigest()[:12]
    return SourceIdentity(real_path(original), origin)
