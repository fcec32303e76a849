"""Without --dest or --memory-dir every command's target is the lcm.sqlite Remnic reads, found by Remnic's own rules
(lcm_etl/store/remnic_home.py): one test per rule and the precedence between them, each a real CLI
run in a temporary HOME holding Remnic's files, with the environment and working directory Remnic would see."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURE_DIR, LCM_ETL

SRC = FIXTURE_DIR / "multiparent-newest.db"
FALLBACK_RULE = "Remnic's default when neither ~/.remnic/memory nor ~/.engram/memory exists"


@pytest.fixture
def home(tmp_path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "cwd").mkdir()
    return tmp_path / "home"


def lcm_etl(home: Path, *args, code: int = 0, **env: str) -> subprocess.CompletedProcess:
    """The CLI with HOME set to `home`, run from the folder beside it, and no Remnic or OpenClaw variable but those
    given; reports unwrapped (LCM_ETL_WIDTH=0: a temporary folder's path is longer than a line)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("REMNIC_", "ENGRAM_", "OPENCLAW_", "LCM_ETL_"))}
    clean["LCM_ETL_WIDTH"] = "0"
    proc = subprocess.run([str(LCM_ETL), *map(str, args)], capture_output=True, text=True, timeout=120,
                          cwd=home.parent / "cwd", env=clean | {"HOME": str(home)} | env)
    assert proc.returncode == code, proc.stderr
    return proc


def chosen(home: Path, **env: str) -> tuple[str, str]:
    """The target a dry-run migrate picks, and the rule it names."""
    report = json.loads(lcm_etl(home, "migrate", "--src", SRC, "--dry-run", "--json", **env).stdout)
    return report["target"], report["target_rule"]


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def store(memory_dir: Path | str) -> str:
    return str(Path(memory_dir) / "state" / "lcm.sqlite")


def test_with_nothing_of_remnics_present_the_target_is_openclaws_workspace_memory_and_a_dry_run_creates_nothing(home):
    proc = lcm_etl(home, "migrate", "--src", SRC, "--dry-run")
    target = store(home / ".openclaw/workspace/memory/local")
    assert proc.stdout.splitlines()[0] == f"target: {target} ({FALLBACK_RULE})"
    assert list(home.iterdir()) == [] and list((home.parent / "cwd").iterdir()) == []


def test_an_existing_remnic_memory_folder_is_the_target_before_an_engram_one(home):
    (home / ".engram/memory").mkdir(parents=True)
    assert chosen(home) == (store(home / ".engram/memory"), "~/.engram/memory exists")
    (home / ".remnic/memory").mkdir(parents=True)
    assert chosen(home) == (store(home / ".remnic/memory"), "~/.remnic/memory exists")


def test_memory_dir_in_the_users_config_file_beats_the_standalone_folders_with_home_expanded(home):
    (home / ".remnic/memory").mkdir(parents=True)
    engram = write_json(home / ".config/engram/config.json", {"memoryDir": "~/from-engram-config"})
    assert chosen(home) == (store(home / "from-engram-config"), f"memoryDir in {engram}")
    remnic = write_json(home / ".config/remnic/config.json", {"remnic": {"memoryDir": "${HOME}/from-remnic-config"}})
    assert chosen(home) == (store(home / "from-remnic-config"), f"memoryDir in {remnic}")


def test_a_config_file_in_the_working_directory_beats_the_users_one(home):
    write_json(home / ".config/remnic/config.json", {"memoryDir": "/users/config"})
    engram = write_json(home.parent / "cwd/engram.config.json", {"engram": {"memoryDir": "$HOME/cwd-engram"}})
    assert chosen(home) == (store(home / "cwd-engram"), f"memoryDir in {engram}")
    remnic = write_json(home.parent / "cwd/remnic.config.json", {"memoryDir": "relative/dir"})
    assert chosen(home) == (store(home.parent / "cwd/relative/dir"), f"memoryDir in {remnic}")


def test_a_config_path_from_the_environment_is_the_only_config_file_read(home):
    write_json(home.parent / "cwd/remnic.config.json", {"memoryDir": "/cwd/config"})
    named = write_json(home / "named.json", {"memoryDir": "~/named"})
    assert chosen(home, ENGRAM_CONFIG_PATH="~/named.json") == (store(home / "named"), f"memoryDir in {named}")
    other = write_json(home / "other.json", {"memoryDir": "~/other"})
    assert chosen(home, REMNIC_CONFIG_PATH=str(other), ENGRAM_CONFIG_PATH=str(named)) == \
        (store(home / "other"), f"memoryDir in {other}")
    # a named file that does not exist is no config at all: the folders decide, not ./remnic.config.json
    assert chosen(home, REMNIC_CONFIG_PATH=str(home / "absent.json")) == \
        (store(home / ".openclaw/workspace/memory/local"), FALLBACK_RULE)


def test_the_remnic_block_beats_the_engram_block_and_the_top_level_fills_in_what_the_block_lacks(home):
    config = home / ".config/remnic/config.json"
    write_json(config, {"memoryDir": "/top", "remnic": {"memoryDir": "/remnic"}, "engram": {"memoryDir": "/engram"}})
    assert chosen(home)[0] == store("/remnic")
    write_json(config, {"memoryDir": "/top", "engram": {"memoryDir": "/engram"}})
    assert chosen(home)[0] == store("/engram")
    write_json(config, {"memoryDir": "/top", "remnic": {"wearables": {"enabled": False}}})
    assert chosen(home)[0] == store("/top")


def test_the_memory_dir_variables_beat_the_config_file_remnics_spelling_first(home):
    write_json(home / ".config/remnic/config.json", {"memoryDir": "/config"})
    assert chosen(home, ENGRAM_MEMORY_DIR="~/engram-env") == (store(home / "engram-env"), "ENGRAM_MEMORY_DIR")
    assert chosen(home, ENGRAM_MEMORY_DIR="/engram-env", REMNIC_MEMORY_DIR="/remnic-env") == \
        (store("/remnic-env"), "REMNIC_MEMORY_DIR")
    assert chosen(home, REMNIC_MEMORY_DIR="") == (store("/config"), f"memoryDir in {home / '.config/remnic/config.json'}")


def test_the_active_space_of_remnics_spaces_manifest_beats_everything_and_a_vanished_one_falls_through(home):
    manifest = home / ".config/engram/spaces/manifest.json"
    spaces = [{"id": "personal", "memoryDir": "/personal"}, {"id": "work", "memoryDir": str(home / "work")}]
    write_json(manifest, {"activeSpaceId": "work", "spaces": spaces, "version": 1})
    assert chosen(home, REMNIC_MEMORY_DIR="/env") == (store(home / "work"), f"active space 'work' in {manifest}")
    write_json(manifest, {"activeSpaceId": "deleted", "spaces": spaces, "version": 1})
    assert chosen(home, REMNIC_MEMORY_DIR="/env") == (store("/env"), "REMNIC_MEMORY_DIR")


def test_a_config_file_remnic_cannot_parse_is_one_line_and_exit_2_with_nothing_written(home):
    config = home / ".config/remnic/config.json"
    config.parent.mkdir(parents=True)
    config.write_text("{not json", encoding="utf-8")
    proc = lcm_etl(home, "migrate", "--src", SRC, code=2)
    assert proc.stderr.startswith(f"lcm-etl: error: Remnic's config file cannot be read: {config} (")
    assert proc.stderr.endswith("Remnic fails on it too: fix it, or pass --memory-dir or --dest\n")
    assert len(proc.stderr.splitlines()) == 1
    assert sorted(p.name for p in home.rglob("*")) == [".config", "config.json", "remnic"]


def test_every_target_command_uses_the_default_and_names_it_first(home):
    (home / ".remnic/memory").mkdir(parents=True)
    target = store(home / ".remnic/memory")
    head = f"target: {target} (~/.remnic/memory exists)"
    migrated = lcm_etl(home, "migrate", "--src", SRC)
    assert migrated.stdout.splitlines()[0] == head and Path(target).is_file()
    run_id = json.loads(lcm_etl(home, "runs", "--json").stdout)["runs"][0]["run_id"]
    for args, code in ((["runs"], 0), (["audit", "--src", SRC], 0), (["reconcile", "--sessions", home], 0),
                       (["undo", run_id, "--dry-run"], 0)):
        proc = lcm_etl(home, *args, code=code)
        assert proc.stdout.splitlines()[0] == head, args
        report = json.loads(lcm_etl(home, *args, "--json", code=code).stdout)
        assert (report["target"], report["target_rule"]) == (target, "~/.remnic/memory exists"), args


def test_a_named_target_says_which_option_named_it_in_json_only(home, tmp_path):
    dest = tmp_path / "t.sqlite"
    proc = lcm_etl(home, "migrate", "--src", SRC, "--dest", dest, "--dry-run", REMNIC_MEMORY_DIR="/ignored")
    assert proc.stdout.startswith("lcm-etl migrate: DRY RUN")
    report = json.loads(lcm_etl(home, "migrate", "--src", SRC, "--dest", dest, "--dry-run", "--json").stdout)
    assert (report["target"], report["target_rule"]) == (str(dest), "--dest")
    report = json.loads(lcm_etl(home, "migrate", "--src", SRC, "--memory-dir", tmp_path, "--dry-run", "--json").stdout)
    assert (report["target"], report["target_rule"]) == (store(tmp_path), "--memory-dir")


def test_a_fleet_manifest_entry_with_an_empty_target_is_refused_not_sent_to_remnics_default(home, tmp_path):
    manifest = write_json(tmp_path / "pairs.json", [{"src": str(SRC), "dest": ""}])
    proc = lcm_etl(home, "migrate", "--manifest", manifest, "--dry-run", code=2)
    assert proc.stderr == f"lcm-etl: error: manifest entry 1 needs \"src\" and \"dest\" (or \"memory_dir\"): {manifest}\n"


def test_a_watch_on_the_default_target_names_it_once_before_its_first_sync(tmp_path):
    """The watcher inherits the test session's REMNIC_MEMORY_DIR (conftest): that is the rule it names."""
    from watchlib import Watcher

    target = Path(os.environ["REMNIC_MEMORY_DIR"]) / "state" / "lcm.sqlite"
    w = Watcher("migrate", "--src", SRC, "--interval", "0.2", tmp=tmp_path / "tmp", as_json=False)
    try:
        assert " sync 1: " in w.next_sync()
        code, err = w.stop(signal.SIGTERM)
    finally:
        w.kill()
    assert code == 0, err
    assert err == (f"lcm-etl: target: {target} (REMNIC_MEMORY_DIR)\n"
                   "lcm-etl: watching (polling every 0.2 s; Ctrl-C stops)\n")
