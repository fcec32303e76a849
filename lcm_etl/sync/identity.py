"""One source identity: which lcm.db a target's rows, marks and ledger rows came from.

A source is the file its path resolves to (symlinks, `~`, relative spellings are one source) and, within that
path, the database it holds: the first conversation lossless-claw wrote there (its id and creation time, which
lossless-claw never changes; a backup restored in place keeps them). Another database put at the same path
is another source, so its provenance rows do not replace the first one's (conversation ids start at 1 in both).
Its key, `<real path>#<origin>`, is what lcm_etl_conversations, lcm_etl_skipped, lcm_etl_large_files,
the marks (lcm_etl/store/marks.py) and lcm_etl_runs hold as `source_path`.

Targets written before this key hold the path as it was typed. `typed_paths` finds those that name the same
file, so that planning reads their rows as this source's, and the run's last transaction moves them to the key
(95_write_provenance.sql): nothing is planned twice and no row is duplicated.
"""
from __future__ import annotations

import hashlib
import re
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import orjson

from lcm_etl.read.sources import real_path
from lcm_etl.store import marks

# a database with no conversation yet has no origin: its first conversation gives it one, and that run plans
# the source whole (nothing of it is in the target to re-use)
EMPTY_ORIGIN = "empty"


@dataclass(frozen=True)
class SourceIdentity:
    path: str     # the real path
    origin: str   # the database at that path

    @property
    def key(self) -> str:
        return f"{self.path}#{self.origin}"


def path_of(source_path: str) -> str:
    """The path part of a stored `source_path` (a key, or a path an older lcm-etl stored as typed)."""
    path, _, origin = source_path.rpartition("#")
    return path if path and (origin == EMPTY_ORIGIN or re.fullmatch(r"[0-9a-f]{12}", origin)) else source_path


def of_snapshot(original: Path, snapshot: Path) -> SourceIdentity:
    """The identity of the source `original`, read from its snapshot (the source itself is never opened)."""
    with closing(sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)) as con:
        try:
            row = con.execute("SELECT conversation_id, created_at FROM conversations "
                              "ORDER BY conversation_id LIMIT 1").fetchone()
        except sqlite3.Error:
            row = None   # not lossless-claw's: the run reports that itself
    origin = EMPTY_ORIGIN if row is None else \
        hashlib.sha256(orjson.dumps([str(row[0]), str(row[1])])).hexdigest()[:12]
    return SourceIdentity(real_path(original), origin)


def typed_paths(con: sqlite3.Connection, path: str) -> list[str]:
    """The `source_path` values an older lcm-etl wrote (the path as typed) that name the file at `path`, the
    most recently used first. A typed path is resolved as the run that typed it resolved it (its ledger row's
    source fingerprint), else from here."""
    try:
        # each typed path's latest run (one row per path, not the whole ledger's counts)
        rows = con.execute("SELECT source_path, counts FROM lcm_etl_runs WHERE rowid IN (SELECT max(rowid) "
                           "FROM lcm_etl_runs WHERE source_path NOT LIKE '%#%' GROUP BY source_path) "
                           "ORDER BY rowid DESC").fetchall()
        typed = sorted({r[0] for r in con.execute("SELECT DISTINCT source_path FROM lcm_etl_conversations")}
                       | marks.source_paths(con))
        typed = [s for s in typed if "#" not in s]
    except sqlite3.Error:
        return []   # no lcm-etl tables yet
    resolved = {spelled: _as_resolved(spelled, counts) for spelled, counts in rows}   # latest first
    found = [spelled for spelled in resolved if resolved[spelled] == path]
    return found + sorted(s for s in typed if s not in resolved and real_path(s) == path)


def _as_resolved(spelled: str, counts: str | None) -> str:
    try:
        fingerprint = orjson.loads(counts or "{}").get("source_fingerprint")
    except (orjson.JSONDecodeError, AttributeError):
        fingerprint = None
    if isinstance(fingerprint, list) and fingerprint and isinstance(fingerprint[0], str):
        return real_path(fingerprint[0])
    return real_path(spelled)


def spellings_in(target_db: Path | None, source: SourceIdentity) -> list[str]:
    """The source_path values of this source in the target: its key, then the typed paths (typed_paths)."""
    if target_db is None or not Path(target_db).exists():
        return [source.key]
    with closing(sqlite3.connect(f"file:{target_db}?mode=ro", uri=True)) as con:
        return [source.key, *typed_paths(con, source.path)]
