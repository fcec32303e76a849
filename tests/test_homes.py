"""Every home (issue 29, item 3): lcm-etl finds OpenClaw's state where OpenClaw does ($OPENCLAW_STATE_DIR, else
$OPENCLAW_HOME/.openclaw, else ~/.openclaw, else ~/.clawdbot), reads `--profile NAME` as `openclaw --profile NAME`,
reads the agent databases a state folder registers outside it, and `migrate --discover` finds every profile.
The home is fixtures/openclaw-hidden/layout/home (written by OpenClaw 2026.9.6; its README says how)."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import ROOT, copy_fixture, empty_target, run_cli

LAYOUT = ROOT / "fixtures" / "openclaw-hidden" / "layout"
WRITTEN_HOME = "/home/claw/"   # the home OpenClaw ran in: absolute registry paths start with it


def home_copy(tmp_path: Path) -> Path:
    """A writable copy of the home, its registry's absolute paths re-pointed into the copy (as the installation
    has them where it lives)."""
    home = tmp_path / "home"
    shutil.copytree(LAYOUT / "home", home)
    for p in home.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    con = sqlite3.connect(home / ".openclaw-work" / "state" / "openclaw.sqlite")
    con.execute("UPDATE agent_databases SET path = ? || substr(path, ?) WHERE path LIKE ? || '%'",
                (f"{home}/", len(WRITTEN_HOME) + 1, WRITTEN_HOME))
    con.commit()
    con.close()
    return home


def env_of(home: Path, **extra: str) -> dict:
    """The caller's environment with HOME = the copy and no OPENCLAW_* of the machine running the tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCLAW_")}
    return {**env, "HOME": str(home), **extra}


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def expected(*names: str) -> dict[str, list[str]]:
    """session id -> the entry ids of its active path, as OpenClaw computed them."""
    out = {}
    for name in names:
        e = json.loads((LAYOUT / "expected" / f"layout.{name}.json").read_text())
        out[e["sessionId"]] = [m["id"] for m in e["activePath"]]
    return out


def landed(target: Path) -> dict[str, list[str]]:
    """session id -> the transcript entry ids the target holds, in id order (an entry twice is there twice)."""
    con = sqlite3.connect(target)
    try:
        rows = con.execute("SELECT session_id, json_extract(metadata, '$.transcript_entry_id') FROM lcm_messages "
                           "ORDER BY id").fetchall()
    finally:
        con.close()
    out: dict[str, list[str]] = {}
    for sid, eid in rows:
        out.setdefault(sid, []).append(eid)
    return out


PROFILE = ("profile.main", "agentdir.research")   # the `work` profile: its own agent and the one in a custom agentDir


def test_a_profile_folder_named_by_sessions_lands_its_agent_and_the_agent_registered_outside_it_once(tmp_path):
    home = home_copy(tmp_path)
    before = tree(home)
    target = tmp_path / "t" / "lcm.sqlite"
    proc = run_cli("reconcile", "--sessions", home / ".openclaw-work", "--dest", target, "--json", env=env_of(home))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert sorted(s["store"] for s in report["extra"]["stores"]) == [
        str(home / ".openclaw-work" / "agents" / "main" / "agent" / "openclaw-agent.sqlite"),
        str(home / "agents" / "research" / "openclaw-agent.sqlite")]   # main is registered too: read once
    assert landed(target) == expected(*PROFILE)
    assert report["extra"]["files_skipped"] == []
    assert tree(home) == before   # every byte as it was, and nothing beside the registry or the stores


def test_profile_work_reads_the_profiles_folder_and_audit_is_pending_before_and_clean_after(tmp_path):
    home = home_copy(tmp_path)
    target = empty_target(tmp_path / "t" / "lcm.sqlite")
    audit = ("audit", "--profile", "work", "--dest", target, "-q")
    assert run_cli(*audit, env=env_of(home)).returncode == 3
    proc = run_cli("reconcile", "--profile", "work", "--dest", target, "-q", env=env_of(home))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert landed(target) == expected(*PROFILE)
    assert run_cli(*audit, env=env_of(home)).returncode == 0


