"""An existing target that cannot be written is named, with the remedy (issue 12, defect 6).

It used to be reported as "source could not be read as lossless-claw data ... unable to open database
file": SQLite cannot open a WAL database where it cannot create the -shm file, and the planner's
error was attributed to the source. A read-only file system is the case root meets too (root ignores
permission bits), so the target's folder is bind-mounted read-only; where mounting is not possible
(not root, no CAP_SYS_ADMIN) the test is skipped.
"""
from __future__ import annotations

import subprocess

import pytest

from conftest import ROOT, copy_fixture, folder_state, run_cli

TRANSCRIPT = ROOT / "fixtures" / "sessions" / "plain-chat.jsonl"


@pytest.fixture
def readonly_target(tmp_path):
    """(source, target) where target is an lcm.sqlite lcm-etl wrote, now on a read-only mount."""
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    writable, mounted = tmp_path / "rw", tmp_path / "ro"
    proc = run_cli("migrate", "--src", src, "--dest", writable / "lcm.sqlite", "-q")
    assert proc.returncode == 0, proc.stderr
    mounted.mkdir()
    mount = subprocess.run(["mount", "--bind", "-o", "ro", str(writable), str(mounted)], capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot bind-mount a folder read-only here: {mount.stderr.strip()}")
    try:
        yield src, mounted / "lcm.sqlite"
    finally:
        subprocess.run(["umount", str(mounted)], check=True)


@pytest.mark.parametrize("extra", [(), ("--full",)])
def test_migrate_into_a_target_on_a_read_only_file_system_names_the_target_and_the_remedy(readonly_target, extra):
    src, target = readonly_target
    before = folder_state(target.parent)
    proc = run_cli("migrate", "--src", src, "--dest", target, *extra)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", f"lcm-etl: error: target is on a read-only file system: {target} (remount it read-write, or copy it "
               "to a writable folder and pass that copy as --dest)\n")
    assert folder_state(target.parent) == before


def test_reconcile_into_a_target_on_a_read_only_file_system_names_the_target_and_the_remedy(readonly_target):
    _, target = readonly_target
    proc = run_cli("reconcile", "--sessions", TRANSCRIPT, "--dest", target)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", f"lcm-etl: error: target is on a read-only file system: {target} (remount it read-write, or copy it "
               "to a writable folder and pass that copy as --dest)\n")


def test_reading_a_target_on_a_read_only_file_system_still_works(readonly_target):
    src, target = readonly_target
    assert run_cli("audit", "--src", src, "--dest", target, "-q").returncode == 0


@pytest.mark.parametrize("command", ["migrate", "reconcile"])
def test_a_dry_run_into_a_target_on_a_read_only_file_system_exits_2_as_the_real_run_does(readonly_target, command):
    src, target = readonly_target
    given = ("--src", src) if command == "migrate" else ("--sessions", TRANSCRIPT)
    said = (2, "", f"lcm-etl: error: target is on a read-only file system: {target} (remount it read-write, or copy "
                   "it to a writable folder and pass that copy as --dest)\n")
    for extra in ((), ("--dry-run",)):
        proc = run_cli(command, *given, "--dest", target, *extra)
        assert (proc.returncode, proc.stdout, proc.stderr) == said
