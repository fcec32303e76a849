"""Source detection: the lossless-claw schema generation of every fixture, `inspect`, and the peer's
test-only source shape (TEXT ids, message_parts kind/payload)."""
from __future__ import annotations

import json
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURE_DIR, FIXTURES, copy_fixture, empty_target, migrate_api, open_db, run_cli
from test_json_schemas import validator

GENERATION = {
    "basic-0.1.0.db": "0.1.x",
    "basic-0.5.0.db": "0.5.x",
    "basic-0.9.4.db": "0.9.x",
    "basic-0.15.3.db": "0.15.2+",
    "basic-1.0.0-beta.4.db": "1.0.0-beta line",
    "multiparent-newest.db": "0.15.2+",
    "shared-session-newest.db": "0.15.2+",
    "wal-newest.db": "0.15.2+",
}


def test_every_fixture_has_an_expected_generation():
    assert sorted(GENERATION) == FIXTURES


@pytest.mark.parametrize("name", FIXTURES)
def test_inspect_detects_the_generation_and_counts_of_each_fixture(name, tmp_path):
    from lcm_etl.commands.inspect import describe

    src = copy_fixture(name, tmp_path)
    info = describe(src).as_dict()     # in-process; the CLI's `inspect --json` is run below
    assert info["generation"].startswith(GENERATION[name]), info["generation"]
    if name != "basic-1.0.0-beta.4.db":
        assert info["generation"] == GENERATION[name]
    facts = json.loads((FIXTURE_DIR / "expected-facts.json").read_text("utf-8"))[name]
    rc = facts["row_counts"]
    assert info["tables"] == {"conversations": rc["conversations"], "messages": rc["messages"],
                              "parts": rc["message_parts"], "summaries": rc["summaries"],
                              "summary_messages": rc["summary_messages"], "summary_parents": rc["summary_parents"]}
    want: dict[str, list] = {}
    for c in facts["conversations"]:
        s = c["session_id"].strip() or str(c["conversation_id"])
        w = want.setdefault(s, [0, 0, 0])
        w[0] += 1
        w[1] += c["messages"]
        w[2] += c["token_sum"]
    got = {s["session_id"]: [s["conversations"], s["messages"], s["token_sum"]] for s in info["sessions"]}
    assert got == want


@pytest.mark.parametrize("name", ["basic-0.1.0.db", "basic-1.0.0-beta.4.db"])
def test_migrate_reports_the_same_generation_as_inspect(name, tmp_path):
    src = copy_fixture(name, tmp_path / "src")
    report = migrate_api(src, tmp_path / "out" / "lcm.sqlite", dry_run=True)
    assert report["source_schema"].startswith(GENERATION[name])


@pytest.mark.parametrize("name", ["basic-0.9.4.db", "shared-session-newest.db", "wal-newest.db"])
def test_inspect_prints_a_readable_description_of_every_fixture(name, tmp_path):
    # shared-session and wal have sessions without summaries (max depth NULL): this once crashed
    src = copy_fixture(name, tmp_path)
    proc = run_cli("inspect", "--src", src)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines()[1].startswith(f"schema: lossless-claw {GENERATION[name]}")


