"""The kept snapshots' folder as a cache: each pair's folder held by its run, what interrupted runs left removed,
the whole kept within a bound, least recently used first out (lcm_etl/read/snapshot/snapcache.py keeps one pair's copy).

- A run holds its pair's folder with `fcntl.flock` on the folder itself from before it reads or writes the
  copy until it has sealed or discarded it. The OS drops the lock when the run dies, kill -9 included.
- A folder that no run holds and whose copy no seal vouches for is abandoned (a killed run's copy, of its
  source's size): the next run of any pair, or `lcm-etl cache --prune`, removes it, holding it meanwhile.
- $LCM_ETL_CACHE_SIZE (cachedir.cache_bound) bounds the kept snapshots: after a run seals its copy, the pairs
  used least recently are removed until the rest fit; a copy larger than the bound on its own is not kept.
  "Used" is a migrate of the pair that committed, or that found nothing changed (pair.json's mtime).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import os
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from lcm_etl.read.snapshot.runfolder import held, remove_unheld
from lcm_etl.read.snapshot.sqlite_copy import file_signature

SNAPSHOT, SEAL, PAIR = "snapshot.db", "seal.json", "pair.json"
_PAIR_FOLDER = re.compile(r"[0-9a-f]{24}")   # snapcache.SnapshotCache.for_pair's names


def hold(folder: Path) -> int:
    """Make the pair's folder if needed and hold it for this run; the descriptor (release() lets it go). A sweep
    may remove the folder between its making and its locking: then it is made again."""
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)   # a sweep or an audit holds it for moments at most
        try:
            if os.stat(folder).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)


def read_seal(folder: Path) -> tuple[dict | None, str]:
    """The seal of the folder's copy when it vouches for the copy as the file is now; else None and why not."""
    try:
        body = (folder / SEAL).read_bytes()
    except FileNotFoundError:
        return None, "a run that did not finish left it unsealed"
    except OSError as exc:
        return None, f"its seal cannot be read: {exc.strerror}"
    try:
        seal = orjson.loads(body)
    except orjson.JSONDecodeError:
        seal = None
    if not isinstance(seal, dict):
        return None, "its seal cannot be read"
    if seal.get("signature") != file_signature(folder / SNAPSHOT)[0]:
        return None, "its file was changed since it was sealed"
    return seal, ""


def mark_used(folder: Path, source: Path, target: Path) -> None:
    """The pair was used now (its mtime orders eviction); it also names the pair for `lcm-etl cache`."""
    try:
        (folder / PAIR).write_bytes(orjson.dumps({"source": str(source), "target": str(target)}))
    except OSError:   # a cache that cannot be written is said where its copy fails
        pass


@dataclass
class Entry:
    """One pair's folder, as `lcm-etl cache` lists it."""
    folder: str
    source: str | None
    target: str | None
    bytes: int
    last_used: str
    sealed_run: str | None
    state: str   # "sealed", "abandoned" (no seal vouches for its copy, no run holds it), "in use"
    _used_ns: int = 0

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


def entries(root: Path | None, own: Path | None = None) -> list[Entry]:
    """Every pair folder under root, least recently used first; `own`: held by this process (in use)."""
    if root is None:
        return []
    try:
        folders = [p for p in root.iterdir() if _PAIR_FOLDER.fullmatch(p.name) and p.is_dir()]
    except OSError:
        return []
    out = []
    for p in folders:
        try:
            out.append(_entry(p, p == own))
        except FileNotFoundError:   # removed meanwhile (by another run's sweep)
            continue
    return sorted(out, key=lambda e: (e._used_ns, e.folder))


def _entry(folder: Path, own: bool) -> Entry:
    size = 0
    for f in folder.iterdir():
        try:
            size += f.stat().st_size
        except OSError:   # removed meanwhile
            pass
    used = 0
    for marker in (folder / PAIR, folder / SEAL, folder):   # the first that exists says when it was last used
        try:
            used = marker.stat().st_mtime_ns
            break
        except OSError:
            continue
    seal, _ = read_seal(folder)
    names = seal or {}
    if not names:
        try:
            names = orjson.loads((folder / PAIR).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            pass
    names = names if isinstance(names, dict) else {}
    state = "in use" if own or held(folder) else "sealed" if seal else "abandoned"
    when = dt.datetime.fromtimestamp(used / 1e9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Entry(str(folder), names.get("source"), names.get("target"), size, when,
                 seal.get("run_id") if seal else None, state, used)


def sweep(root: Path | None, but: Path | None = None) -> list[Entry]:
    """Remove the abandoned pair folders (`but` that one: the caller's, whose copy it looks at itself); those removed."""
    return [e for e in entries(root) if e.state == "abandoned" and e.folder != str(but)
            and _remove(Path(e.folder), abandoned_only=True)]


def evict(root: Path | None, bound: int, own: Path | None = None) -> tuple[list[Entry], bool]:
    """Remove the least recently used pairs until the rest fit in `bound` bytes (a pair in use by another run
    is passed over); `own`, this run's pair, held by it, comes last and is not removed here. The pairs removed,
    and whether `own` does not fit (its caller then discards it)."""
    listed = entries(root, own)
    total = sum(e.bytes for e in listed)
    removed: list[Entry] = []
    mine = [e for e in listed if e.folder == str(own)]
    if mine and mine[0].bytes > bound:   # too large alone: the others stay
        return removed, True
    for e in [e for e in listed if e.folder != str(own)] + mine:
        if total <= bound:
            break
        if e in mine:
            return removed, True
        if e.state == "in use" or not _remove(Path(e.folder)):
            continue
        removed.append(e)
        total -= e.bytes
    return removed, False


def clear(root: Path | None) -> list[Entry]:
    """Remove every pair folder no run holds."""
    return [e for e in entries(root) if e.state != "in use" and _remove(Path(e.folder))]


def _remove(folder: Path, abandoned_only: bool = False) -> bool:
    """Remove a pair's folder, holding it meanwhile; not when a run holds it (or, abandoned_only, when a seal
    now vouches for its copy: a run sealed it since it was listed)."""
    return remove_unheld(folder, keep=(lambda: read_seal(folder)[0] is not None) if abandoned_only else None)
