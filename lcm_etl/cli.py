"""The `lcm-etl` command line: a thin click layer over the library.

Each command parses its options (the shared ones are declared once, in lcm_etl/options.py), calls its module in
lcm_etl/commands/ and prints the report it returns through report.emit. A command's errors leave through
`handled` (one line on stderr and the exit code, both from errors.error_line); click's usage errors through
`main()` (one line, exit 2).
"""
from __future__ import annotations

import dataclasses
import functools
import sys

import click

from lcm_etl import __version__
from lcm_etl.cli_conventions import (command_line_wins, epilog, json_error, log_to_stderr,
                                     settings_from_environment)
from lcm_etl.errors import BadInput, error_line
from lcm_etl.interrupts import interruption, raised_as_interrupted, swallowed
from lcm_etl.options import (TEXT_PATH, inspected_option, key_by_option, lock_timeout_option, memory_limit_option,
                             output_options, profile_option, run_options, session_filter_option, source_option,
                             target_options, transcripts_options, watch_options, write_options)
from lcm_etl.steps.pipeline import COMMANDS
from lcm_etl.report import Targeted, emit, one_line
from lcm_etl.read.openclaw.openclaw_home import default_lcm_db, profile_state, sources
from lcm_etl.read.snapshot.sqlite_copy import expand
from lcm_etl.sqlite_runtime import disable_memstatus, library, wal_reset_warning


def _watching(watch, interval, dry_run, manifest=None) -> bool:
    """--watch's usage rules, checked before anything runs: it needs a target to keep in step."""
    if not watch:
        if interval is not None:
            raise BadInput("--interval applies only with --watch")
        return False
    for flag, given in (("--dry-run", dry_run), ("--manifest", manifest)):
        if given:
            raise BadInput(f"--watch cannot be combined with {flag}: a watch keeps one target in step")
    return True


def _watch(run_once, inputs, interval, as_json, quiet) -> int:
    from lcm_etl.commands.watch import DEFAULT_INTERVAL, WatchOptions, watch

    return watch(run_once, inputs, WatchOptions(interval=interval or DEFAULT_INTERVAL, as_json=as_json, quiet=quiet))


def handled(f):
    """Map domain errors to exit codes; anything unexpected becomes one line (traceback under --debug). A
    SIGINT or SIGTERM is one line and 128 + its number, whatever error it surfaced as (lcm_etl/interrupts.py)."""
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        command_line_wins(kwargs)
        verbose = kwargs.pop("verbose", 0)
        debug = kwargs["debug"] = kwargs.get("debug", False) or verbose > 0   # -v shows what --debug does, and more
        if verbose:
            log_to_stderr(verbose)
        try:
            with raised_as_interrupted():
                code = f(*args, **kwargs)
                swallowed()
        except BaseException as exc:
            if not isinstance(exc, Exception) and interruption(exc) is None:   # SystemExit and the like
                raise
            line, code = error_line(exc, debug)
            click.echo(line, err=True)
            if kwargs.get("as_json"):
                json_error(line, code)
        # exits outside the except clause: the error's traceback, and with it the run's frames, are let go
        # first, so connections still open in them are closed (a WAL target's -wal and -shm go with them)
        sys.exit(code or 0)
    return wrapper


def targeted(report, target, wrote: bool = False) -> Targeted:
    """The report, saying why its target is that file (report.Targeted); for a command that wrote the target,
    with the warning of a SQLite that can corrupt a WAL target Remnic holds open (sqlite_runtime)."""
    warning = wal_reset_warning(target.path) if wrote else None
    if warning is not None and hasattr(report, "warnings"):
        report.warnings.append(warning)
    elif warning is not None:   # undo's report has no warnings: said on stderr, once
        click.echo(f"lcm-etl: warning: {warning}", err=True)
    return Targeted(report, str(target.path), target.rule, target.default)


def _watched_target(target, as_json: bool, quiet: bool) -> None:
    """A watch prints one line per sync, not a report: which file Remnic's rules chose is said once, first."""
    if target.default and not as_json and not quiet:
        click.echo(f"lcm-etl: target: {target.path} ({target.rule})", err=True)


def progress_wanted(as_json: bool, quiet: bool) -> bool:
    return not as_json and not quiet and sys.stderr.isatty()


def resolve_src(src: str | None, profile: str | None = None):
    """--src, else the --profile's lcm.db, else the default installation's."""
    if src and profile:
        raise BadInput("--src names the database and --profile the state folder whose lcm.db is read: give one of them")
    if profile:
        return profile_state(profile) / "lcm.db"
    return expand(src) if src else default_lcm_db()


