"""A watched target and a one-shot target of the same final state hold the same rows:
a message's metadata names its window, never the container it happened to be read from (a live window, a cold
archive, a store's archive row), so it does not depend on when it was read (docs/mapping.md, "Metadata names the
window").

A watch sees an installation's life: each run reads the state folder as it is then, at the same path. Here the
life is two states OpenClaw 2026.9.6 wrote (fixtures/openclaw-hidden/README.md): `evicted/before` then
`evicted/state` (a window evicted into `session_transcript_archives`), and `cold/state` then `cold/restored` (the
cold windows' files embedded as blobs by a backup restore). Target A follows the life, target B reads the final
state once; both are compared row by row, messages and parts, all but the ids the target assigns.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import ROOT, open_db, run_cli

HIDDEN = ROOT / "fixtures" / "openclaw-hidden"
# the window evicted/state no longer holds anywhere: OpenClaw's disk-budget pass deleted its archive for good
# (README, "evicted"); only a target that read it earlier keeps it
DELETED_FOR_GOOD = json.loads((HIDDEN / "expected" / "evicted.before.deleted-early.archive.json").read_text())["sessionId"]
CONTAINER_KEYS = {"seq", "file", "line", "archive", "archive_reason", "cold_storage", "store", "title", "channel",
                  "chat_type", "session_scope", "previous_session_id", "window_reason"}


def reconcile(sessions: Path, target: Path) -> dict:
    proc = run_cli("reconcile", "--sessions", sessions, "--dest", target, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def live_at(state: str, path: Path) -> Path:
    """The installation at `path` as it is in `state` (a watch reads one path whose contents change)."""
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(HIDDEN / state, path)
    return path


def rows(target: Path) -> list[tuple]:
    """Every message with its parts, all but the ids the target assigns."""
    con = open_db(target)
    parts: dict[int, list[tuple]] = {}
    for r in con.execute("SELECT message_id, ordinal, kind, payload, tool_name, file_path, created_at "
                         "FROM lcm_message_parts ORDER BY message_id, ordinal"):
        parts.setdefault(r[0], []).append(tuple(r[1:]))
    out = sorted((r["session_id"], r["turn_index"], r["role"], r["content"], r["token_count"], r["created_at"],
                  r["metadata"], tuple(parts.get(r["id"], ()))) for r in con.execute("SELECT * FROM lcm_messages"))
    con.close()
    return out


@pytest.fixture(scope="module")
def lives(tmp_path_factory):
    """(watched target, one-shot target, second runs' reports) per life."""
    out = {}
    for name, (first, final) in {"evicted": ("evicted/before", "evicted/state"),
                                 "cold": ("cold/state", "cold/restored")}.items():
        tmp = tmp_path_factory.mktemp(name)
        home = tmp / "openclaw"
        watched, once = tmp / "watched.sqlite", tmp / "once.sqlite"
        reconcile(live_at(first, home), watched)
        reconcile(live_at(final, home), watched)
        reconcile(home, once)
        out[name] = (watched, once, reconcile(home, watched), reconcile(home, once))
    return out


def test_an_evicted_window_read_live_then_from_its_archive_holds_the_rows_a_one_shot_of_the_archive_holds(lives):
    watched, once, _, _ = lives["evicted"]
    a, b = rows(watched), rows(once)
    assert len(b) == 94
    # the watch also keeps the window OpenClaw deleted for good before the final state: the target is the archive
    assert [r for r in a if r[0] != DELETED_FOR_GOOD] == b
    assert {r[0] for r in a} - {r[0] for r in b} == {DELETED_FOR_GOOD}


def test_cold_windows_read_from_their_files_then_from_restored_blobs_hold_the_rows_a_one_shot_holds(lives):
    watched, once, _, _ = lives["cold"]
    assert rows(watched) == rows(once)
    assert len(rows(once)) == 113


@pytest.mark.parametrize("life", ["evicted", "cold"])
def test_a_second_run_on_the_final_state_inserts_nothing_into_either_target(lives, life):
    _, _, watched_again, once_again = lives[life]
    for report in (watched_again, once_again):
        assert report["messages"]["inserted"] == 0 and report["boundary_events"] == 0


@pytest.mark.parametrize("life", ["evicted", "cold"])
def test_every_message_of_a_store_names_its_window_and_agent_and_no_container(lives, life):
    watched, _, _, _ = lives[life]
    for r in rows(watched):
        meta = json.loads(r[6])
        assert meta["session_window"] == meta["header_id"] == r[0] and meta["agent_id"] == "main"
        assert not CONTAINER_KEYS & meta.keys(), meta


def test_a_legacy_jsonl_transcript_still_names_its_file_and_line(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    shutil.copy(ROOT / "fixtures" / "sessions" / "plain-chat.jsonl", folder)
    reconcile(folder / "plain-chat.jsonl", tmp_path / "t.sqlite")
    meta = [json.loads(r[6]) for r in rows(tmp_path / "t.sqlite")]
    assert meta and all(m["file"] == str(folder / "plain-chat.jsonl") and isinstance(m["line"], int) for m in meta)
    assert not any("session_window" in m for m in meta)
