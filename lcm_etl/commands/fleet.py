"""`migrate --manifest FILE`: many `src → dest` pairs (a fleet of agents), one process per pair.

Pairs run in parallel worker processes (one per core by default), or as one task each on a Dask
cluster (`--scheduler`, lcm_etl/commands/fleet_dask.py), both through `run_pair`. Each pair is an ordinary
migrate run with its own snapshot, plan and target, so a failing pair cannot disturb the others; it is
reported and makes the exit code non-zero.

Manifest: JSON (a list of {"src": ..., "dest": ...} or {"src": ..., "memory_dir": ...}) or text, one
pair per line `SRC DEST` (whitespace-separated; `#` starts a comment; paths may use ~ and $HOME).
"""
from __future__ import annotations

import functools
import multiprocessing
import os
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import orjson
from tqdm import tqdm

from lcm_etl.errors import EXIT_FAILURE, BadInput, LcmEtlError
from lcm_etl.interrupts import in_a_worker, interruption, pair_in_worker, worker_stopped
from lcm_etl.commands.migrate import MigrateOptions, migrate
from lcm_etl.read.openclaw.discover import Discovered, discover as find
from lcm_etl.read.snapshot.sqlite_copy import expand
from lcm_etl.report import SCHEMA_VERSION, emit, one_line, one_line_each
from lcm_etl.sqlite_runtime import disable_memstatus
from lcm_etl.store.target import resolve_target


@dataclass
class PairResult:
    index: int
    src: str
    dest: str
    ok: bool
    exit_code: int
    error: str | None = None
    report: dict | None = None
    transcripts: dict | None = None   # the reconcile of the installation's agents' transcripts, when it has any


def installation_transcripts(src: Path) -> Path | None:
    """The state folder holding the pair's lcm.db (or the pair's source, a state folder without one), when its
    agents keep transcripts (a session store, registered ones included, or JSONL): a pair is the whole
    installation, lcm.db first, then what its transcripts hold beyond it (docs/fleet.md)."""
    from lcm_etl.read.openclaw.openclaw_home import is_state_dir
    from lcm_etl.read.openclaw.openclaw_state import find_inputs

    folder = src if src.is_dir() else src.parent
    if not is_state_dir(folder):
        return None
    found = find_inputs([folder])
    return folder if found.stores or found.files else None