STRICT = ("a finding (a transcript, archive, cold file, pending input or store that cannot be read) or an unparsable "
          "transcript line is an error (exit 2, nothing written), not a warning")


def _version(ctx, param, value) -> None:
    """--version: lcm-etl's and the SQLite every connection uses (lcm_etl/sqlite_runtime.py)."""
    if value and not ctx.resilient_parsing:
        click.echo(f"lcm-etl, version {__version__}\n{library()}")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=epilog(), invoke_without_command=True)
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version and the SQLite in use, and exit.")
@click.pass_context
def cli(ctx):
    """Migrate OpenClaw conversation memory (lossless-claw lcm.db, session stores and JSONL transcripts) into
    Remnic's LCM store."""
    if ctx.invoked_subcommand is None:   # click's own error here is the whole help text after "error:"
        raise click.UsageError(f"no command given: one of {', '.join(sorted(ctx.command.commands))}", ctx)


@cli.command(epilog=epilog("migrate"))
@source_option
@target_options("to write (created when absent, with its folders)")
@run_options
@write_options
@click.option("--full", is_flag=True, help="re-plan everything even when source and target are unchanged since the last run")
@click.option("--manifest", metavar="FILE", type=TEXT_PATH, help="migrate every `SRC DEST` pair listed in FILE, in parallel")
@click.option("--jobs", type=click.IntRange(min=1), default=None, metavar="N", help="parallel pairs with --manifest or --discover (default: cores)")
@click.option("--discover", metavar="ROOT",
              help="the pairs: every OpenClaw state folder under ROOT (holding lcm.db, or named .openclaw, "
                   ".openclaw-<profile> or .clawdbot)")
@click.option("--dest-root", metavar="DIR",
              help="with --discover: ROOT/<rel>/lcm.db goes to DIR/<rel>/state/lcm.sqlite")
@click.option("--scheduler", metavar="ADDRESS",
              help="run the pairs on this Dask cluster (tcp://host:8786; needs lcm-etl[dask])")
@click.option("--retries", type=click.IntRange(min=0), default=None, metavar="N",
              help="with --scheduler: re-runs of a pair that failed for a runtime reason, exit 1 (default 2)")
@watch_options
@profile_option
@handled
def migrate(src, dest, memory_dir, dry_run, session_filter, key_by, as_json, quiet, debug, lock_timeout, batch_rows,
            memory_limit, full, manifest, jobs, discover, dest_root, scheduler, retries, watch, interval, profile):
    """Copy a lossless-claw lcm.db into a Remnic LCM database (idempotent)."""
    from lcm_etl.commands.migrate import MigrateOptions, migrate as run
    from lcm_etl.store.target import resolve_target

    watching = _watching(watch, interval, dry_run, manifest or discover)
    template = functools.partial(MigrateOptions, dry_run=dry_run, session_filter=list(session_filter), key_by=key_by,
                                 lock_timeout=lock_timeout, batch_rows=batch_rows, memory_limit=memory_limit, full=full)
    if manifest or discover or dest_root or scheduler or retries is not None or jobs:
        if profile:
            raise BadInput("--manifest or --discover lists the pairs: do not also pass --profile")
        return _fleet(manifest, discover, dest_root, scheduler, retries, src, dest, memory_dir, jobs, as_json, quiet,
                      template)
    target = resolve_target(dest, memory_dir)
    opts = template(src=resolve_src(src, profile), target=target.path,
                    progress=progress_wanted(as_json, quiet) and not watching)
    if watching:
        from lcm_etl.commands.watch import path_signature

        _watched_target(target, as_json, quiet)
        return _watch(lambda: run(opts), functools.partial(path_signature, opts.src), interval, as_json, quiet)
    emit(targeted(run(opts), target, wrote=not dry_run), as_json, quiet)
    return 0


def _fleet(manifest, discover, dest_root, scheduler, retries, src, dest, memory_dir, jobs, as_json, quiet,
           template) -> int:
    from lcm_etl.commands.fleet import fleet, fleet_pairs, run_fleet

    pairs, root = fleet_pairs(manifest, discover, dest_root, scheduler, retries, jobs, bool(src or dest or memory_dir))
    dask_opts = {"address": scheduler} | ({} if retries is None else {"retries": retries})
    run = functools.partial(_dask_runner(), **dask_opts) if scheduler else functools.partial(run_fleet, jobs=jobs)
    return fleet(pairs, root, run, template, as_json, quiet, progress_wanted(as_json, quiet))


