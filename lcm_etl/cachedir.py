"""Where lcm-etl keeps what a later run may reuse: the previous run's snapshot of each (source, target) pair
(lcm_etl/read/snapshot/snapcache.py) and the record that the installed sqlite_scanner passed DuckDB's signature check
(lcm_etl/duck.py). $LCM_ETL_CACHE_DIR, else $XDG_CACHE_HOME/lcm-etl, else ~/.cache/lcm-etl; LCM_ETL_CACHE_DIR=off
keeps nothing. $LCM_ETL_CACHE_SIZE bounds the kept snapshots (lcm_etl/read/snapshot/cache_bounds.py). Everything in it may
be deleted at any time: a run then does the work again."""
from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

from lcm_etl.report import say
from lcm_etl.run_options import size_bytes

# the kept snapshots' bound when LCM_ETL_CACHE_SIZE is not set: a snapshot is its source's size (4.5 GB for 2M
# messages), so this keeps a few large installations' or many agents' snapshots, and no disk is filled by them
DEFAULT_CACHE_SIZE = "20GB"


def cache_root() -> Path | None:
    where = os.environ.get("LCM_ETL_CACHE_DIR")
    if where is not None:
        return None if where.strip().lower() in ("", "off", "0", "none") else Path(where).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lcm-etl"


def cache_bound() -> tuple[int, str]:
    """The most the kept snapshots may hold, in bytes, and as written ($LCM_ETL_CACHE_SIZE, else the default).
    A value that is not a size fails no run (the cache never does): the default, and a warning, once."""
    text = os.environ.get("LCM_ETL_CACHE_SIZE") or DEFAULT_CACHE_SIZE
    size = size_bytes(text, bare=True)
    if size is None:
        _not_a_size(text)
        text, size = DEFAULT_CACHE_SIZE, size_bytes(DEFAULT_CACHE_SIZE)
    return int(size or 0), text.strip()


@functools.cache   # once per process and value: the bound is read at a run's start and again at its end
def _not_a_size(text: str) -> None:
    say(f"lcm-etl: warning: LCM_ETL_CACHE_SIZE={text!r} is not a size such as 20GB, 512MB or 0 (keep no "
        f"snapshot): the default, {DEFAULT_CACHE_SIZE}, bounds the kept snapshots")


def write_atomically(path: Path, body: bytes) -> bool:
    """Best effort: the file holds `body` whole or is as it was (a reader never sees half a record); a cache
    file that cannot be written (False) only means a later run does the work again."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(body)
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:   # no folder to hold it (a file where the cache folder should be)
            pass
        return False
