"""What a run is asked to do, without the command line (lcm_etl/options.py parses it with click): the sizes the
options take and the options reading transcripts and reconciling share. Below every layer, so duck, cachedir and
read/ use them without importing click."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# DuckDB's memory units (1000^i and 1024^i), as its memory_limit parser accepts them
_UNITS = {"b": 1, "byte": 1, "bytes": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)
DEFAULT_MEMORY_LIMIT = "96MB"   # DuckDB's memory budget when none is given (--memory-limit's default)


def size_bytes(value: str, bare: bool = False) -> float | None:
    """A size such as 96MB, 2GB or 512MiB in bytes (None: not one); `bare`: a number alone is bytes."""
    if bare and value.strip().isdigit():
        return float(value)
    m = _SIZE.fullmatch(value)
    unit = _UNITS.get(m.group(2).lower()) if m else None
    return None if m is None or unit is None else float(m.group(1)) * unit


def size_text(n: float) -> str:
    """A size as the options and LCM_ETL_CACHE_SIZE take one: 20GB, 451MB, 1.5GB, 12kB."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}" if n < 1000 * scale else f"{n / scale:.0f}{unit}"   # 1500TB
    return f"{int(n)}B"


@dataclass(kw_only=True)
class ReadOptions:
    """What is read of OpenClaw's transcripts (lcm_etl/read/sessions/transcript_reading.py)."""
    sessions: list[str]
    strict: bool = False
    exclude_deleted: bool = False
    key_by: str = "session-id"
    memory_limit: str = DEFAULT_MEMORY_LIMIT
    dry_run: bool = False   # read-only: the store reader's DuckDB keeps no record (duck.connect); no content kept
    session_filter: list[str] = field(default_factory=list)   # the sessions the run may write (none: every one)
    target: Path | None = None   # the target a run that writes commits to: each store's snapshot is kept for it
    content: bool = False   # content kept although dry_run: audit compares it with the target's
    # every session's target rows checked (settle) and every window read; a watch's later syncs: what changed
    every_session: bool = True


@dataclass(kw_only=True)
class ReconcileOptions(ReadOptions):
    """What `reconcile` is asked to do (audit --sessions plans with them too)."""
    target: Path
    src: Path | None = None
    lock_timeout: float = 10.0
    batch_rows: int = 50_000
    progress: bool = False
    full: bool = False   # no record trusted: every transcript read whole (as migrate --full re-plans everything)