def _dask_runner():
    """fleet_dask.run_fleet_dask, or a one-line error when the optional extra is not installed."""
    try:
        from lcm_etl.commands.fleet_dask import run_fleet_dask
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in ("dask", "distributed"):
            raise BadInput("--scheduler needs the Dask extra, which is not installed: "
                           "pip install 'lcm-etl[dask]'") from None
        raise
    return run_fleet_dask


@cli.command(epilog=epilog("reconcile"))
@transcripts_options
@click.option("--src", "src", metavar="PATH", type=TEXT_PATH, help="lossless-claw database whose rows count as already held (default: the lcm.db of the state folder read, when it exists, as audit reads it)")
@target_options("to write (created when absent, with its folders)")
@run_options
@write_options
@click.option("--strict", is_flag=True, help=STRICT)
@click.option("--full", is_flag=True, help="read every transcript whole, trusting no record of an earlier run (a re-run "
                                           "already reads whole what the target no longer holds)")
@watch_options
@profile_option
@handled
def reconcile(sessions, exclude_deleted, src, dest, memory_dir, dry_run, session_filter, key_by, as_json, quiet, debug,
              lock_timeout, batch_rows, memory_limit, strict, full, watch, interval, profile):
    """Bring in what OpenClaw's transcripts hold and neither lcm.db nor the target has (crash recovery)."""
    from lcm_etl.commands.reconcile import reconcile as run
    from lcm_etl.run_options import ReconcileOptions
    from lcm_etl.store.target import resolve_target

    watching = _watching(watch, interval, dry_run)
    target = resolve_target(dest, memory_dir)
    read = sources(src, list(sessions), profile)   # what audit reads too
    opts = ReconcileOptions(sessions=read.sessions, target=target.path,
                            src=read.lcm_db, dry_run=dry_run, session_filter=list(session_filter),
                            key_by=key_by, strict=strict, exclude_deleted=exclude_deleted,
                            lock_timeout=lock_timeout, batch_rows=batch_rows,
                            progress=progress_wanted(as_json, quiet) and not watching, memory_limit=memory_limit,
                            full=full)
    if watching:
        from lcm_etl.commands.watch import reconcile_inputs

        _watched_target(target, as_json, quiet)
        first, later = [opts], dataclasses.replace(opts, every_session=False)

        def once():   # until one completes, a sync checks every session's target rows; later ones what they read new
            report = run(first[0] if first else later)
            first.clear()
            return report
        return _watch(once, reconcile_inputs(opts.sessions, opts.src), interval, as_json, quiet)
    emit(targeted(run(opts), target, wrote=not dry_run), as_json, quiet)
    return 0


@cli.command(epilog=epilog("audit"))
@source_option
@transcripts_options
@target_options("to check (read only; never created)")
@session_filter_option
@key_by_option
@output_options
@memory_limit_option
@click.option("--junit", metavar="FILE", type=TEXT_PATH,
              help="also write the audit as JUnit XML to FILE: one test case per session, failing when it is behind")
@click.option("--strict", is_flag=True, help=STRICT)
@profile_option
@handled
def audit(sessions, exclude_deleted, src, dest, memory_dir, session_filter, key_by, as_json, quiet, debug, memory_limit,
          junit, strict, profile):
    """Read-only: is everything in the sources in the target? Exit 0 clean, 3 pending or different."""
    from lcm_etl.commands.audit import AuditOptions, audit as run
    from lcm_etl.commands.audit_junit import check_junit_path, junit_xml, write_junit
    from lcm_etl.errors import EXIT_PENDING
    from lcm_etl.store.target import resolve_target

    if junit:
        check_junit_path(expand(junit))
    # the sources reconcile reads (openclaw_home.sources): the transcripts, and the lcm.db beside them when it exists
    # (audit.py says when it does not). With no transcripts to read, the lcm.db is what is audited: it must exist
    read = sources(src, list(sessions), profile)
    required = read.src or (None if read.sessions or read.installation else default_lcm_db())
    target = resolve_target(dest, memory_dir)
    audited = run(AuditOptions(target=target.path, src=required, sessions=read.sessions,
                               session_filter=list(session_filter), key_by=key_by,
                               memory_limit=memory_limit, default_src=read.beside,
                               default_transcripts=read.installation, exclude_deleted=exclude_deleted, strict=strict,
                               progress=progress_wanted(as_json, quiet)))
    if junit:
        write_junit(expand(junit), junit_xml(audited.report, audited.findings, audited.sessions))
    emit(targeted(audited, target), as_json, quiet)
    return EXIT_PENDING if audited.findings else 0


