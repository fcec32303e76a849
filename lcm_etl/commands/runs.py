"""`runs`: the target's ledger, read-only: every run with its command, times, status, source, options, counts.

A run that did not complete (`running`, `failed`, `killed`) is shown with what its committed batches hold in
the target (`committed`, read from its provenance: what `undo` of it removes), since the counts of its ledger
row are only what it could still write before it stopped, and a killed run wrote none. A row still `running`
whose run no longer holds the target's run lock is a killed run's (the next run records it so)."""
from __future__ import annotations

import csv
import io
from lcm_etl.sqlite_runtime import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from lcm_etl import sqlite_runtime
from lcm_etl.sync import identity as source_identity
from lcm_etl.store import provenance
from lcm_etl.store import ledger, runlock, target as tgt
from lcm_etl.report import SCHEMA_VERSION, one_line_each
from lcm_etl.read.snapshot.sqlite_copy import take_snapshot


@dataclass
class RunsReport:
    target: str
    ledger_schema_version: int = 0   # of the lcm_etl_* tables (lcm_etl/store/ledger.py); 0: no ledger yet
    runs: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "target": self.target,
                "ledger_schema_version": self.ledger_schema_version, "runs": self.runs}

    def as_text(self) -> str:
        """One row per run, within 100 columns: the run id's first 12 digits (undo takes a unique prefix; --json
        and --csv have it whole) and the start to the second."""
        if not self.runs:
            return f"lcm-etl runs: {self.target}: no run recorded"
        lines = [f"lcm-etl runs: {self.target}",
                 f"  {'run id':<12}  {'command':<9}  {'status':<8}  {'started (UTC)':<19}  what"]
        for r in self.runs:
            started = r["started_at"][:19].replace("T", " ")
            lines.append(f"  {r['run_id'][:12]:<12}  {r['command']:<9}  {r['status']:<8}  {started:<19}  {_what(r)}")
        return one_line_each(lines)

    def as_csv(self) -> str:
        """--csv: one row per run, the ids and times whole, for a spreadsheet or `csvlook`."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for r in self.runs:
            writer.writerow([r["run_id"], r["command"], r["status"], r["started_at"], r["finished_at"] or "",
                             r["source_path"] or "", _what(r)])
        return out.getvalue().rstrip("\n")


CSV_COLUMNS = ("run_id", "command", "status", "started_at", "finished_at", "source_path", "what")


UNFINISHED = ("running", "failed", "killed")


def _what(run: dict) -> str:
    counts = run["counts"] if isinstance(run["counts"], dict) else {}
    # a source's key is its path and the database there (lcm_etl/sync/identity.py): people are shown the path
    source = f" from {run['source_path']}" if run["source_path"] else ""
    if run["committed"] is not None:
        shown = [f"{k} {n}" for k, n in run["committed"].items() if n]
        return ("committed " + ", ".join(shown) if shown else "nothing committed") + source
    if run["command"] == "undo":
        removed = counts.get("removed", {})
        return f"undid {counts.get('undid')}: removed " + ", ".join(f"{k} {n}" for k, n in removed.items() if n)
    written = counts.get("written", {})
    shown = [f"{k.removesuffix('_inserted')} {n}" for k, n in written.items() if n and k != "part_times_fixed"]
    if run["shortcut_of"]:
        again = f" ({run['times']} runs in a row: started is the first's, finished the last's)" if run["times"] > 1 else ""
        return f"nothing changed{source}{again}"
    return (", ".join(shown) or "nothing written") + source + (f" (undone by {run['undone_by']})" if run["undone_by"] else "")


def list_runs(target: Path) -> RunsReport:
    from lcm_etl.errors import BadInput

    if not tgt.check_target(target, open_it=False):
        raise BadInput(f"no target at {target}: no runs")
    report = RunsReport(target=str(target))
    alive = runlock.held(target)   # before the ledger is read: a run that ends meanwhile is not called killed
    wal = Path(f"{target}-wal")
    if wal.exists() and wal.stat().st_size:   # rows may live in the WAL: read a private copy of it all
        copy = take_snapshot(target, "target")
        try:
            tgt.check_remnic(copy.path, target)
            _read(sqlite_runtime.connect(copy.path), report, alive)
        finally:
            copy.close()
    else:   # immutable: opening a database, even read-only, may create files beside it
        tgt.check_remnic(target, target)
        _read(sqlite_runtime.connect(target, "mode=ro&immutable=1"), report, alive)
    return report


def _read(opened: sqlite3.Connection, report: RunsReport, alive: bool) -> None:
    with closing(opened) as con:
        report.ledger_schema_version = ledger.schema_version(con)
        report.runs = ledger.read_runs(con)
        for run in report.runs:
            if run["status"] == "running" and not alive:
                run["status"] = "killed"
            unfinished = run["status"] in UNFINISHED and run["provenance"] and run["command"] != "undo"
            run["committed"] = provenance.committed(con, run["run_id"]) if unfinished else None
            # the key is the path and the database there (lcm_etl/sync/identity.py): people are given the path
            run["source_key"] = run["source_path"]
            run["source_path"] = source_identity.path_of(run["source_path"]) if run["source_path"] else None
