"""`migrate --manifest FILE --scheduler ADDRESS`: the fleet's pairs as one task each on an existing Dask
(`distributed`) cluster, for fleets bigger than one machine. Optional: `pip install 'lcm-etl[dask]'`
(the CLI says so in one line when it is missing).

A task is `fleet.run_pair` on a worker, so a pair runs exactly as in the local pool, and its PairResult
comes back to make the same table and JSON. Dask retries a task that raises: a pair that failed for a
runtime reason (exit 1: a locked target, a full disk, a run killed with its worker) raises
`RetryablePair`, carrying its result, so Dask runs it again up to `retries` times; bad input (exit 2)
comes back as a plain result, since running it again cannot help. A worker that dies mid-pair has its
pairs rescheduled by Dask itself (migrate leaves a killed run's target as it was, so the re-run is safe).

Every path in the manifest must mean the same file on every worker (shared storage mounted alike):
the client expands `~` and `$HOME`, the workers only open what they are given.
"""
from __future__ import annotations

import uuid
from pathlib import Path

from distributed import Client, as_completed
from distributed.comm import parse_address
from distributed.comm.registry import get_backend
from distributed.diagnostics.plugin import WorkerPlugin

from lcm_etl.errors import EXIT_FAILURE, BadInput, RunFailed
from lcm_etl.commands.fleet import PairOptions, PairResult, pair_options, run_pair
from lcm_etl.commands.migrate import MigrateOptions
from lcm_etl.sqlite_runtime import disable_memstatus

CONNECT_TIMEOUT_S = 10


class RetryablePair(Exception):
    """A pair's runtime failure, raised inside its task so Dask's retries apply; carries the PairResult."""

    def __init__(self, result: PairResult):
        super().__init__(result)   # in args: what pickling between worker and client keeps

    @property
    def result(self) -> PairResult:
        return self.args[0]

    def __str__(self) -> str:
        return self.result.error or "failed"


class DisableMemstatus(WorkerPlugin):
    """Each worker process turns SQLite's allocation counter off once, when it starts or when this plugin
    is first registered, before it runs any pair (as the local pool's initializer does). Registered
    idempotently: a second run never reconfigures SQLite under a worker already running pairs."""

    name = "lcm-etl-disable-memstatus"
    idempotent = True

    def setup(self, worker) -> None:
        disable_memstatus()


def pair_task(index: int, opts: MigrateOptions) -> PairResult:
    result = run_pair(index, opts)
    if result.exit_code == EXIT_FAILURE:
        raise RetryablePair(result)
    return result


def connect(address: str) -> Client:
    """A client of the scheduler at ADDRESS: exit 2 for an address that cannot be one, exit 1 for a
    scheduler that does not answer (a runtime condition: the cluster may be starting)."""
    try:   # an unknown scheme would hang, then fail an assert; no port, fail after a noisy 20 s
        scheme, location = parse_address(address)
        get_backend(scheme).get_address_host_port(location)
    except NotImplementedError:   # a scheme without host and port (inproc://)
        pass
    except ValueError as exc:
        raise BadInput(f"--scheduler is not a Dask scheduler address: {address!r} ({exc}; "
                       "e.g. tcp://host:8786)") from None
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise RunFailed(f"cannot reach the Dask scheduler at {address}: {exc} (is `dask scheduler` running "
                        "there, and reachable from here?); nothing was written") from None


def run_fleet_dask(pairs: list[tuple[Path, Path]], template: PairOptions, on_done, address: str,
                   retries: int = 2) -> list[PairResult]:
    client = connect(address)
    try:
        client.register_plugin(DisableMemstatus())
        # keys of our own: Dask's default for a pure call would let a second operator's run of the same
        # manifest share this run's results instead of running (and reporting) its own
        run = uuid.uuid4().hex[:8]
        # a worker's working folder is not ours: relative paths are made absolute here
        pairs = [(src.absolute(), dest.absolute()) for src, dest in pairs]
        futures = {client.submit(pair_task, i, opts, key=f"lcm-etl-pair-{i}-{run}", retries=retries): (i, opts)
                   for i, opts in pair_options(pairs, template)}
        results: list[PairResult] = []
        for fut in as_completed(futures, loop=client.loop):
            results.append(outcome(fut, *futures[fut]))
            fut.release()
            on_done(results[-1], len(results), len(pairs))
    finally:
        client.close()
    return sorted(results, key=lambda r: r.index)


def outcome(fut, index: int, opts: MigrateOptions) -> PairResult:
    """A finished task's PairResult, whatever way it ended."""
    if fut.status == "finished":
        return fut.result()
    exc = fut.exception() if fut.status == "error" else None
    if isinstance(exc, RetryablePair):   # still failing after its retries
        return exc.result
    # KilledWorker (the pair took down its worker too many times), a lost scheduler, a cancelled task
    why = f"{type(exc).__name__}: {exc}" if exc is not None else f"task {fut.status}"
    return PairResult(index, str(opts.src), str(opts.target), False, EXIT_FAILURE,
                      error=f"the Dask cluster could not run this pair ({why}); re-run the manifest to finish it")
