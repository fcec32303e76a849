"""migrate --manifest --scheduler: the fleet's pairs as Dask tasks on a real cluster (2 worker processes of
one thread each, started here; the CLI runs as a user would, in a subprocess, and connects to it)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing

import pytest

from conftest import LCM_ETL, ROOT, make_native_target, open_db, run_cli, table_counts
from test_fleet import assert_whole, fleet_of_fixtures, write_manifest

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            distributed.Client(lc) as client:
        yield lc.scheduler_address, client


def processed(client) -> Counter:
    """How many times the scheduler has sent each lcm-etl pair task to a worker (its transition log)."""
    log = client.run_on_scheduler(lambda dask_scheduler: [(str(t[0]), t[2]) for t in dask_scheduler.transition_log])
    return Counter(key for key, to in log if key.startswith("lcm-etl-pair-") and to == "processing")


def comparable(pair: dict) -> dict:
    """A pair's result without what differs between two runs into two trees (times, run ids, the target)."""
    report = pair["report"] and {k: v for k, v in pair["report"].items() if k not in ("elapsed_s", "run_id", "target")}
    return {**pair, "dest": None, "report": report}


def test_a_dask_cluster_runs_a_manifest_with_bad_pairs_exactly_as_the_local_pool_does(tmp_path, cluster):
    address, _ = cluster
    good = fleet_of_fixtures(tmp_path, 17)
    garbage = tmp_path / "src" / "garbage.db"
    garbage.write_text("not a database\n")
    plain = tmp_path / "src" / "plain.db"
    with sqlite3.connect(plain) as con:
        con.execute("CREATE TABLE notes (body TEXT)")
    sources = [s for s, _ in good[:5]] + [tmp_path / "src" / "missing.db"] + [s for s, _ in good[5:11]] + [garbage] \
        + [s for s, _ in good[11:]] + [plain]
    runs = {}
    for engine, extra in (("local", ["--jobs", "2"]), ("dask", ["--scheduler", address])):
        manifest = write_manifest(tmp_path / f"{engine}.txt",
                                  [(s, tmp_path / engine / f"{n:02d}" / "lcm.sqlite") for n, s in enumerate(sources)])
        proc = run_cli("migrate", "--manifest", manifest, "--json", *extra, timeout=600)
        assert proc.returncode == 2, proc.stderr   # bad input is the worst outcome: exit 2
        runs[engine] = json.loads(proc.stdout)
    assert len(runs["dask"]["pairs"]) == 20 and runs["dask"]["failed"] == 3
    assert [p["exit_code"] for p in runs["dask"]["pairs"] if not p["ok"]] == [2, 2, 2]
    assert [comparable(p) for p in runs["dask"]["pairs"]] == [comparable(p) for p in runs["local"]["pairs"]]
    for n in range(len(sources)):
        made = [(tmp_path / engine / f"{n:02d}" / "lcm.sqlite") for engine in ("local", "dask")]
        if runs["dask"]["pairs"][n]["ok"]:   # (the local pool's targets are checked whole in test_fleet)
            with closing(open_db(made[0])) as local, closing(open_db(made[1])) as dask:
                assert dask.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
                assert table_counts(local) == table_counts(dask)
        else:
            assert not made[0].parent.exists() and not made[1].parent.exists()


def test_a_pair_failing_for_a_runtime_reason_is_retried_and_bad_input_is_not(tmp_path, cluster):
    address, client = cluster
    src = fleet_of_fixtures(tmp_path, 1)[0][0]
    locked = tmp_path / "locked" / "lcm.sqlite"
    holder = make_native_target(locked)
    holder.execute("BEGIN EXCLUSIVE")   # another writer holds the target for the whole run
    manifest = write_manifest(tmp_path / "fleet.txt", [(src, locked), (tmp_path / "missing.db", tmp_path / "m.sqlite")])
    before = processed(client)
    proc = run_cli("migrate", "--manifest", manifest, "--scheduler", address, "--retries", "2",
                   "--lock-timeout", "0.2", "--json", timeout=600)
    holder.rollback()
    pairs = json.loads(proc.stdout)["pairs"]
    assert proc.returncode == 2
    assert pairs[0]["exit_code"] == 1 and pairs[0]["error"].startswith("target is locked by another writer")
    assert pairs[1]["exit_code"] == 2 and pairs[1]["error"].startswith("source not found")
    tries = {int(key.split("-")[3]): n for key, n in (processed(client) - before).items()}
    assert tries == {0: 3, 1: 1}


