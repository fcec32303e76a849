"""migrate --manifest: a fleet of src -> dest pairs in parallel processes."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import termios
import subprocess
from contextlib import closing
from pathlib import Path

from conftest import FIXTURES, LCM_ETL, copy_fixture, open_db, run_cli, table_counts


def test_a_manifest_migrates_every_pair_and_a_failing_pair_does_not_stop_the_others(tmp_path):
    pairs = []
    for name in ("basic-0.1.0.db", "multiparent-newest.db"):
        pairs.append((copy_fixture(name, tmp_path / "src" / name), tmp_path / "out" / f"{name}.sqlite"))
    pairs.insert(1, (tmp_path / "missing.db", tmp_path / "out" / "missing.sqlite"))
    manifest = tmp_path / "fleet.txt"
    manifest.write_text("# agents\n" + "".join(f"{s} {d}\n" for s, d in pairs))
    proc = run_cli("migrate", "--manifest", manifest, "--jobs", "2")
    assert proc.returncode == 2   # the worst pair's exit code
    progress = proc.stderr.splitlines()
    assert len(progress) == 3 and all(line.startswith("[") for line in progress)
    assert sum("FAILED" in line for line in progress) == 1
    table = proc.stdout.splitlines()
    assert table[-1].startswith("2 of 3 pairs migrated, 1 failed")
    assert pairs[0][1].exists() and pairs[2][1].exists() and not pairs[1][1].exists()


def test_a_json_manifest_reports_each_pair_and_reruns_insert_nothing(tmp_path):
    src = copy_fixture("basic-0.9.4.db", tmp_path / "src")
    manifest = tmp_path / "fleet.json"
    manifest.write_text(json.dumps([{"src": str(src), "dest": str(tmp_path / "a.sqlite")},
                                    {"src": str(src), "memory_dir": str(tmp_path / "mem")}]))
    first = json.loads(run_cli("migrate", "--manifest", manifest, "--json").stdout)
    assert first["failed"] == 0
    assert [p["report"]["messages"]["inserted"] for p in first["pairs"]] == [122, 122]
    assert (tmp_path / "mem" / "state" / "lcm.sqlite").exists()
    again = json.loads(run_cli("migrate", "--manifest", manifest, "--json").stdout)
    assert [p["report"]["messages"]["inserted"] for p in again["pairs"]] == [0, 0]


def test_a_manifest_naming_one_target_twice_is_bad_input(tmp_path):
    manifest = tmp_path / "fleet.txt"
    manifest.write_text(f"a.db {tmp_path}/t.sqlite\nb.db {tmp_path}/t.sqlite\n")
    proc = run_cli("migrate", "--manifest", manifest)
    assert proc.returncode == 2
    assert proc.stderr.startswith("lcm-etl: error: manifest writes one target from several pairs in parallel")


# --- shared by the fleet tests (test_fleet_dask, test_fleet_discover) ---

def assert_whole(src: Path, dest: Path) -> None:
    """The target is a sound SQLite file holding exactly what the source holds: nothing missing, nothing
    twice (audit reads both and lists every difference)."""
    from lcm_etl.commands.audit import AuditOptions, audit

    with closing(open_db(dest)) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    findings = audit(AuditOptions(target=dest, src=src)).findings
    assert findings == [], (dest, findings[:3])


def fleet_of_fixtures(base: Path, count: int) -> list[tuple[Path, Path]]:
    """`count` pairs, each a fresh copy of a fixture (cycling through them) with a target of its own."""
    pairs = []
    for n in range(count):
        name = FIXTURES[n % len(FIXTURES)]
        pairs.append((copy_fixture(name, base / "src" / f"{n:02d}"), base / "out" / f"{n:02d}" / "lcm.sqlite"))
    return pairs


def write_manifest(path: Path, pairs) -> Path:
    path.write_text("".join(f"{s} {d}\n" for s, d in pairs))
    return path


def test_two_runs_of_one_manifest_at_once_leave_every_target_whole(tmp_path):
    pairs = fleet_of_fixtures(tmp_path, 6)
    manifest = write_manifest(tmp_path / "fleet.txt", pairs)
    runs = [subprocess.Popen([str(LCM_ETL), "migrate", "--manifest", str(manifest), "--jobs", "1", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(run.communicate(timeout=300)[0]) for run in runs]
    for run, out in zip(runs, outs):
        assert run.returncode in (0, 1)
        for pair in out["pairs"]:
            # the only way a pair may fail: the other operator's run holds or is building that target
            assert pair["ok"] or (pair["exit_code"] == 1 and ("another run is building the same new target"
                                                               in pair["error"] or "target appeared" in pair["error"]
                                                               or "target is locked" in pair["error"])), pair
    for src, dest in pairs:
        assert_whole(src, dest)
    for n, (_, dest) in enumerate(pairs):   # between them, the two runs imported each message once
        assert sum(out["pairs"][n]["report"]["messages"]["inserted"] for out in outs if out["pairs"][n]["ok"]) \
            == table_counts(open_db(dest))["lcm_messages"]


def test_on_a_terminal_a_bar_counts_pairs_done_and_failures_so_far(tmp_path):
    pairs = fleet_of_fixtures(tmp_path, 2) + [(tmp_path / "missing.db", tmp_path / "out" / "missing.sqlite")]
    manifest = write_manifest(tmp_path / "fleet.txt", pairs)
    leader, follower = pty.openpty()
    # a terminal of 24 x 120 (a new pty has none, and tqdm would draw a bar of zero columns)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    with closing(os.fdopen(leader, "rb", buffering=0)) as terminal:
        proc = subprocess.Popen([str(LCM_ETL), "migrate", "--manifest", str(manifest), "--jobs", "2"],
                                stdout=subprocess.PIPE, stderr=follower)
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = terminal.read(4096)
            except OSError:   # EIO: the run closed the terminal's last writer
                break
            if not chunk:
                break
            shown += chunk
        proc.communicate(timeout=300)
    text = shown.decode()
    assert proc.returncode == 2
    assert "pairs: 100%" in text and "3/3" in text and "failed=1" in text
    assert sum(line.startswith("[") for line in text.replace("\r", "\n").splitlines()) == 3


def test_retries_without_a_scheduler_is_bad_input(tmp_path):
    manifest = write_manifest(tmp_path / "fleet.txt", fleet_of_fixtures(tmp_path, 1))
    proc = run_cli("migrate", "--manifest", manifest, "--retries", "3")
    assert (proc.returncode, proc.stderr) == (2, "lcm-etl: error: --retries is for --scheduler (Dask re-runs the "
                                                 "task); the local pool does not retry\n")
    assert not (tmp_path / "out").exists()
