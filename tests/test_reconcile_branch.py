"""reconcile after OpenClaw's in-session `branch()` (docs/mapping.md, "Branches"): a message on the new branch is
imported even when its role and text equal a message of the abandoned branch already imported (a held row with an
entry id never stands in for a path entry with another id: transforms/r20_match.sql), and the rows the branch
left behind stay in the target, marked `off_path` in their metadata, counted by the report and by `audit`."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import run_cli
from storelib import StoreWriter, state_copy, store_of
from undolib import cli_ok, digest

PLAIN = "0198a1b2-0001-7c3d-8e4f-a1b2c3d4e501"   # the native store's plain-chat window: 8 messages on its path
MODEL = {"api": "anthropic-messages", "provider": "anthropic", "model": "claude-sonnet-4-5"}


def reconcile(*args) -> dict:
    proc = run_cli("reconcile", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def said(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}], **MODEL, "stopReason": "stop"}


def tool_call(call_id: str, command: str) -> dict:
    """An assistant turn that only calls a tool: no text, so its identity is the role and empty content."""
    return {"role": "assistant", "content": [{"type": "toolCall", "id": call_id, "name": "exec",
                                              "arguments": {"command": command}}], **MODEL, "stopReason": "toolUse"}


def tool_result(call_id: str, text: str) -> dict:
    return {"role": "toolResult", "toolCallId": call_id, "toolName": "exec",
            "content": [{"type": "text", "text": text}], "isError": False}


def plain(report: dict) -> dict:
    """The report's entry for the plain-chat window."""
    return next(f for f in report["extra"]["files"] if f.get("window") == PLAIN)


def rows(target: Path, session_id: str) -> list[tuple]:
    """(entry id, role, content, off_path) of a target session's messages, in turn order."""
    with sqlite3.connect(target) as con:
        return con.execute(
            "SELECT json_extract(metadata, '$.transcript_entry_id'), role, content, "
            "coalesce(json_extract(metadata, '$.off_path'), 0) FROM lcm_messages WHERE session_id = ? "
            "ORDER BY turn_index", (session_id,)).fetchall()


def metadata(target: Path) -> dict[str, str]:
    """Each transcript row's metadata, as the target holds it, by entry id."""
    with sqlite3.connect(target) as con:
        return dict(con.execute("SELECT json_extract(metadata, '$.transcript_entry_id'), metadata FROM lcm_messages "
                                "WHERE json_extract(metadata, '$.transcript_entry_id') IS NOT NULL").fetchall())


def before_branch(writer: StoreWriter) -> list[str]:
    """u1 a1 u2 a2 r2 a3: u2 is "continue", a2 a tool call with no text."""
    return writer.write(PLAIN, [user("Run the test suite."), said("Which one: unit or integration?"),
                                user("continue"), tool_call("toolu_01A", "npm test"), tool_result("toolu_01A", "12 passed"),
                                said("All 12 unit tests pass.")])


def after_branch(writer: StoreWriter, a1: str) -> list[str]:
    """branch(a1), then u3 a4 r4 a5 of the same shapes: u3 "continue" again, a4 another text-less tool call."""
    return writer.write(PLAIN, [user("continue"), tool_call("toolu_01B", "npm run test:integration"),
                                tool_result("toolu_01B", "3 passed"), said("All 3 integration tests pass.")],
                        parent=a1)


def branched(tmp_path: Path) -> tuple[Path, Path, dict, dict]:
    """The native store reconciled, u1 a1 u2 a2 r2 a3 written and reconciled, then branch(a1) and u3 a4 r4 a5
    written: the store, the target (not reconciled since the branch), and the ids of each."""
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", store, "--dest", target)
    writer = StoreWriter(store)
    try:
        first = dict(zip(("u1", "a1", "u2", "a2", "r2", "a3"), before_branch(writer)))
        assert reconcile("--sessions", store, "--dest", target)["messages"]["inserted"] == 6
        second = dict(zip(("u3", "a4", "r4", "a5"), after_branch(writer, first["a1"])))
    finally:
        writer.close()
    return store, target, first, second


def test_a_message_on_a_new_branch_equal_to_one_of_the_abandoned_branch_is_imported_and_a_second_run_adds_nothing(
        tmp_path):
    store, target, first, second = branched(tmp_path)
    report = reconcile("--sessions", store, "--dest", target)
    assert report["messages"]["inserted"] == 4   # u3 ("continue") and a4 (a text-less tool call) were lost
    assert plain(report)["already_present"] == 8 + 2 and plain(report)["abandoned_branch_entries"] == 4
    assert (report["extra"]["off_path"], report["extra"]["off_path_marked"], report["extra"]["back_on_path"]) == (4, 4, 0)
    assert report["warnings"] == []   # the marks written are counted as planned (no "off_path_marks" warning)
    ids = {**first, **second}
    want = [(ids[k], k in ("u2", "a2", "r2", "a3")) for k in ("u1", "a1", "u2", "a2", "r2", "a3", "u3", "a4", "r4", "a5")]
    assert [(r[0], bool(r[3])) for r in rows(target, PLAIN)[8:]] == want
    again = reconcile("--sessions", store, "--dest", target)
    assert again["messages"]["inserted"] == 0 and plain(again)["already_present"] == 8 + 6
    # a re-run that reads no line of the window plans none of its session: the marks stand, and audit counts them
    assert (again["extra"]["off_path"], again["extra"]["off_path_marked"], again["extra"]["back_on_path"]) == (0, 0, 0)
    assert [(r[0], bool(r[3])) for r in rows(target, PLAIN)[8:]] == want
    audited = json.loads(run_cli("audit", "--sessions", store, "--dest", target, "--json").stdout)
    assert audited["extra"]["transcript_rows_off_path"] == 4


