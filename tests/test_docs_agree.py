"""What the docs say about the program as a whole is what the program is: docs/cli.md's count and list of commands,
and every one-line description of the sources (package metadata, top-level --help, docs/mapping.md) naming
OpenClaw's session stores beside the JSONL files."""
from __future__ import annotations

import re
import tomllib

from conftest import ROOT, run_cli
from lcm_etl.cli import cli

NUMBERS = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}


def test_docs_cli_md_counts_and_names_the_commands_the_cli_has():
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    said = re.search(r"One click group, (\w+) commands \(([^)]*)\) and `steps`", " ".join(doc.split()))
    assert said is not None, "docs/cli.md no longer opens with the command count"
    named = said.group(2).split(", ")
    assert NUMBERS[said.group(1)] == len(named)
    assert sorted(named + ["steps"]) == sorted(cli.commands)


def test_every_description_of_the_sources_names_session_stores_and_jsonl():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["description"]
    help_text = " ".join(run_cli("--help").stdout.split())
    mapping = " ".join((ROOT / "docs" / "mapping.md").read_text(encoding="utf-8").split("\n\n")[1].split())
    for where, text in (("pyproject.toml", meta), ("--help", help_text), ("docs/mapping.md", mapping)):
        assert "session store" in text and "JSONL" in text, where
