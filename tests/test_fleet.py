"""migrate --manifest: a fleet of src -> dest pairs in parallel processes."""
from __future__ import annotations

import json

from conftest import copy_fixture, run_cli


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