def test_inspect_leaves_the_source_folder_untouched(tmp_path):
    src = copy_fixture("wal-newest.db", tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    proc = run_cli("inspect", "--src", src, "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    info = json.loads(proc.stdout)
    assert info["generation"] == "0.15.2+" and info["tables"]["messages"] == 34   # rows of the -wal included
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# --------------------------------------------------------------------------------------------------
# the peer's own test source shape

PEER_DDL = """
CREATE TABLE conversations (conversation_id TEXT PRIMARY KEY, session_id TEXT, session_key TEXT, title TEXT);
CREATE TABLE messages (message_id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, seq INTEGER NOT NULL,
  role TEXT NOT NULL, content TEXT NOT NULL, token_count INTEGER NOT NULL, identity_hash TEXT, created_at TEXT NOT NULL);
CREATE TABLE summaries (summary_id TEXT PRIMARY KEY, kind TEXT NOT NULL, depth INTEGER NOT NULL,
  content TEXT NOT NULL, token_count INTEGER NOT NULL, earliest_at TEXT, latest_at TEXT);
CREATE TABLE summary_messages (summary_id TEXT NOT NULL, message_id TEXT NOT NULL);
CREATE TABLE summary_parents (summary_id TEXT NOT NULL, parent_summary_id TEXT NOT NULL, ordinal INTEGER NOT NULL);
INSERT INTO conversations VALUES ('conv-A', 'sess-A', NULL, 'topic A'), ('conv-B', NULL, NULL, 'topic B');
INSERT INTO messages VALUES
  ('m-a-1', 'conv-A', 0, 'user', 'hello A', 2, NULL, '2026-04-01T00:00:00.000Z'),
  ('m-a-2', 'conv-A', 1, 'assistant', 'hi A back', 3, NULL, '2026-04-01T00:00:01.000Z'),
  ('m-b-1', 'conv-B', 0, 'user', 'hello B', 2, NULL, '2026-04-01T00:01:00.000Z');
INSERT INTO summaries VALUES ('sum-A', 'leaf', 0, 'summary of A', 4, '2026-04-01T00:00:00.000Z',
  '2026-04-01T00:00:01.000Z');
INSERT INTO summary_messages VALUES ('sum-A', 'm-a-1'), ('sum-A', 'm-a-2');
"""
PARTS_WITH_ORDINAL = """
CREATE TABLE message_parts (message_id TEXT NOT NULL, ordinal INTEGER, kind TEXT, payload TEXT, tool_name TEXT,
  file_path TEXT, created_at TEXT);
INSERT INTO message_parts VALUES
  ('m-a-2', 0, 'tool_call', '{"input":{"cmd":"ls"}}', 'bash', '/tmp/x', '2026-04-01T00:00:01.000Z'),
  ('m-a-2', 1, 'text', '"plain"', NULL, NULL, NULL),
  ('m-b-1', 0, 'weird', 'not json', NULL, NULL, NULL);
"""
PARTS_WITHOUT_ORDINAL = """
CREATE TABLE message_parts (message_id TEXT NOT NULL, kind TEXT, payload TEXT, tool_name TEXT, file_path TEXT,
  created_at TEXT);
INSERT INTO message_parts VALUES ('m-a-2', 'tool_call', '{"a":1}', 'bash', NULL, NULL),
                                 ('m-a-2', 'tool_result', '[1,2]', NULL, 'src/x.py', NULL);
"""


def peer_source(tmp_path, parts_ddl: str):
    path = tmp_path / "peer.db"
    con = sqlite3.connect(path)
    con.executescript(PEER_DDL + parts_ddl)
    con.commit()
    con.close()
    return path


def test_the_peer_test_shape_is_detected_and_its_messages_and_parts_import(tmp_path):
    src = peer_source(tmp_path, PARTS_WITH_ORDINAL)
    dest = tmp_path / "out" / "lcm.sqlite"
    report = migrate_api(src, dest)
    assert report["source_schema"].startswith("peer test shape")
    assert report["sessions_touched"] == ["conv-B", "sess-A"]
    with open_db(dest) as con:
        msgs = [tuple(r) for r in con.execute(
            "SELECT session_id, turn_index, role, content, token_count, created_at FROM lcm_messages "
            "ORDER BY session_id, turn_index")]
        assert msgs == [("conv-B", 0, "user", "hello B", 2, "2026-04-01T00:01:00.000Z"),
                        ("sess-A", 0, "user", "hello A", 2, "2026-04-01T00:00:00.000Z"),
                        ("sess-A", 1, "assistant", "hi A back", 3, "2026-04-01T00:00:01.000Z")]
        meta = json.loads(con.execute("SELECT metadata FROM lcm_messages WHERE content = 'hello A'").fetchone()[0])
        assert (meta["conversation_id"], meta["source_seq"], meta["title"]) == ("conv-A", 0, "topic A")
        parts = [tuple(r) for r in con.execute(
            "SELECT m.content, p.ordinal, p.kind, p.payload, p.tool_name, p.file_path, p.created_at "
            "FROM lcm_message_parts p JOIN lcm_messages m ON m.id = p.message_id ORDER BY m.content, p.ordinal")]
        assert [(c, o, k, json.loads(pl), t, f) for c, o, k, pl, t, f, _ in parts] == [
            ("hello B", 0, "weird", {"value": "not json"}, None, None),
            ("hi A back", 0, "tool_call", {"input": {"cmd": "ls"}}, "bash", "/tmp/x"),
            ("hi A back", 1, "text", {"value": "plain"}, None, None)]
        assert parts[1][6] == "2026-04-01T00:00:01.000Z"
        assert [r[0] for r in con.execute("SELECT tokens_before FROM lcm_compaction_events ORDER BY session_id")] == [2, 5]
    again = migrate_api(src, dest)
    assert again["messages"]["inserted"] == again["parts"]["inserted"] == 0


def test_a_new_target_from_text_message_ids_numbers_its_messages_from_one(tmp_path):
    # TEXT ids cannot be Remnic ids: the new target takes its own sequence (write order), not the source's
    src = peer_source(tmp_path, PARTS_WITH_ORDINAL)
    dest = tmp_path / "out" / "lcm.sqlite"
    migrate_api(src, dest)
    with open_db(dest) as con:
        rows = [(r[0], json.loads(r[1])["source_message_id"]) for r in con.execute(
            "SELECT id, metadata FROM lcm_messages ORDER BY id")]
        assert [r[0] for r in rows] == [1, 2, 3]
        assert all(isinstance(source_id, str) for _, source_id in rows)
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []


def test_peer_shape_parts_without_an_ordinal_are_numbered_in_insertion_order(tmp_path):
    src = peer_source(tmp_path, PARTS_WITHOUT_ORDINAL)
    dest = tmp_path / "out" / "lcm.sqlite"
    migrate_api(src, dest)
    with open_db(dest) as con:
        got = [(r[0], r[1], json.loads(r[2]), r[3]) for r in con.execute(
            "SELECT ordinal, kind, payload, file_path FROM lcm_message_parts ORDER BY ordinal")]
    assert got == [(0, "tool_call", {"a": 1}, None), (1, "tool_result", {"value": [1, 2]}, "src/x.py")]


def test_peer_shape_summaries_without_a_conversation_column_import_into_their_messages_session(tmp_path):
    src = peer_source(tmp_path, PARTS_WITH_ORDINAL)
    dest = tmp_path / "out" / "lcm.sqlite"
    report = migrate_api(src, dest)
    assert report["summaries"]["inserted"] == 1
    with open_db(dest) as con:
        row = con.execute("SELECT session_id, depth, msg_start, msg_end, summary_text FROM lcm_summary_nodes").fetchall()
    assert [tuple(r) for r in row] == [("sess-A", 0, 0, 1, "summary of A")]


PAYLOAD_COLUMNS = ["part_id", "text_content", "is_ignored", "step_cost", "tool_input", "metadata"]
_cell = st.one_of(st.none(), st.text(st.characters(blacklist_categories=("Cs",))), st.integers(min_value=-2**63, max_value=2**63 - 1),
                  st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(*[_cell] * len(PAYLOAD_COLUMNS)), min_size=1, max_size=20))
def test_the_part_payload_has_the_bytes_of_json_patch_over_json_object_for_any_values(rows):
    # the payload is built with printf for speed; it must equal SQLite's own null-dropping JSON object
    from lcm_etl.read.lcmdb.source_schema import _json_object_of_non_null

    con = sqlite3.connect(":memory:")
    con.execute(f"CREATE TABLE p ({', '.join(PAYLOAD_COLUMNS)})")
    con.executemany(f"INSERT INTO p VALUES ({', '.join('?' * len(PAYLOAD_COLUMNS))})", rows)
    patched = "json_patch('{}', json_object(" + ", ".join(f"'{c}', {c}" for c in PAYLOAD_COLUMNS) + "))"
    pairs = con.execute(f"SELECT {patched}, {_json_object_of_non_null(PAYLOAD_COLUMNS)} FROM p").fetchall()
    assert [built for _, built in pairs] == [want for want, _ in pairs]
    for (built, _), row in zip(pairs, rows):
        assert json.loads(built) == {c: v for c, v in zip(PAYLOAD_COLUMNS, row) if v is not None} or \
            any(isinstance(v, float) for v in row)   # SQLite prints reals with 15 significant digits


# --------------------------------------------------------------------------------------------------
# tables a source may lack (issue 24 item 4): one rule for every command

def _without(tmp_path, *tables: str):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    con = sqlite3.connect(src)
    con.execute("PRAGMA foreign_keys=OFF")
    for table in tables:
        con.execute(f"DROP TABLE {table}")
    con.commit()
    con.close()
    return src


COMMANDS = {"inspect": ["inspect"], "migrate": ["migrate", "--dest", "{dest}"],
            "dry-run": ["migrate", "--dry-run", "--dest", "{dest}"], "audit": ["audit", "--dest", "{dest}"],
            "reconcile": ["reconcile", "--sessions", "{sessions}", "--dest", "{dest}"]}


@pytest.mark.parametrize("table", ["summaries", "summary_messages", "summary_parents", "conversations", "messages"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_source_without_a_table_every_lossless_claw_release_has_exits_2_naming_it_in_every_command(
        tmp_path, command, table):
    # migrate exited 2 with DuckDB's "Binder Error: Cannot compare values of type VARCHAR and BIGINT" while
    # inspect accepted the file
    src = _without(tmp_path, table)
    (tmp_path / "sessions").mkdir()
    args = [a.format(dest=tmp_path / "out" / "lcm.sqlite", sessions=tmp_path / "sessions") for a in COMMANDS[command]]
    proc = run_cli(*args, "--src", src)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == (f"lcm-etl: error: source is not a lossless-claw database: {src} lacks the table {table}, "
                           "which every lossless-claw release has; point --src at OpenClaw's lcm.db\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_source_without_the_tables_the_peer_test_shape_may_lack_reads_them_as_empty_in_every_command(
        tmp_path, command):
    src = _without(tmp_path, "message_parts", "large_files")
    (tmp_path / "sessions").mkdir()
    dest = tmp_path / "out" / "lcm.sqlite"
    if command == "audit":   # audit compares with an existing target
        empty_target(dest)
    args = [a.format(dest=dest, sessions=tmp_path / "sessions") for a in COMMANDS[command]]
    proc = run_cli(*args, "--src", src, "--json")
    assert proc.returncode == (3 if command == "audit" else 0), proc.stderr
    assert proc.stderr == ""
    if command == "migrate":
        assert json.loads(proc.stdout)["parts"]["inserted"] == 0
        again = run_cli("audit", "--src", src, "--dest", dest)
        assert again.returncode == 0, again.stdout + again.stderr


# --------------------------------------------------------------------------------------------------
# what a newer lossless-claw adds (issue 24 item 5): kept or said, never dropped without a word

NOTHING_UNKNOWN = {"tables_not_kept": [], "columns_in_metadata": [], "columns_not_kept": []}


def _newer(tmp_path):
    src = copy_fixture("multiparent-newest.db", tmp_path / "src")
    con = sqlite3.connect(src)
    con.executescript("""
        ALTER TABLE messages ADD COLUMN reaction TEXT;
        ALTER TABLE messages ADD COLUMN edit_count INTEGER;
        ALTER TABLE messages ADD COLUMN title TEXT;
        UPDATE messages SET reaction = '👍', edit_count = 2, title = 'not the conversation title'
        WHERE message_id = (SELECT min(message_id) FROM messages);
        ALTER TABLE summaries ADD COLUMN quality REAL;
        ALTER TABLE conversations ADD COLUMN pinned INTEGER;
        CREATE TABLE message_reactions (message_id INTEGER, emoji TEXT);
        INSERT INTO message_reactions VALUES (1, '👍');
        CREATE VIEW reactions_view AS SELECT * FROM message_reactions;
    """)
    con.close()
    return src


WANT_UNKNOWN = {"tables_not_kept": ["message_reactions"],
                "columns_in_metadata": ["messages.edit_count", "messages.reaction"],
                "columns_not_kept": ["conversations.pinned", "messages.title", "summaries.quality"]}


def test_columns_and_tables_of_a_newer_lossless_claw_are_kept_in_metadata_or_listed_in_every_report(tmp_path):
    src = _newer(tmp_path)
    dest = tmp_path / "out" / "lcm.sqlite"
    first = json.loads(run_cli("migrate", "--src", src, "--dest", dest, "--json").stdout)
    assert first["unknown_in_source"] == WANT_UNKNOWN
    validator("migrate").validate(first)
    with open_db(dest) as con:
        metas = [json.loads(r[0]) for r in con.execute("SELECT metadata FROM lcm_messages ORDER BY id")]
    first_id = min(m["source_message_id"] for m in metas)
    held = [m for m in metas if "reaction" in m or "edit_count" in m]
    assert [(m["source_message_id"], m["reaction"], m["edit_count"]) for m in held] == [(first_id, "👍", 2)]
    # a column named like a metadata key lcm-etl writes does not overwrite it: listed as not kept instead
    assert held[0]["title"] != "not the conversation title"
    text = run_cli("migrate", "--src", src, "--dest", tmp_path / "other" / "lcm.sqlite").stdout
    assert ("  source tables lcm-etl does not know (not kept): message_reactions\n"
            "  source columns lcm-etl does not know: messages.edit_count, messages.reaction (kept in message "
            "metadata); conversations.pinned, messages.title, summaries.quality (not kept)\n") in text
    audit = run_cli("audit", "--src", src, "--dest", dest, "--json")
    # an unknown table holding message ids may be history lcm-etl leaves out: a finding, so audit is not clean
    assert audit.returncode == 3, audit.stdout
    assert json.loads(audit.stdout)["unknown_in_source"] == WANT_UNKNOWN
    assert [(f["kind"], f["source_id"], f["detail"]) for f in json.loads(audit.stdout)["differences"]] == [
        ("source table", f"{src}#message_reactions", "columns message_id; a newer lossless-claw's: lcm-etl does not "
                                                     "know it")]
    validator("audit").validate(json.loads(audit.stdout))
    inspected = json.loads(run_cli("inspect", "--src", src, "--json").stdout)
    assert inspected["unknown_in_source"] == WANT_UNKNOWN
    validator("inspect").validate(inspected)
    assert "source tables lcm-etl does not know (not kept): message_reactions" in run_cli("inspect", "--src", src).stdout


def test_a_source_with_only_the_columns_lcm_etl_maps_reports_nothing_unknown(tmp_path):
    src = copy_fixture("basic-1.0.0-beta.4.db", tmp_path / "src")
    report = json.loads(run_cli("migrate", "--src", src, "--dest", tmp_path / "out" / "lcm.sqlite", "--json").stdout)
    assert report["unknown_in_source"] == NOTHING_UNKNOWN
    assert json.loads(run_cli("inspect", "--src", src, "--json").stdout)["unknown_in_source"] == NOTHING_UNKNOWN
