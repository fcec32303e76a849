"""Bad options and paths are bad usage: exit 2, one line, nothing created (issue 12, defect 5).

A value no command can use is refused by the option itself, before any work, with the same line for
every command that takes the option.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import LCM_ETL, ROOT, copy_fixture, run_cli

TRANSCRIPT = ROOT / "fixtures" / "sessions" / "plain-chat.jsonl"


def command_args(command: str, src, dest) -> list:
    return {"migrate": ["migrate", "--src", src, "--dest", dest],
            "reconcile": ["reconcile", "--sessions", TRANSCRIPT, "--dest", dest],
            "audit": ["audit", "--src", src, "--dest", dest],
            "inspect": ["inspect", "--src", src]}[command]


def assert_usage_error(proc, line: str) -> None:
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", line + "\n")


@pytest.mark.parametrize("command", ["migrate", "reconcile", "audit", "inspect"])
@pytest.mark.parametrize("value", ["banana", "", "12", "-1", "1e3MB", "0.5KB"])
def test_a_memory_limit_that_is_not_a_size_is_refused_with_one_line_by_every_command(tmp_path, command, value):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    dest = tmp_path / "out" / "lcm.sqlite"
    proc = run_cli(*command_args(command, src, dest), "--memory-limit", value)
    assert_usage_error(proc, f"lcm-etl: error: Invalid value for '--memory-limit': {value!r} is not a memory size "
                             f"of at least 1MB such as 96MB, 2GB or 512MiB (see `lcm-etl {command} --help`)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["96MB", "96 mb", "1.5GB", "512MiB", "100000000 bytes"])
def test_a_memory_limit_in_any_of_duckdbs_units_is_accepted(tmp_path, value):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    proc = run_cli("migrate", "--src", src, "--dest", tmp_path / "lcm.sqlite", "-q", "--memory-limit", value)
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize("value", ["-5", "-0.1"])
def test_a_negative_lock_timeout_is_refused_with_one_line(tmp_path, value):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    for command in ("migrate", "reconcile"):
        proc = run_cli(*command_args(command, src, tmp_path / "out" / "lcm.sqlite"), "--lock-timeout", value)
        assert_usage_error(proc, f"lcm-etl: error: Invalid value for '--lock-timeout': {float(value)} is not in the "
                                 f"range x>=0. (see `lcm-etl {command} --help`)")
    assert not (tmp_path / "out").exists()


def run_bytes(*args) -> subprocess.CompletedProcess:
    """The CLI with raw (possibly non-UTF-8) bytes as arguments, as a shell would pass them."""
    return subprocess.run([os.fsencode(LCM_ETL), *(a if isinstance(a, bytes) else os.fsencode(a) for a in args)],
                          capture_output=True, text=True, errors="backslashreplace", timeout=120)


@pytest.mark.parametrize("command, option", [("migrate", "--src"), ("migrate", "--dest"), ("migrate", "--memory-dir"),
                                             ("reconcile", "--sessions"), ("reconcile", "--dest"),
                                             ("reconcile", "--src"), ("audit", "--src"), ("audit", "--dest"),
                                             ("audit", "--sessions"), ("inspect", "--src")])
def test_a_path_that_is_not_utf8_is_refused_with_one_line_naming_its_bytes(tmp_path, command, option):
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    good = {"--src": src, "--dest": tmp_path / "out" / "lcm.sqlite", "--sessions": TRANSCRIPT}
    bad = os.fsencode(tmp_path) + b"/caf\xe9\xff"
    args = [command]
    for name in {"migrate": ("--src", "--dest"), "reconcile": ("--sessions", "--dest"), "audit": ("--src", "--dest"),
                 "inspect": ("--src",)}[command]:
        if name != option and not (option == "--memory-dir" and name == "--dest"):
            args += [name, good[name]]
    args += [option, bad]
    proc = run_bytes(*args)
    shown = bad.decode("utf-8", "backslashreplace")
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2, "", f"lcm-etl: error: Invalid value for '{option}': {shown} is not valid UTF-8; lcm-etl records paths "
               f"as text: rename it or pass a path without those bytes (see `lcm-etl {command} --help`)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_lcm_etl_alone_is_one_line_naming_the_commands():
    assert_usage_error(run_cli(), "lcm-etl: error: no command given: one of audit, cache, inspect, migrate, reconcile, runs, "
                                  "steps, undo (see `lcm-etl --help`)")


def test_a_fleet_option_without_manifest_or_discover_says_it_needs_the_pairs_and_is_never_ignored(tmp_path):
    src, dest = copy_fixture("basic-0.15.3.db", tmp_path), tmp_path / "out" / "lcm.sqlite"
    needs = "applies only with --manifest FILE or --discover ROOT, which name the pairs to migrate"
    for extra, flag in ((("--jobs", "3"), "--jobs"), (("--dest-root", tmp_path / "mem"), "--dest-root"),
                        (("--scheduler", "tcp://127.0.0.1:1"), "--scheduler")):
        assert_usage_error(run_cli("migrate", "--src", src, "--dest", dest, *extra), f"lcm-etl: error: {flag} {needs}")
        assert_usage_error(run_cli("migrate", *extra), f"lcm-etl: error: {flag} {needs}")
    assert not dest.parent.exists() and not (tmp_path / "mem").exists()
