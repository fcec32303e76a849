"""What `--sessions` names (lcm_etl/read/openclaw/openclaw_state.py): each way of naming one agent's store finds that store,
and a reconcile through any of them lands the same messages."""
from __future__ import annotations

import json

import pytest

from conftest import run_cli
from lcm_etl.read.openclaw.openclaw_state import find_inputs
from storelib import state_copy, store_of

# how a user may name the main agent's store: the file, the folder holding it, the agent's folder
SPELLINGS = {"store": lambda state: store_of(state, "main"),
             "agent/ folder": lambda state: store_of(state, "main").parent,
             "agent folder": lambda state: state / "agents" / "main"}


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_way_of_naming_an_agents_store_finds_that_store_alone(tmp_path, spelling):
    state = state_copy("native", tmp_path / "state")
    found = find_inputs([SPELLINGS[spelling](state)])
    assert [p.resolve() for p in found.stores] == [store_of(state, "main").resolve()]
    assert found.skipped == []


def test_reconciling_the_folder_that_holds_a_store_lands_what_naming_the_store_lands(tmp_path):
    state = state_copy("native", tmp_path / "state")
    counts = []
    for name, spelling in (("file", SPELLINGS["store"]), ("folder", SPELLINGS["agent/ folder"])):
        proc = run_cli("reconcile", "--json", "--sessions", spelling(state), "--dest", tmp_path / name / "lcm.sqlite")
        assert proc.returncode == 0, proc.stderr
        counts.append(json.loads(proc.stdout)["messages"]["inserted"])
    assert counts[0] > 0 and counts[0] == counts[1]