def read_manifest(path: Path) -> list[tuple[Path, Path]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"manifest cannot be read: {path}: {exc.strerror or exc}") from None
    pairs: list[tuple[Path, Path]] = []
    if text.lstrip().startswith("["):
        try:
            items = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"manifest is not valid JSON: {path}: {exc}") from None
        for n, item in enumerate(items, 1):
            # each pair names its target: an empty one is not Remnic's default (one target for every pair)
            if not isinstance(item, dict) or "src" not in item or not (item.get("dest") or item.get("memory_dir")):
                raise BadInput(f"manifest entry {n} needs \"src\" and \"dest\" (or \"memory_dir\"): {path}")
            pairs.append((expand(item["src"]), resolve_target(item.get("dest"), item.get("memory_dir")).path))
    else:
        for n, line in enumerate(text.split("\n"), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = shlex.split(line)
            if len(fields) != 2:
                raise BadInput(f"manifest line {n} must be `SRC DEST`: {path}")
            pairs.append((expand(fields[0]), expand(fields[1])))
    if not pairs:
        raise BadInput(f"manifest lists no pairs: {path}")
    dests = [d for _, d in pairs]
    dup = {d for d in dests if dests.count(d) > 1}
    if dup:
        raise BadInput(f"manifest writes one target from several pairs in parallel: {sorted(map(str, dup))[0]}; "
                       "give each pair its own dest")
    return pairs


PairOptions = functools.partial[MigrateOptions]   # the run's options but a pair's source and target (a partial)


def fleet_pairs(manifest: str | None, discover: str | None, dest_root: str | None, scheduler: str | None,
                retries: int | None, jobs: int | None, one_pair_given: bool) -> tuple[list[tuple[Path, Path]], Path | None]:
    """The pairs --manifest FILE or --discover ROOT names, once the fleet's options are checked together, and the ROOT
    discovered (None for a manifest)."""
    if not (manifest or discover):   # an option of many pairs given alone: the pairs are what is missing
        flag = "--dest-root" if dest_root else "--jobs" if jobs else "--scheduler" if scheduler else "--retries"
        raise BadInput(f"{flag} applies only with --manifest FILE or --discover ROOT, which name the pairs to migrate")
    if one_pair_given:
        raise BadInput("--manifest or --discover lists the pairs: do not also pass --src, --dest or --memory-dir")
    if bool(manifest) == bool(discover):
        raise BadInput("--manifest FILE or --discover ROOT names the pairs: give one of them")
    if bool(discover) != bool(dest_root):
        raise BadInput("--discover ROOT and --dest-root DIR go together (DIR/<rel>/state/lcm.sqlite per state folder)")
    if scheduler and jobs:
        raise BadInput("--jobs sizes the local pool; on a Dask cluster the workers' threads do")
    if retries is not None and not scheduler:
        raise BadInput("--retries is for --scheduler (Dask re-runs the task); the local pool does not retry")
    if discover and dest_root:
        root = expand(discover).absolute()
        return find(root, expand(dest_root).absolute()), root
    return read_manifest(expand(str(manifest))), None


def pair_options(pairs: list[tuple[Path, Path]], template: PairOptions) -> list[tuple[int, MigrateOptions]]:
    """Each pair's own options: the run's, with its source and target (and no bar of its own)."""
    return [(i, template(src=s, target=d, progress=False)) for i, (s, d) in enumerate(pairs)]


def run_pair(index: int, opts: MigrateOptions) -> PairResult:
    """migrate the pair's lcm.db, then reconcile its installation's transcripts into the same target (their rows
    already in lcm.db count as held)."""
    from lcm_etl.commands.reconcile import reconcile
    from lcm_etl.run_options import ReconcileOptions

    result = PairResult(index, str(opts.src), str(opts.target), False, 0)
    try:
        # a state folder as the source (--discover's profile folders without an lcm.db): its transcripts alone
        lcm_db = not opts.src.is_dir()
        if lcm_db:
            result.report = migrate(opts).as_dict()
        state = installation_transcripts(opts.src)
        if state is None and not lcm_db:
            raise BadInput(f"{opts.src} holds neither an lcm.db nor any agent's transcripts")
        if state is not None:
            result.transcripts = reconcile(ReconcileOptions(
                sessions=[str(state)], target=opts.target, src=opts.src if lcm_db else None, dry_run=opts.dry_run,
                session_filter=opts.session_filter, key_by=opts.key_by, lock_timeout=opts.lock_timeout,
                batch_rows=opts.batch_rows, memory_limit=opts.memory_limit)).as_dict()
        result.ok = True
    except LcmEtlError as exc:
        result.exit_code, result.error = exc.exit_code, str(exc)
    except Exception as exc:  # a bug in one pair must not take the fleet down
        result.exit_code, result.error = EXIT_FAILURE, f"internal error: {type(exc).__name__}: {exc}"
    return result


def run_fleet(pairs: list[tuple[Path, Path]], template: PairOptions, on_done,
              jobs: int | None = None) -> list[PairResult]:
    jobs = max(1, jobs or os.cpu_count() or 1)
    results: list[PairResult] = []
    with ProcessPoolExecutor(max_workers=min(jobs, len(pairs)), initializer=_worker) as pool:
        futures = [pool.submit(_pool_pair, i, opts) for i, opts in pair_options(pairs, template)]
        try:
            for fut in as_completed(futures):
                result = fut.result()
                results.append(result)
                on_done(result, len(results), len(pairs))
        except BaseException as exc:
            # stopped (a signal, or a bug): a signal stops the pairs running, as it stops a single run, and no
            # pair starts any more; shut down here (waiting for those pairs), since the pool's own exit would
            # wait for every pair left
            stop = interruption(exc)
            if stop is not None:
                for child in multiprocessing.active_children():
                    if child.pid:
                        os.kill(child.pid, stop.signum)
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return sorted(results, key=lambda r: r.index)


def _pool_pair(index: int, opts: MigrateOptions) -> PairResult:
    """run_pair in a local pool's worker; a worker a signal has stopped starts no further pair."""
    stop = worker_stopped()
    if stop is not None:
        return PairResult(index, str(opts.src), str(opts.target), False, stop.exit_code,
                          error="not started: the fleet was stopped by a signal")
    with pair_in_worker():
        return run_pair(index, opts)


def _worker() -> None:
    # a worker starts with no connection open, so it can turn SQLite's allocation counter off as the CLI does
    disable_memstatus()
    in_a_worker()


class FleetProgress:
    """Pairs done / total and failures so far: one line per pair (unless --json/--quiet) and, on a
    terminal, a bar under them that stays in place while thousands of lines scroll by."""

    def __init__(self, total: int, lines: bool, bar: bool):
        self.lines, self.failed = lines, 0
        self.bar = tqdm(total=total, desc="pairs", unit="pair", disable=not bar, file=sys.stderr)

    def __call__(self, result: PairResult, done: int, total: int) -> None:
        self.failed += not result.ok
        if self.lines:
            tqdm.write(one_line(progress_line(result, done, total)), file=sys.stderr)   # above the bar, if any
        self.bar.set_postfix(failed=self.failed, refresh=False)
        self.bar.update(1)

    def __enter__(self) -> "FleetProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def progress_line(r: PairResult, done: int, total: int) -> str:
    if r.ok and r.report is None:   # a state folder without lcm.db: its transcripts are the pair
        t = r.transcripts
        assert t is not None, "a pair that succeeded has a report or its transcripts'"
        verb = "would be inserted" if t["dry_run"] else "inserted"
        return (f"[{done}/{total}] ok      {r.src} -> {r.dest}: {t['messages']['inserted']} messages {verb} from "
                f"its transcripts ({t['extra']['transcripts_read']} read, {t['elapsed_s']:.2f} s)")
    if r.ok:
        rep = r.report
        assert rep is not None, "a pair that succeeded has its report"
        verb = "would be inserted" if rep["dry_run"] else "inserted"
        return (f"[{done}/{total}] ok      {r.src} -> {r.dest}: {rep['messages']['inserted']} messages, "
                f"{rep['summaries']['inserted']} summaries {verb} ({rep['elapsed_s']:.2f} s)" + _transcripts(r, verb))
    return f"[{done}/{total}] FAILED  {r.src} -> {r.dest}: {r.error}"


def _transcripts(r: PairResult, verb: str) -> str:
    """What the pair's transcripts added beyond its lcm.db (run_pair)."""
    t = r.transcripts
    return "" if t is None else (f"; its transcripts: {t['messages']['inserted']} more messages {verb} "
                                 f"({t['extra']['transcripts_read']} read)")


def summary_table(results: list[PairResult], elapsed: float, dry_run: bool = False) -> str:
    """The rows inserted per pair; a dry run's are what a real run would insert, and it migrated nothing."""
    lines = ["DRY RUN - nothing was written; a real run would insert:"] if dry_run else []
    lines += [f"{'#':>3}  {'status':<7} {'messages':>9} {'parts':>9} {'summaries':>9} {'seconds':>8}  source -> target"]
    for r in results:
        if r.ok and r.report is None:
            t = r.transcripts
            assert t is not None, "a pair that succeeded has a report or its transcripts'"
            lines.append(f"{r.index + 1:>3}  {'ok':<7} {t['messages']['inserted']:>9} {t['parts']['inserted']:>9} "
                         f"{0:>9} {t['elapsed_s']:>8.2f}  {r.src} -> {r.dest} (its transcripts: no lcm.db)")
        elif r.ok:
            rep = r.report
            assert rep is not None, "a pair that succeeded has its report"
            lines.append(f"{r.index + 1:>3}  {'ok':<7} {rep['messages']['inserted']:>9} {rep['parts']['inserted']:>9} "
                         f"{rep['summaries']['inserted']:>9} {rep['elapsed_s']:>8.2f}  {r.src} -> {r.dest}"
                         + (f" (+{r.transcripts['messages']['inserted']} messages from its transcripts)"
                            if r.transcripts else ""))
        else:
            lines.append(f"{r.index + 1:>3}  {'FAILED':<7} {'':>9} {'':>9} {'':>9} {'':>8}  {r.src} -> {r.dest}: {r.error}")
    failed = sum(not r.ok for r in results)
    done = "checked" if dry_run else "migrated"
    lines.append(f"{len(results) - failed} of {len(results)} pairs {done}, {failed} failed, {elapsed:.2f} s"
                 + (" (dry run: nothing written)" if dry_run else ""))
    return one_line_each(lines)


@dataclass
class FleetReport:
    """Every pair's result: one JSON object (docs/schemas/fleet.schema.json) or the summary table."""
    results: list[PairResult]
    elapsed_s: float
    dry_run: bool
    found: Discovered | None = None   # --discover --dry-run: the pairs found (the text shows them before the run)

    def as_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, **(self.found.as_dict() if self.found else {}),
                "pairs": [r.__dict__ for r in self.results], "failed": sum(not r.ok for r in self.results)}

    def as_text(self) -> str:
        return summary_table(self.results, self.elapsed_s, self.dry_run)


def fleet(pairs: list[tuple[Path, Path]], root: Path | None, run, template: PairOptions, as_json: bool, quiet: bool,
          bar: bool) -> int:
    """The pairs run (`run`: run_fleet, or fleet_dask's on a cluster), one line each as it ends, then the table or the
    JSON; the exit code is the worst pair's."""
    dry_run, found = template.keywords["dry_run"], None
    if root is not None and dry_run:   # the operator checks the discovered pairs before a real run: in text, first
        found = Discovered(root, pairs)
        if not as_json:
            emit(found, as_json, quiet)
    t0 = time.monotonic()
    with FleetProgress(len(pairs), lines=not as_json and not quiet, bar=bar) as progress:
        results = run(pairs, template, progress)
    emit(FleetReport(results, time.monotonic() - t0, dry_run, found), as_json, quiet)
    return max((r.exit_code for r in results), default=0)
