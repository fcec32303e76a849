"""What a Python CLI user expects (issue 11, item 6): `python -m lcm_etl`, one spelling and help text per
shared option, exit codes in --help, docs/cli.md's option table made from the commands (import circles:
tests/test_import_graph.py)."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys

import click
import pytest

from conftest import LCM_ETL, ROOT, copy_fixture, run_cli
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
def test_every_help_lists_its_own_exit_codes_and_3_only_on_audit_and_the_group(command):
    proc = run_cli(*([command] if command else []), "--help")
    assert proc.returncode == 0
    listed = proc.stdout[proc.stdout.index("Exit codes:"):]
    codes = [int(line.split()[0]) for line in listed.splitlines()[1:] if line.strip()[:1].isdigit()]
    assert codes == [code for code in EXIT_CODES if code != 3 or command in (None, "audit")]
    for code, meaning in EXIT_CODES.items():
        if code and code in codes:
            assert f"{code:>3}  {meaning}" in listed
    zero = {None: EXIT_CODES[0], "audit": "the target holds every source fact"}.get(command, "success")
    assert f"  0  {zero}\n" in listed


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_help_ends_with_examples_of_itself_and_points_to_docs_cli_md(command):
    out = run_cli(*([command] if command else []), "--help").stdout
    assert "More: docs/cli.md (in the source tree) explains every command and option" in " ".join(out.split())
    if command is None:
        return
    examples = out[out.index("Examples:\n") + len("Examples:\n"):out.index("Exit codes:")].split("\n\n")[0]
    lines = examples.splitlines()
    assert lines and all(line.startswith(f"    lcm-etl {command}") for line in lines), examples


def test_every_option_of_every_command_is_in_docs_cli_md_and_the_settings_read_from_the_environment_are_named():
    from lcm_etl.cli_conventions import FROM_ENVIRONMENT

    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for name, cmd in cli.commands.items():
        for param in cmd.params:
            if isinstance(param, click.Option):
                row = next((line for line in doc.splitlines() if line.startswith(f"| `{param.opts[0]}`")), "")
                assert name in row.split(" | ")[1], (name, param.opts)
                assert (f"LCM_ETL_{param.name.upper()}" in row) == (param.name in FROM_ENVIRONMENT), row
    for setting in FROM_ENVIRONMENT:
        assert f"`LCM_ETL_{setting.upper()}`" in doc[doc.index("**Settings from the environment.**"):]
    assert 'eval "$(_LCM_ETL_COMPLETE=bash_source lcm-etl)"' in doc


def test_the_shell_completion_the_docs_give_is_what_click_prints():
    proc = subprocess.run([str(LCM_ETL)], env={**os.environ, "_LCM_ETL_COMPLETE": "bash_source"},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "complete -o nosort -F _lcm_etl_completion lcm-etl" in proc.stdout


def test_settings_come_from_lcm_etl_variables_the_command_line_wins_and_no_flag_is_read_from_them(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path)
    memory = tmp_path / "remnic" / "memory"
    env = {**os.environ, "LCM_ETL_SRC": str(src), "LCM_ETL_MEMORY_DIR": str(memory), "LCM_ETL_DRY_RUN": "1",
           "LCM_ETL_JSON": "1"}
    proc = run_cli("migrate", "-q", env=env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert (memory / "state" / "lcm.sqlite").is_file()   # LCM_ETL_DRY_RUN is not read: a flag acts only when given
    listed = run_cli("runs", "--json", env=env)
    assert json.loads(listed.stdout)["target"] == str(memory / "state" / "lcm.sqlite")
    other = tmp_path / "other.sqlite"
    assert run_cli("runs", "--dest", other, env=env).stderr == f"lcm-etl: error: no target at {other}: no runs\n"


def test_dash_v_prints_each_stages_time_and_dash_vv_each_steps_on_stderr_and_dash_v_gives_the_traceback(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path)
    once = run_cli("migrate", "--src", src, "--dest", tmp_path / "a" / "lcm.sqlite", "-q", "-v")
    assert once.returncode == 0 and once.stdout == ""
    lines = once.stderr.splitlines()
    assert lines and all(re.fullmatch(r"lcm-etl: stage .+ \((duckdb|sqlite)\): \d+\.\d{3} s", line) for line in lines)
    assert "lcm-etl: stage plan, one batch (duckdb): " in once.stderr
    twice = run_cli("migrate", "--src", src, "--dest", tmp_path / "b" / "lcm.sqlite", "-q", "-vv")
    assert re.search(r"^lcm-etl:   step \w+: \d+\.\d{3} s", twice.stderr, re.M)
    assert len(twice.stderr.splitlines()) > len(lines)
    plain = run_cli("inspect", "--src", tmp_path / "missing.db", "-v")
    assert plain.returncode == 2 and plain.stderr.startswith("Traceback (most recent call last):")
    assert plain.stderr.splitlines()[-1] == f"lcm-etl: error: source not found: {tmp_path / 'missing.db'} " \
                                            "(pass --src with the path of lossless-claw's lcm.db)"


def test_a_json_error_prints_a_json_object_on_stdout_and_the_one_line_on_stderr(tmp_path):
    missing = tmp_path / "missing.db"
    proc = run_cli("migrate", "--src", missing, "--dest", tmp_path / "t.sqlite", "--json")
    message = f"source not found: {missing} (pass --src with the path of lossless-claw's lcm.db)"
    assert (proc.returncode, proc.stderr) == (2, f"lcm-etl: error: {message}\n")
    assert json.loads(proc.stdout) == {"error": message, "exit_code": 2}
    usage = run_cli("audit", "--memory-limit", "lots", "--json")
    assert usage.returncode == 2 and usage.stderr.count("\n") == 1
    assert json.loads(usage.stdout) == {"error": usage.stderr.removeprefix("lcm-etl: error: ").rstrip("\n"),
                                        "exit_code": 2}
    assert run_cli("migrate", "--src", missing, "--dest", tmp_path / "t.sqlite").stdout == ""   # text: stdout empty


def test_runs_csv_prints_one_row_per_run_with_the_ids_and_times_whole(tmp_path):
    src = copy_fixture("basic-0.15.3.db", tmp_path)
    target = tmp_path / "t" / "lcm.sqlite"
    ran = [json.loads(run_cli("migrate", "--src", src, "--dest", target, "--json", *extra).stdout)
           for extra in ((), ("--full",))]
    proc = run_cli("runs", "--dest", target, "--csv")
    assert (proc.returncode, proc.stderr) == (0, "")
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["run_id"], r["command"], r["status"], r["source_path"]) for r in rows] == [
        (r["run_id"], "migrate", "complete", os.path.realpath(src)) for r in ran]
    assert all(r["started_at"].endswith("Z") and r["finished_at"].endswith("Z") for r in rows)
    assert run_cli("runs", "--dest", target, "--csv", "--json").stderr == \
        "lcm-etl: error: --csv prints the runs as CSV: do not also pass --json or --quiet\n"


def test_migrate_pointed_at_transcripts_or_a_home_without_lcm_db_says_to_run_reconcile(tmp_path):
    store = ROOT / "fixtures" / "openclaw-hidden" / "cold" / "state" / "agents" / "main" / "agent" / \
        "openclaw-agent.sqlite"
    jsonl = ROOT / "fixtures" / "sessions" / "plain-chat.jsonl"
    home = tmp_path / "home"
    (home / ".openclaw" / "agents").mkdir(parents=True)
    cases = [
        (("--src", store), f"source is an OpenClaw session store, not lossless-claw's lcm.db: {store} (import its "
                           f"transcripts with `lcm-etl reconcile --sessions {store}`)", {}),
        (("--src", jsonl), f"source is an OpenClaw JSONL transcript, not lossless-claw's lcm.db: {jsonl} (import "
                           f"its transcripts with `lcm-etl reconcile --sessions {jsonl}`)", {}),
        ((), f"source not found: this OpenClaw state folder has no lossless-claw lcm.db: {home}/.openclaw/lcm.db "
             f"(import its transcripts with `lcm-etl reconcile --sessions {home}/.openclaw`)",
         {"HOME": str(home)}),
    ]
    renamed = tmp_path / "src" / "backup.sqlite"   # a store is known by its tables, not its name
    renamed.parent.mkdir()
    shutil.copyfile(store, renamed)
    cases.append((("--src", renamed), f"source is an OpenClaw session store, not lossless-claw's lcm.db: {renamed} "
                                      f"(import its transcripts with `lcm-etl reconcile --sessions {renamed}`)", {}))
    for args, message, env in cases:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")} | env
        proc = run_cli("migrate", *args, "--dest", tmp_path / "t" / "lcm.sqlite", env=clean)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"lcm-etl: error: {message}\n")
    assert not (tmp_path / "t").exists()
    assert [p.name for p in renamed.parent.iterdir()] == ["backup.sqlite"]   # nothing beside the source


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
        # audit of a target that does not exist: everything pending (exit 3)
        assert proc.returncode in (0, 3), proc.stderr
        assert not cache.exists(), f"{args[0]} created {sorted(map(str, cache.rglob('*')))}"
    assert not target.exists()
    assert run_cli("migrate", "--src", src, "--dest", target, "-q", env=env).returncode == 0
    assert cache.is_dir()   # the real run keeps its snapshot and the scanner's record
    for args in read_only[1:]:   # and on an existing target, read-only commands leave the folder as it is
        before = sorted((p, p.stat().st_mtime_ns) for p in cache.rglob("*"))
        assert run_cli(*args, "-q", env=env).returncode in (0, 3)
        assert sorted((p, p.stat().st_mtime_ns) for p in cache.rglob("*")) == before, args[0]


def test_the_groups_own_options_read_no_setting_from_the_environment(tmp_path):
    """Only the FROM_ENVIRONMENT options read LCM_ETL_<OPTION>: LCM_ETL_VERSION=1 once printed the version and exited
    0 in place of every command."""
    env = {**os.environ, "LCM_ETL_VERSION": "1", "LCM_ETL_CACHE_DIR": str(tmp_path / "cache")}
    proc = run_cli("cache", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["snapshots"] == []