@pytest.mark.parametrize("spelling", ["absolute", "tilde"])
def test_openclaw_home_is_where_the_default_state_folder_is(tmp_path, spelling):
    home = home_copy(tmp_path)
    custom = str(home / "openclaw-home") if spelling == "absolute" else "~/openclaw-home"   # `~` is $HOME
    env = env_of(home, OPENCLAW_HOME=custom)
    target = empty_target(tmp_path / "t" / "lcm.sqlite")
    assert run_cli("audit", "--dest", target, "-q", env=env).returncode == 3
    proc = run_cli("reconcile", "--dest", target, "-q", env=env)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert landed(target) == expected("home.main")
    assert run_cli("audit", "--dest", target, "-q", env=env).returncode == 0


def test_the_legacy_clawdbot_folder_is_read_only_while_no_openclaw_folder_exists(tmp_path):
    home = home_copy(tmp_path)
    os.rename(home / "openclaw-home" / ".openclaw", home / "openclaw-home" / ".clawdbot")
    env = env_of(home, OPENCLAW_HOME=str(home / "openclaw-home"))
    proc = run_cli("reconcile", "--dest", tmp_path / "t" / "lcm.sqlite", "-q", env=env)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert landed(tmp_path / "t" / "lcm.sqlite") == expected("home.main")
    (home / "openclaw-home" / ".openclaw").mkdir()   # both: .openclaw is the state folder, and it holds nothing
    proc = run_cli("reconcile", "--dest", tmp_path / "t2" / "lcm.sqlite", "-q", env=env)
    assert (proc.returncode, proc.stderr) == (2, f"lcm-etl: error: no transcripts: nothing under {home}/openclaw-home/"
                                                 ".openclaw/agents/ (set OPENCLAW_STATE_DIR, or pass --sessions with an "
                                                 "openclaw-agent.sqlite, an agent or state folder, or a .jsonl file)\n")


def test_openclaw_state_dir_wins_and_its_tilde_is_the_openclaw_home(tmp_path):
    home = home_copy(tmp_path)
    env = env_of(home, OPENCLAW_HOME=str(home / "openclaw-home"), OPENCLAW_STATE_DIR="~/../.openclaw-work")
    proc = run_cli("reconcile", "--dest", tmp_path / "t" / "lcm.sqlite", "-q", env=env)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert landed(tmp_path / "t" / "lcm.sqlite") == expected(*PROFILE)


@pytest.mark.parametrize("explicit, read", [(".openclaw", PROFILE), ("openclaw-home/.openclaw", ("home.main",))])
def test_profile_keeps_an_explicit_state_dir_unless_it_is_only_the_inherited_profiles_as_openclaw_does(
        tmp_path, explicit, read):
    home = home_copy(tmp_path)
    env = env_of(home, OPENCLAW_STATE_DIR=str(home / explicit))   # .openclaw: the default profile's own folder
    proc = run_cli("reconcile", "--profile", "work", "--dest", tmp_path / "t" / "lcm.sqlite", "-q", env=env)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert landed(tmp_path / "t" / "lcm.sqlite") == expected(*read)


@pytest.mark.parametrize("command", ["reconcile", "audit", "migrate"])
@pytest.mark.parametrize("name", ["a/b", "-work", "x" * 65, "wörk"])
def test_a_profile_name_openclaw_refuses_is_one_line_and_exit_2(tmp_path, command, name):
    proc = run_cli(command, f"--profile={name}", "--dest", tmp_path / "t" / "lcm.sqlite", env=env_of(tmp_path))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"lcm-etl: error: --profile {name!r} is not a profile name: letters, digits, '_' and '-', "
                           "starting with a letter or digit, at most 64 characters (as OpenClaw's --profile)\n")
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("command", ["reconcile", "audit", "migrate"])
def test_a_profile_without_a_state_folder_is_one_line_and_exit_2(tmp_path, command):
    home = home_copy(tmp_path)
    proc = run_cli(command, "--profile", "Nosuch", "--dest", tmp_path / "t" / "lcm.sqlite", env=env_of(home))
    assert (proc.returncode, proc.stderr) == (2, "lcm-etl: error: no OpenClaw state folder for --profile Nosuch: "
                                                 f"{home}/.openclaw-Nosuch does not exist\n")