def test_two_operators_on_one_cluster_both_finish_and_leave_every_target_whole(tmp_path, cluster):
    address, _ = cluster
    pairs = fleet_of_fixtures(tmp_path, 4)
    manifest = write_manifest(tmp_path / "fleet.txt", pairs)
    runs = [subprocess.Popen([str(LCM_ETL), "migrate", "--manifest", str(manifest), "--scheduler", address, "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [run.communicate(timeout=600) for run in runs]
    # a pair that lost the race to the other operator's run failed with exit 1, and Dask re-ran it
    assert [run.returncode for run in runs] == [0, 0], [err for _, err in outs]
    for src, dest in pairs:
        assert_whole(src, dest)


def test_a_worker_killed_mid_run_has_its_pairs_re_run_and_every_target_is_whole(tmp_path, cluster):
    address, client = cluster
    pairs = fleet_of_fixtures(tmp_path, 6)
    manifest = write_manifest(tmp_path / "fleet.txt", pairs)
    before = processed(client)
    pids = client.run(os.getpid)
    run = subprocess.Popen([str(LCM_ETL), "migrate", "--manifest", str(manifest), "--scheduler", address, "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    victim = None
    while victim is None:   # the first worker the scheduler has given a pair to
        assert time.monotonic() < deadline and run.poll() is None, "no pair ever reached a worker"
        busy = [w for w, keys in client.processing().items() if any(str(k).startswith("lcm-etl-pair-") for k in keys)]
        victim = busy[0] if busy else None
    os.kill(pids[victim], signal.SIGKILL)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, err
    report = json.loads(out)
    assert report["failed"] == 0 and len(report["pairs"]) == 6
    assert max((processed(client) - before).values()) >= 2   # the killed worker's pair ran again elsewhere
    for src, dest in pairs:
        assert_whole(src, dest)


def test_scheduler_errors_are_one_line(tmp_path, cluster):
    manifest = write_manifest(tmp_path / "fleet.txt", fleet_of_fixtures(tmp_path, 1))
    bad = run_cli("migrate", "--manifest", manifest, "--scheduler", "nonsense")
    assert (bad.returncode, bad.stderr) == (2, "lcm-etl: error: --scheduler is not a Dask scheduler address: "
                                               "'nonsense' (missing port number in address 'nonsense'; "
                                               "e.g. tcp://host:8786)\n")
    jobs = run_cli("migrate", "--manifest", manifest, "--scheduler", cluster[0], "--jobs", "2")
    assert (jobs.returncode, jobs.stderr) == (2, "lcm-etl: error: --jobs sizes the local pool; on a Dask cluster "
                                                 "the workers' threads do\n")


def test_an_unreachable_scheduler_is_a_one_line_runtime_error(tmp_path):
    manifest = write_manifest(tmp_path / "fleet.txt", fleet_of_fixtures(tmp_path, 1))
    proc = run_cli("migrate", "--manifest", manifest, "--scheduler", "tcp://127.0.0.1:9")
    assert proc.returncode == 1
    assert proc.stderr == ("lcm-etl: error: cannot reach the Dask scheduler at tcp://127.0.0.1:9: Timed out trying "
                           "to connect to tcp://127.0.0.1:9 after 10 s (is `dask scheduler` running there, and "
                           "reachable from here?); nothing was written\n")
    assert not (tmp_path / "out").exists()


def test_without_the_dask_extra_scheduler_is_a_one_line_error(tmp_path):
    manifest = write_manifest(tmp_path / "fleet.txt", fleet_of_fixtures(tmp_path, 1))
    # the installed CLI's own entry point, in a Python where `distributed` cannot be imported
    no_dask = "import sys; sys.modules['distributed'] = None; from lcm_etl.cli import main; main()"
    proc = subprocess.run([sys.executable, "-c", no_dask, "migrate", "--manifest", str(manifest),
                           "--scheduler", "tcp://127.0.0.1:8786"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, "lcm-etl: error: --scheduler needs the Dask extra, which is not "
                                                 "installed: pip install 'lcm-etl[dask]'\n")


def test_a_discovered_tree_runs_on_the_cluster_with_each_installations_session_stores(tmp_path, cluster):
    """As the local pool does (tests/test_fleet_discover.py): each pair's lcm.db, then its agents' transcripts;
    carol's installation holds OpenClaw's SQLite session stores (two agents, 109 active-path messages and a deleted session's 4)."""
    from test_fleet_discover import state_tree

    agents = state_tree(tmp_path / "tree")
    carol = agents["host2/team/carol"].parent
    shutil.rmtree(carol / "agents")
    shutil.copytree(ROOT / "fixtures" / "openclaw-sqlite" / "native" / "agents", carol / "agents")
    proc = run_cli("migrate", "--discover", tmp_path / "tree", "--dest-root", tmp_path / "mem",
                   "--scheduler", cluster[0], "--json", timeout=600)
    assert (proc.returncode, proc.stderr) == (0, "")   # --json: no lines, and nothing from Dask's logs either
    pairs = json.loads(proc.stdout)["pairs"]
    assert [p["dest"] for p in pairs] == [f"{tmp_path}/mem/{rel}/state/lcm.sqlite" for rel in sorted(agents)]
    for rel, src in agents.items():
        assert_whole(src, tmp_path / "mem" / rel / "state" / "lcm.sqlite")
    stores = next(p for p in pairs if p["src"] == str(agents["host2/team/carol"]))["transcripts"]
    assert (stores["messages"]["inserted"], len(stores["extra"]["stores"])) == (109 + 4, 2)


def sqlite_memory_used() -> int:
    """On a worker: what the allocation counter of the SQLite lcm-etl uses says after an in-memory table of ~4 MB
    (0 when off)."""
    import ctypes

    from lcm_etl.sqlite_runtime import extension_module, sqlite3 as sq

    lib = ctypes.CDLL(extension_module().__file__)
    con = sq.connect(":memory:")
    con.execute("CREATE TABLE t AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
                "SELECT i, hex(randomblob(100)) AS x FROM n")
    current, peak = ctypes.c_int(), ctypes.c_int()
    lib.sqlite3_status(0, ctypes.byref(current), ctypes.byref(peak), 0)
    con.close()
    return current.value


def test_every_worker_runs_pairs_with_sqlites_allocation_counter_off(tmp_path):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the workers cannot import this file
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            distributed.Client(lc) as client:   # a cluster of its own: no lcm-etl run has reached its workers
        assert all(used > 1_000_000 for used in client.run(sqlite_memory_used).values())
        manifest = write_manifest(tmp_path / "fleet.txt", fleet_of_fixtures(tmp_path, 1))
        assert run_cli("migrate", "--manifest", manifest, "--scheduler", lc.scheduler_address, "-q").returncode == 0
        assert list(client.run(sqlite_memory_used).values()) == [0, 0]
