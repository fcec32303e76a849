"""Where lcm-etl keeps what a later run may reuse: the previous run's snapshot of each (source, target) pair
(lcm_etl/read/snapcache.py) and the record that the installed sqlite_scanner passed DuckDB's signature check
(lcm_etl/duck.py). $LCM_ETL_CACHE_DIR, else $XDG_CACHE_HOME/lcm-etl, else ~/.cache/lcm-etl; LCM_ETL_CACHE_DIR=off
keeps nothing. Everything in it may be deleted at any time: a run then does the work again."""
from __future__ import annotations

import os
import threading
from pathlib import Path


def cache_root() -> Path | None:
    where = os.environ.get("LCM_ETL_CACHE_DIR")
    if where is not None:
        return None if where.strip().lower() in ("", "off", "0", "none") else Path(where).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lcm-etl"


def write_atomically(path: Path, body: bytes) -> None:
    """Best effort: the file holds `body` whole or is as it was (a reader never sees half a record); a cache
    file that cannot be written only means a later run does the work again."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(body)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