def test_profile_with_sessions_or_src_is_one_line_and_exit_2(tmp_path):
    home = home_copy(tmp_path)
    both = run_cli("reconcile", "--profile", "work", "--sessions", home, "--dest", tmp_path / "t", env=env_of(home))
    assert (both.returncode, both.stderr) == (2, "lcm-etl: error: --profile names the state folder to read and "
                                                 "--sessions the paths to read instead: give one of them\n")
    src = run_cli("migrate", "--profile", "work", "--src", home / "x.db", "--dest", tmp_path / "t", env=env_of(home))
    assert (src.returncode, src.stderr) == (2, "lcm-etl: error: --src names the database and --profile the state "
                                               "folder whose lcm.db is read: give one of them\n")


def test_profile_default_is_the_openclaw_folder_and_migrate_reads_the_profiles_lcm_db(tmp_path):
    home = home_copy(tmp_path)
    for profile, folder in (("work", home / ".openclaw-work"), ("DEFAULT", home / ".openclaw")):
        folder.mkdir(exist_ok=True)
        os.rename(copy_fixture("basic-0.9.4.db", tmp_path), folder / "lcm.db")
        proc = run_cli("migrate", "--profile", profile, "--dest", tmp_path / profile / "lcm.sqlite", "--json",
                       env=env_of(home))
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["source"] == str(folder / "lcm.db")


def test_a_registered_database_that_is_gone_is_a_warning_naming_it_and_the_rest_is_read(tmp_path):
    home = home_copy(tmp_path)
    gone = home / "agents" / "research" / "openclaw-agent.sqlite"
    gone.unlink()
    target = tmp_path / "t" / "lcm.sqlite"
    proc = run_cli("reconcile", "--sessions", home / ".openclaw-work", "--dest", target, "--json", env=env_of(home))
    assert proc.returncode == 0, proc.stderr
    registry = home / ".openclaw-work" / "state" / "openclaw.sqlite"
    assert json.loads(proc.stdout)["warnings"] == [
        f"agent database {gone}: registered, not found; registered for agent research in {registry}"]
    assert landed(target) == expected("profile.main")
    text = run_cli("reconcile", "--sessions", home / ".openclaw-work", "--dest", target, env=env_of(home)).stdout
    assert f"  warning: agent database {gone}: registered, not found; registered for agent research in {registry}\n" \
        in text


def test_audit_of_a_state_folder_looks_for_its_lcm_db_not_the_callers(tmp_path):
    home = home_copy(tmp_path)
    (home / ".openclaw").mkdir()
    os.rename(copy_fixture("basic-0.9.4.db", tmp_path), home / ".openclaw" / "lcm.db")   # the caller's default
    proc = run_cli("audit", "--sessions", home / ".openclaw-work", "--dest", empty_target(tmp_path / "t.sqlite"),
                   "--json", env=env_of(home))
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["source"], report["extra"]["lcm_db_not_found"]) == (None, str(home / ".openclaw-work" / "lcm.db"))
    os.rename(home / ".openclaw" / "lcm.db", home / ".openclaw-work" / "lcm.db")
    proc = run_cli("audit", "--sessions", home / ".openclaw-work", "--dest", tmp_path / "t.sqlite", "--json",
                   env=env_of(home))
    assert json.loads(proc.stdout)["source"] == str(home / ".openclaw-work" / "lcm.db")


def test_discover_finds_every_profile_of_a_home_and_each_pair_lands_its_installation(tmp_path):
    home = home_copy(tmp_path)
    before = tree(home)
    shown = run_cli("migrate", "--discover", home, "--dest-root", tmp_path / "mem", "--dry-run", "--json",
                    env=env_of(home))
    assert shown.returncode == 0, shown.stderr
    mem = tmp_path / "mem"
    assert json.loads(shown.stdout)["manifest"] == [
        {"src": str(home / ".openclaw-work"), "dest": str(mem / ".openclaw-work" / "state" / "lcm.sqlite")},
        {"src": str(home / "openclaw-home" / ".openclaw"),
         "dest": str(mem / "openclaw-home" / ".openclaw" / "state" / "lcm.sqlite")}]
    proc = run_cli("migrate", "--discover", home, "--dest-root", mem, env=env_of(home))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("2 of 2 pairs migrated, 0 failed, ")
    assert landed(mem / ".openclaw-work" / "state" / "lcm.sqlite") == expected(*PROFILE)
    assert landed(mem / "openclaw-home" / ".openclaw" / "state" / "lcm.sqlite") == expected("home.main")
    assert tree(home) == before
