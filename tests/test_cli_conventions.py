"""What a Python CLI user expects (issue 11, item 6): `python -m lcm_etl`, one spelling and help text per
shared option, exit codes in --help, docs/cli.md's option table made from the commands (import circles:
tests/test_import_graph.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, copy_fixture, run_cli
from lcm_etl.cli import cli
from lcm_etl.docgen import cli_doc
from lcm_etl.errors import EXIT_CODES

COMMANDS = tuple(sorted(cli.commands))   # every command the click group has, a new one included
# the one command that prints no run report: `steps` prints the pipeline's documentation
NOT_REPORTING = {"steps"}


def test_python_dash_m_lcm_etl_is_the_same_command_line():
    proc = subprocess.run([sys.executable, "-m", "lcm_etl", "--version"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, run_cli("--version").stdout, "")
    proc = subprocess.run([sys.executable, "-m", "lcm_etl", "inspect", "--memory-limit", "abc"],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("lcm-etl: error: Invalid value for '--memory-limit'")


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_lists_the_exit_codes(command):
    proc = run_cli(*([command] if command else []), "--help")
    assert proc.returncode == 0
    listed = proc.stdout[proc.stdout.index("Exit codes:"):]
    for code, meaning in EXIT_CODES.items():
        assert f"{code:>3}  {meaning}" in listed


@pytest.mark.parametrize("option", ["--json", "--quiet", "--debug", "--key-by", "--memory-limit", "--session-filter",
                                    "--profile"])
def test_a_shared_option_has_one_help_text_on_every_command_that_takes_it(option):
    helps = {name: p.help for name, cmd in cli.commands.items() for p in cmd.params if option in p.opts}
    assert len(helps) >= 2 and all(helps.values())
    assert len(set(helps.values())) == 1, helps


def test_every_reporting_command_takes_json_quiet_and_debug():
    lacking = {name: sorted({"--json", "--quiet", "-q", "--debug"} - {o for p in cmd.params for o in p.opts})
               for name, cmd in cli.commands.items() if name not in NOT_REPORTING}
    assert {name: missing for name, missing in lacking.items() if missing} == {}
    assert {"runs", "undo", "cache", "migrate", "reconcile", "audit", "inspect"} <= set(lacking)


def test_inspect_quiet_prints_nothing_and_exits_0(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path)
    assert (lambda p: (p.returncode, p.stdout, p.stderr))(run_cli("inspect", "--src", src, "-q")) == (0, "", "")


def test_audits_dest_help_says_the_target_is_checked_not_written():
    proc = run_cli("audit", "--help")
    dest = " ".join(proc.stdout[proc.stdout.index("--dest"):proc.stdout.index("--memory-dir")].split())
    assert dest == ("--dest PATH Remnic LCM database (lcm.sqlite) to check (read only; never created) "
                    "[env var: LCM_ETL_DEST]")


def test_docs_cli_md_option_table_is_made_from_the_commands():
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert doc == cli_doc(doc, cli), "docs/cli.md's option table drifted: run `python docs/generate.py`"
    for option in ("--manifest", "--jobs", "--sessions", "--strict", "--scheduler", "--watch"):
        assert f"| `{option}`" in doc


def test_readme_and_docs_cli_md_list_the_exit_codes_help_lists_and_every_signals_code_is_among_them():
    import signal

    from lcm_etl.docgen import exit_codes, user_readme
    from lcm_etl.interrupts import Interrupted

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme == user_readme(readme), "README.md's exit codes drifted: run `python docs/generate.py`"
    for doc in (readme, (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")):
        assert exit_codes() in doc
        assert doc.count("Exit codes") == 1   # stated once: the generated list
    assert {Interrupted(signal.SIGINT).exit_code, Interrupted(signal.SIGTERM).exit_code} <= set(EXIT_CODES)


def test_the_installed_distribution_has_the_packages_one_version():
    from importlib.metadata import version

    import lcm_etl

    assert version("lcm-etl") == lcm_etl.__version__
    assert 'version = "' not in (ROOT / "pyproject.toml").read_text(encoding="utf-8")


def test_dry_runs_inspect_and_audit_create_no_cache_folder_and_only_a_real_run_keeps_one(tmp_path):
    """--help says a dry run creates no file or folder; inspect and audit are read-only: none of them may leave
    the cache folder (lcm_etl/cachedir.py) behind, not even the record of the scanner's signature check."""
    import os

    src = copy_fixture("basic-0.15.3.db", tmp_path / "openclaw")
    sessions = ROOT / "fixtures" / "sessions" / "plain-chat.jsonl"
    target, cache = tmp_path / "remnic" / "lcm.sqlite", tmp_path / "cache"
    env = {**os.environ, "LCM_ETL_CACHE_DIR": str(cache)}
    read_only = [("inspect", "--src", src),
                 ("migrate", "--src", src, "--dest", target, "--dry-run"),
                 ("reconcile", "--sessions", sessions, "--dest", target, "--dry-run"),
                 ("audit", "--src", src, "--sessions", sessions, "--dest", target)]
    for args in read_only:
        proc = run_cli(*args, "-q", env=env)
        assert proc.returncode in (0, 3), proc.stderr
        assert not cache.exists(), f"{args[0]} created {sorted(map(str, cache.rglob('*')))}"
    assert not target.exists()
    assert run_cli("migrate", "--src", src, "--dest", target, "-q", env=env).returncode == 0
    assert cache.is_dir()   # the real run keeps its snapshot and the scanner's record
    for args in read_only[1:]:   # and on an existing target, read-only commands leave the folder as it is
        before = sorted((p, p.stat().st_mtime_ns) for p in cache.rglob("*"))
        assert run_cli(*args, "-q", env=env).returncode in (0, 3)
        assert sorted((p, p.stat().st_mtime_ns) for p in cache.rglob("*")) == before, args[0]