@cli.command(epilog=epilog("inspect"))
@inspected_option
@key_by_option
@output_options
@memory_limit_option
@handled
def inspect(src, key_by, as_json, quiet, debug, memory_limit):
    """Describe a source: schema generation, sessions with counts and token sums, DAG shape; or a session store:
    its windows, their active paths, zstd rows, the materialized path's state and the archives."""
    from lcm_etl.commands.inspect import describe
    from lcm_etl.progress import Progress

    with Progress(progress_wanted(as_json, quiet)) as bars:
        bars.phase("inspecting")   # one step: its clock moves while a large store is read (20 s at 100k events)
        described = describe(resolve_src(src), key_by, memory_limit)
    emit(described, as_json, quiet)
    return 0


@cli.command(epilog=epilog("steps"))
@click.argument("command", required=False, metavar="[COMMAND]", type=click.Choice(COMMANDS))
@click.option("--sql", is_flag=True, help="print each step's SQL under its name")
@click.option("--markdown", is_flag=True, help="print transforms/README.md (generated from the same declaration)")
@click.option("--debug", is_flag=True, help="show a traceback on errors")
@handled
def steps(command, sql, markdown, debug):
    """The SQL steps COMMAND runs (every command's without one), in order, stage by stage: engine, connection,
    file (lcm_etl/steps/pipeline.py)."""
    from lcm_etl.docgen import steps_text, transforms_readme

    if markdown and (sql or command):
        raise BadInput("--markdown prints every command's steps as transforms/README.md: give it alone")
    click.echo(transforms_readme() if markdown else steps_text(command, sql), nl=False)
    return 0


@cli.command(epilog=epilog("runs"))
@target_options("to list the runs of (read only; never created)")
@click.option("--csv", "as_csv", is_flag=True, help="print the runs as CSV, one row each, ids and times whole")
@output_options
@handled
def runs(dest, memory_dir, as_csv, as_json, quiet, debug):
    """Read-only: list the target's ledger (run id, command, times, status, source, options, counts)."""
    from lcm_etl.commands.runs import list_runs
    from lcm_etl.store.target import resolve_target

    if as_csv and (as_json or quiet):
        raise BadInput("--csv prints the runs as CSV: do not also pass --json or --quiet")
    target = resolve_target(dest, memory_dir)
    listed = list_runs(target.path)
    if as_csv:
        click.echo(listed.as_csv())
    else:
        emit(targeted(listed, target), as_json, quiet)
    return 0


@cli.command(epilog=epilog("undo"))
@click.argument("run_id", metavar="RUN_ID")
@target_options("to undo the run in")
@click.option("--dry-run", is_flag=True, help="change nothing; report what the undo would remove and restore")
@click.option("--force", is_flag=True, help="undo even when Remnic wrote rows after the run that depend on it "
                                            "(they are left, and the report says why that is safe)")
@lock_timeout_option
@output_options
@handled
def undo(run_id, dest, memory_dir, dry_run, force, lock_timeout, as_json, quiet, debug):
    """Remove exactly what run RUN_ID (or a unique prefix of it) wrote, and restore what it changed."""
    from lcm_etl.report import now_iso
    from lcm_etl.store.target import resolve_target
    from lcm_etl.commands.undo import UndoOptions, undo as run

    target = resolve_target(dest, memory_dir)
    emit(targeted(run(UndoOptions(target=target.path, run_id=run_id, force=force, dry_run=dry_run,
                                  lock_timeout=lock_timeout), now_iso), target, wrote=not dry_run), as_json, quiet)
    return 0


@cli.command(epilog=epilog("cache"))
@click.option("--prune", is_flag=True, help="remove the snapshots interrupted runs left, and the least recently used "
                                            "ones over LCM_ETL_CACHE_SIZE")
@click.option("--clear", is_flag=True, help="remove every kept snapshot (the next run of each pair copies its source whole)")
@output_options
@handled
def cache(prune, clear, as_json, quiet, debug):
    """The kept snapshots a sync re-run compares its source with: each pair's, its size, when last used."""
    from lcm_etl.commands.cache import cache as run

    emit(run(prune, clear), as_json, quiet)
    return 0


settings_from_environment(cli)


def main() -> None:
    """Usage errors are one line too (click's default is a usage block), exit 2; under --json a JSON object
    on stdout as well."""
    disable_memstatus()   # before any connection exists: see lcm_etl/sqlite_runtime.py
    try:
        cli.main(prog_name="lcm-etl", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("lcm-etl: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        hint = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f" (see `{exc.ctx.command_path} --help`)"
        line = f"lcm-etl: error: {one_line(exc.format_message())}{hint}"
        click.echo(line, err=True)
        if "--json" in sys.argv[1:]:
            json_error(line, exc.exit_code)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