def test_the_text_report_says_how_many_rows_are_off_the_path(tmp_path):
    store, target, _, _ = branched(tmp_path)
    proc = run_cli("reconcile", "--sessions", store, "--dest", target)
    assert proc.returncode == 0, proc.stderr
    assert ("  rows off the active path, kept and marked off_path (a branch left them after they were imported): "
            "4 (4 newly, 0 back on the path)") in proc.stdout.splitlines()


def test_audit_finds_the_new_branch_pending_and_counts_the_abandoned_rows_as_off_the_path_not_missing(tmp_path):
    store, target, _, second = branched(tmp_path)
    pending = run_cli("audit", "--sessions", store, "--dest", target, "--json")
    assert pending.returncode == 3, pending.stderr
    found = json.loads(pending.stdout)
    assert [d["source_id"].rsplit(":", 1)[1] for d in found["differences"]] == list(second.values())
    assert found["extra"]["transcript_messages_pending"] == 4 and found["extra"]["transcript_rows_off_path"] == 4
    reconcile("--sessions", store, "--dest", target)
    clean = run_cli("audit", "--sessions", store, "--dest", target)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "  rows off the active path (kept, marked off_path by reconcile): 4" in clean.stdout.splitlines()


def test_a_branch_back_takes_the_mark_off_the_rows_it_returns_to_the_path_and_marks_the_ones_it_leaves(tmp_path):
    store, target, first, second = branched(tmp_path)
    written = metadata(target)
    reconcile("--sessions", store, "--dest", target)
    assert all(json.loads(metadata(target)[first[k]]) == {**json.loads(written[first[k]]), "off_path": True}
               for k in ("u2", "a2", "r2", "a3"))
    writer = StoreWriter(store)
    try:   # branch(a3): the first branch again, and one more turn on it
        more = writer.write(PLAIN, [user("and the linter?"), said("Clean.")], parent=first["a3"])
    finally:
        writer.close()
    report = reconcile("--sessions", store, "--dest", target)
    assert report["messages"]["inserted"] == 2
    assert (report["extra"]["off_path"], report["extra"]["off_path_marked"], report["extra"]["back_on_path"]) == (4, 4, 4)
    marked = {r[0] for r in rows(target, PLAIN) if r[3]}
    assert marked == set(second.values())
    assert all(metadata(target)[first[k]] == written[first[k]] for k in ("u2", "a2", "r2", "a3"))   # as written
    assert [r[0] for r in rows(target, PLAIN) if not r[3]][-8:] == [*first.values(), *more]


def test_undo_of_the_run_that_marked_rows_off_the_path_restores_their_metadata(tmp_path):
    store, target, _, _ = branched(tmp_path)
    before = digest(target)
    run = reconcile("--sessions", store, "--dest", target)
    assert run["extra"]["off_path_marked"] == 4
    undone = cli_ok("undo", run["run_id"], "--dest", target)
    assert undone["removed"]["messages"] == 4
    assert digest(target) == before


def test_a_watched_target_holds_the_one_shot_targets_rows_on_the_path_and_marks_every_other_row(tmp_path):
    """A watch reconciles after each write; one reconcile of the final store never sees the abandoned branch.
    The watched target's rows on the path are the one-shot target's, in order, and its other rows are marked."""
    from watchlib import Watcher

    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    w = Watcher("reconcile", "--sessions", state, "--dest", target, "--interval", "0.2", tmp=tmp_path / "tmp")
    writer = StoreWriter(store)
    try:
        assert w.next_sync()["messages"]["inserted"] == 109 + 4   # every window, and the deleted session's archive
        first = before_branch(writer)
        assert w.sync_until(lambda s: s["messages"]["inserted"])["messages"]["inserted"] == 6
        a1, left = first[1], first[2:]
        after_branch(writer, a1)
        branch = w.sync_until(lambda s: s["messages"]["inserted"])
        assert (branch["messages"]["inserted"], branch["extra"]["off_path_marked"]) == (4, 4)
        code, err = w.stop()
    finally:
        writer.close()
        w.kill()
    assert code == 0, err
    once = tmp_path / "once.sqlite"
    assert reconcile("--sessions", state, "--dest", once)["extra"]["off_path"] == 0

    def messages(path: Path) -> list[tuple]:
        with sqlite3.connect(path) as con:
            return con.execute(
                "SELECT session_id, json_extract(metadata, '$.transcript_entry_id'), role, content, "
                "json_extract(metadata, '$.off_path') FROM lcm_messages ORDER BY session_id, turn_index").fetchall()
    watched = messages(target)
    assert len(watched) == 113 + 10 and len(messages(once)) == 113 + 6
    assert [m[:4] for m in watched if not m[4]] == [m[:4] for m in messages(once)]
    assert [(m[0], m[1]) for m in watched if m[4]] == [(PLAIN, e) for e in left]
