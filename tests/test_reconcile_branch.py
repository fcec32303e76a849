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


def rows(target: Path, session_id: str) -> list[tuple]:
    """(entry id, role, content, off_path) of a target session's messages, in turn order."""
    with sqlite3.connect(target) as con:
        return con.execute(
            "SELECT json_extract(metadata, '$.transcript_entry_id'), role, content, "
            "coalesce(json_extract(metadata, '$.off_path'), 0) FROM lcm_messages WHERE session_id = ? "
            "ORDER BY turn_index", (session_id,)).fetchall()


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


def test_a_message_on_a_new_branch_equal_to_one_of_the_abandoned_branch_is_imported(tmp_path):
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", store, "--dest", target)
    writer = StoreWriter(store)
    try:
        u1, a1, u2, a2, r2, a3 = before_branch(writer)
        assert reconcile("--sessions", store, "--dest", target)["messages"]["inserted"] == 6
        u3, a4, r4, a5 = after_branch(writer, a1)
        report = reconcile("--sessions", store, "--dest", target)
    finally:
        writer.close()
    assert report["messages"]["inserted"] == 4
    assert [r[0] for r in rows(target, PLAIN)[8:]] == [u1, a1, u2, a2, r2, a3, u3, a4, r4, a5]
