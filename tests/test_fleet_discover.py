"""migrate --discover ROOT --dest-root DIR: the manifest of a tree of OpenClaw state folders."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from conftest import ROOT, copy_fixture, run_cli, target_rows
from test_fleet import assert_whole


def state_tree(root: Path) -> dict[str, Path]:
    """Three agents' state folders (lcm.db beside agents/*/sessions/) at different depths, and decoys."""
    found = {}
    for rel, fixture in (("host1/alice", "basic-0.9.4.db"), ("host1/bob", "wal-newest.db"),
                         ("host2/team/carol", "multiparent-newest.db")):
        folder = root / rel
        (folder / "agents" / "main" / "sessions").mkdir(parents=True)
        shutil.copyfile(ROOT / "fixtures" / "sessions" / "plain-chat.jsonl",
                        folder / "agents" / "main" / "sessions" / "s1.jsonl")
        db = copy_fixture(fixture, folder)
        for side in ("", "-wal", "-shm"):
            if Path(f"{db}{side}").exists():
                os.rename(f"{db}{side}", folder / f"lcm.db{side}")
        found[rel] = folder / "lcm.db"
    # inside a state folder nothing more is looked for, even a file of that name
    (root / "host1" / "alice" / "agents" / "main" / "sessions" / "lcm.db").write_text("not a state folder\n")
    (root / "host3" / "empty").mkdir(parents=True)          # no lcm.db: not an agent
    (root / "host3" / "link").symlink_to(root / "host1")   # symlinked folders are not followed
    return found


def test_dry_run_prints_the_discovered_manifest_and_writes_nothing(tmp_path):
    agents = state_tree(tmp_path / "tree")
    proc = run_cli("migrate", "--discover", tmp_path / "tree", "--dest-root", tmp_path / "mem", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    expected = [f"{agents[rel]} {tmp_path}/mem/{rel}/state/lcm.sqlite" for rel in sorted(agents)]
    lines = proc.stdout.splitlines()
    assert lines[:5] == [f"# 3 OpenClaw state folders under {tmp_path}/tree: SRC DEST (usable as --manifest)",
                         *expected, ""]
    # a dry run migrated nothing and inserted nothing: the table, its last line and the progress lines say so
    assert lines[5] == "DRY RUN - nothing was written; a real run would insert:"
    assert lines[-1].startswith("3 of 3 pairs checked, 0 failed, ") and lines[-1].endswith(" s (dry run: nothing written)")
    progress = proc.stderr.splitlines()
    assert len(progress) == 3 and all(" summaries would be inserted (" in line for line in progress), progress
    assert "migrated" not in proc.stdout and " inserted" not in proc.stdout
    assert not (tmp_path / "mem").exists()


def test_the_printed_manifest_run_as_a_manifest_migrates_every_agent(tmp_path):
    agents = state_tree(tmp_path / "tree")
    shown = run_cli("migrate", "--discover", tmp_path / "tree", "--dest-root", tmp_path / "mem", "--dry-run", "--json")
    manifest = json.loads(shown.stdout)["manifest"]
    assert manifest == [{"src": str(agents[rel]), "dest": f"{tmp_path}/mem/{rel}/state/lcm.sqlite"}
                        for rel in sorted(agents)]
    (tmp_path / "fleet.json").write_text(json.dumps(manifest))
    proc = run_cli("migrate", "--manifest", tmp_path / "fleet.json", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "manifest" not in json.loads(proc.stdout)   # printed only for a discovered dry run
    for rel, src in agents.items():
        assert_whole(src, tmp_path / "mem" / rel / "state" / "lcm.sqlite")


def test_a_tree_without_state_folders_is_bad_input(tmp_path):
    (tmp_path / "tree" / "a").mkdir(parents=True)
    proc = run_cli("migrate", "--discover", tmp_path / "tree", "--dest-root", tmp_path / "mem")
    assert (proc.returncode, proc.stderr) == (2, "lcm-etl: error: --discover found no OpenClaw state folder (a folder "
                                                 "holding lcm.db, or a .openclaw, .openclaw-<profile> or .clawdbot "
                                                 f"folder holding state) under {tmp_path}/tree\n")


def test_discover_needs_its_dest_root_and_excludes_a_manifest(tmp_path):
    alone = run_cli("migrate", "--discover", tmp_path)
    assert (alone.returncode, alone.stderr) == (2, "lcm-etl: error: --discover ROOT and --dest-root DIR go together "
                                                   "(DIR/<rel>/state/lcm.sqlite per state folder)\n")
    both = run_cli("migrate", "--discover", tmp_path, "--dest-root", tmp_path, "--manifest", tmp_path / "m.txt")
    assert (both.returncode, both.stderr) == (2, "lcm-etl: error: --manifest FILE or --discover ROOT names the pairs: "
                                                 "give one of them\n")


def test_each_pair_also_reconciles_its_installations_session_stores_into_the_same_target(tmp_path):
    """A pair is an installation: its lcm.db, then what its agents' transcripts (today's SQLite session stores,
    legacy JSONL) hold beyond it, into the same target."""
    agents = state_tree(tmp_path / "tree")
    carol = agents["host2/team/carol"].parent
    shutil.rmtree(carol / "agents")
    shutil.copytree(ROOT / "fixtures" / "openclaw-sqlite" / "native" / "agents", carol / "agents")
    proc = run_cli("migrate", "--discover", tmp_path / "tree", "--dest-root", tmp_path / "mem", "--json")
    assert proc.returncode == 0, proc.stderr
    pairs = {p["src"]: p for p in json.loads(proc.stdout)["pairs"]}
    store_pair = pairs[str(agents["host2/team/carol"])]
    assert store_pair["transcripts"]["messages"]["inserted"] == 109 + 4   # and the deleted session's archive
    assert len(store_pair["transcripts"]["extra"]["stores"]) == 2
    target = tmp_path / "mem" / "host2" / "team" / "carol" / "state" / "lcm.sqlite"
    sources = {json.loads(r["metadata"])["source"] for r in target_rows(target)}
    assert sources == {"lossless-claw", "openclaw-jsonl"}
    # the JSONL of the other agents is the session their lcm.db already holds or a new one, never a duplicate
    again = run_cli("migrate", "--discover", tmp_path / "tree", "--dest-root", tmp_path / "mem", "--json")
    assert all(p["transcripts"]["messages"]["inserted"] == 0 for p in json.loads(again.stdout)["pairs"])
