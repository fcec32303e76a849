"""`runs`: the target's ledger, read-only: every run with its command, times, status, source, options, counts."""
from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from lcm_etl.store import ledger, target as tgt
from lcm_etl.report import SCHEMA_VERSION, one_line_each
from lcm_etl.read.sources import take_snapshot


@dataclass
class RunsReport:
    target: str
    ledger_schema_version: int = 0   # of the lcm_etl_* tables (lcm_etl/store/ledger.py); 0: no ledger yet
    runs: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "target": self.target,
                "ledger_schema_version": self.ledger_schema_version, "runs": self.runs}

    def as_text(self) -> str:
        if not self.runs:
            return f"lcm-etl runs: {self.target}: no run recorded"
        lines = [f"lcm-etl runs: {self.target}",
                 f"  {'run id':<32}  {'command':<9}  {'status':<8}  {'started':<24}  {'finished':<24}  what"]
        for r in self.runs:
            lines.append(f"  {r['run_id']:<32}  {r['command']:<9}  {r['status']:<8}  {r['started_at']:<24}  "
                         f"{r['finished_at'] or '-':<24}  {_what(r)}")
        return one_line_each(lines)


def _what(run: dict) -> str:
    counts = run["counts"] if isinstance(run["counts"], dict) else {}
    if run["command"] == "undo":
        removed = counts.get("removed", {})
        return f"undid {counts.get('undid')}: removed " + ", ".join(f"{k} {n}" for k, n in removed.items() if n)
    written = counts.get("written", {})
    shown = [f"{k.removesuffix('_inserted')} {n}" for k, n in written.items() if n and k != "part_times_fixed"]
    source = f" from {run['source_path']}" if run["source_path"] else ""
    if counts.get("shortcut_of"):
        return f"nothing changed{source}"
    return (", ".join(shown) or "nothing written") + source + (f" (undone by {run['undone_by']})" if run["undone_by"] else "")


def list_runs(target: Path) -> RunsReport:
    from lcm_etl.errors import BadInput

    if not tgt.check_target(target, open_it=False):
        raise BadInput(f"no target at {target}: no runs")
    report = RunsReport(target=str(target))
    wal = Path(f"{target}-wal")
    if wal.exists() and wal.stat().st_size:   # rows may live in the WAL: read a private copy of it all
        copy = take_snapshot(target, "target")
        try:
            tgt.check_remnic(copy.path, target)
            _read(f"file:{copy.path}?mode=ro", report)
        finally:
            copy.close()
    else:   # immutable: opening a database, even read-only, may create files beside it
        tgt.check_remnic(target, target)
        _read(f"file:{target}?mode=ro&immutable=1", report)
    return report


def _read(uri: str, report: RunsReport) -> None:
    with closing(sqlite3.connect(uri, uri=True)) as con:
        report.ledger_schema_version = ledger.schema_version(con)
        report.runs = ledger.read_runs(con)
