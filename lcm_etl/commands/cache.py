"""`cache`: the kept snapshots (lcm_etl/read/snapshot/snapcache.py) in the cache folder (lcm_etl/cachedir.py), listed, and
with --prune or --clear removed. Listing changes nothing and never makes the folder."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lcm_etl.cachedir import cache_bound, cache_root
from lcm_etl.errors import BadInput
from lcm_etl.read.snapshot import cache_bounds, runfolder
from lcm_etl.run_options import size_text
from lcm_etl.report import SCHEMA_VERSION, one_line_each, plural

_STATES = {"sealed": "", "in use": "in use by a run now",
           "abandoned": "abandoned (left by a run that did not finish): removed by the next run or --prune"}


@dataclass
class CacheReport:
    folder: str | None
    bound: str
    bound_bytes: int
    snapshots: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    run_folders_removed: int = 0   # killed runs' temporary folders (lcm_etl/read/snapshot/runfolder.py), with --prune/--clear

    @property
    def total_bytes(self) -> int:
        return sum(s["bytes"] for s in self.snapshots)

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "folder": self.folder, "bound": self.bound,
                "bound_bytes": self.bound_bytes, "total_bytes": self.total_bytes, "snapshots": self.snapshots,
                "removed": self.removed, "run_folders_removed": self.run_folders_removed}

    def as_text(self) -> str:
        if self.folder is None:
            return "lcm-etl cache: off (LCM_ETL_CACHE_DIR=off): no snapshot is kept"
        lines = [f"lcm-etl cache: {self.folder}: {plural(len(self.snapshots), 'kept snapshot')}, {size_text(self.total_bytes)} of "
                 f"{size_text(self.bound_bytes)} (LCM_ETL_CACHE_SIZE={self.bound})"]
        for s in self.snapshots:
            pair = f"{s['source']} -> {s['target']}" if s["source"] else Path(s["folder"]).name
            state = _STATES[s["state"]] or f"run {s['sealed_run']}"
            lines.append(f"  {s['last_used']}  {size_text(s['bytes']):>10}  {pair}  {state}")
        if self.removed or self.run_folders_removed:
            lines.append(f"  removed {plural(len(self.removed), 'kept snapshot')} ({size_text(sum(r['bytes'] for r in self.removed))})"
                         f" and {plural(self.run_folders_removed, 'folder')} of killed runs")
        return one_line_each(lines)


def cache(prune: bool = False, clear: bool = False) -> CacheReport:
    if prune and clear:
        raise BadInput("--prune and --clear: give one (--clear removes every kept snapshot, --prune those left by "
                       "interrupted runs and those over the bound)")
    root = cache_root()
    bound, written = cache_bound()
    report = CacheReport(str(root) if root else None, written, bound)
    if root is None:
        return report
    removed: list[cache_bounds.Entry] = []
    if prune or clear:
        removed = cache_bounds.clear(root) if clear else \
            cache_bounds.sweep(root) + cache_bounds.evict(root, bound)[0]
        report.run_folders_removed = len(runfolder.sweep(tempfile.gettempdir()))
    report.removed = [e.as_dict() for e in removed]
    report.snapshots = [e.as_dict() for e in reversed(cache_bounds.entries(root))]   # most recently used first
    return report
