"""Text a terminal or a JSON parser cannot take (issue 24, item 16): a session id holding a newline or an
escape sequence is shown escaped in the text reports, each row on one line; message text that is not UTF-8
reaches the part payloads as valid JSON (each such byte a \\udcXX escape), and the message content itself
stays byte-exact."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import copy_fixture, make_native_target, run_cli

ODD_SESSION = "evil\nsession\x1b[31m\u202e"   # a newline, a terminal colour sequence, a right-to-left override
SHOWN = "evil\\nsession\\x1b[31m\\u202e"
NOT_UTF8 = b"caf\xe9 \xff\xfe then \xe2\x82 and \x80 end"   # Latin-1, bytes no UTF-8 text holds, a cut sequence


@pytest.fixture
def odd_source(tmp_path) -> Path:
    src = copy_fixture("basic-0.15.3.db", tmp_path / "src")
    con = sqlite3.connect(src)
    with con:
        con.execute("UPDATE conversations SET session_id = ? WHERE conversation_id = 1", (ODD_SESSION,))
        message = con.execute("SELECT min(message_id) FROM message_parts WHERE part_type = 'text' AND message_id IN "
                              "(SELECT message_id FROM messages WHERE conversation_id = 1)").fetchone()[0]
        con.execute("UPDATE messages SET content = CAST(? AS TEXT) WHERE message_id = ?", (NOT_UTF8, message))
        con.execute("UPDATE message_parts SET text_content = CAST(? AS TEXT) WHERE message_id = ? AND part_type = 'text'",
                    (NOT_UTF8, message))
    con.close()
    return src


@pytest.mark.parametrize("target_kind", ["new", "existing"])   # built aside, or written into Remnic's own file
def test_text_that_is_not_utf8_is_copied_byte_exact_and_its_part_payload_is_valid_json(odd_source, tmp_path, target_kind):
    con = sqlite3.connect(odd_source)
    with con:   # the conversation's title too: it goes into each of its messages' metadata
        con.execute("UPDATE conversations SET title = CAST(? AS TEXT) WHERE conversation_id = 1", (NOT_UTF8,))
    con.close()
    target = tmp_path / "out" / "lcm.sqlite"
    if target_kind == "existing":
        make_native_target(target).close()
    proc = run_cli("migrate", "--src", odd_source, "--dest", target, "--json")
    assert proc.returncode == 0, proc.stderr
    con = sqlite3.connect(target)
    try:
        held = con.execute("SELECT count(*) FROM lcm_messages WHERE CAST(content AS BLOB) = ?", (NOT_UTF8,)).fetchone()
        payloads = [r[0] for r in con.execute("SELECT CAST(payload AS BLOB) FROM lcm_message_parts")]
        metadata = [json.loads(r[0]) for r in con.execute("SELECT CAST(metadata AS BLOB) FROM lcm_messages")]
    finally:
        con.close()
    assert held == (1,)   # the content is the source's bytes, as they are
    parsed = [json.loads(p) for p in payloads]   # strict: bytes that are not UTF-8 fail here
    texts = [p["text_content"] for p in parsed if "\udce9" in p.get("text_content", "")]
    assert [t.encode("utf-8", "surrogateescape") for t in texts] == [NOT_UTF8]   # the bytes can be told back
    assert sum((m.get("title") or "").encode("utf-8", "surrogateescape") == NOT_UTF8 for m in metadata) > 1


def test_a_session_id_with_control_characters_is_shown_escaped_on_one_line_in_every_text_report(odd_source, tmp_path):
    target = tmp_path / "out" / "lcm.sqlite"
    shown = {"inspect": run_cli("inspect", "--src", odd_source),
             "migrate": run_cli("migrate", "--src", odd_source, "--dest", target)}
    con = sqlite3.connect(target)
    with con:   # a message of that session lost from the target: audit names the session
        con.execute("DELETE FROM lcm_messages WHERE id = (SELECT max(id) FROM lcm_messages WHERE session_id = ?)",
                    (ODD_SESSION,))
    con.close()
    shown["audit"] = run_cli("audit", "--src", odd_source, "--dest", target)
    for command, proc in shown.items():
        assert proc.returncode == (3 if command == "audit" else 0), proc.stderr
        assert SHOWN in proc.stdout, (command, proc.stdout)
        assert not any(c in proc.stdout for c in "\x1b\u202e\r"), command
        assert not any(line.startswith("session\\x1b") for line in proc.stdout.splitlines()), command
    inspect_rows = [line for line in shown["inspect"].stdout.splitlines() if SHOWN in line]
    assert len(inspect_rows) == 1 and len(inspect_rows[0].split()) == 8   # its row, whole: id and 7 numbers


def test_an_error_naming_a_path_with_an_escape_sequence_shows_it_escaped_on_one_line(tmp_path):
    missing = tmp_path / "lcm\x1b[2J\r.db"   # a clear-screen sequence and a carriage return in a file name
    proc = run_cli("inspect", "--src", missing)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"lcm-etl: error: source not found: {tmp_path}/lcm\\x1b[2J\\r.db "
                           "(pass --src with the path of lossless-claw's lcm.db)\n")
