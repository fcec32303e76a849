"""reconcile, audit and inspect on OpenClaw's per-agent SQLite session store (OpenClaw 2026.7.2+).

Every fixtures/openclaw-sqlite/expected/*.json is a test: after a reconcile, the target's messages of that session
are exactly the active path OpenClaw 2026.9.6 computed (entry ids, order, roles), each holding the content of the
transcript line whose JSON.stringify hashes to the expected message_sha256.
"""
from __future__ import annotations

import json
import sqlite3
import subprocess

import pytest

from conftest import LCM_ETL, empty_target, folder_state, run_cli, target_rows
from lcm_etl.read.transcript.transcript_blocks import extract_content, without_surrogates
from storelib import (ROLES, StoreWriter, event, expected, js_message_sha256, make_schema_19, octet_length,
                      session_entries, state_copy, store_of)

# messages of a JSONL-era session whose text OpenClaw's doctor rewrote in the store when it imported them (same id,
# new text: a legacy inbound-context label; fixtures/openclaw-sqlite/README.md)
DOCTOR_REWROTE = {"channel-telegram": 4}


def reconcile(*args, env=None) -> dict:
    proc = run_cli("reconcile", "--json", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def reconciled(tmp_path_factory):
    """Each fixture set's state folder, reconciled once with the default discovery ($OPENCLAW_STATE_DIR)."""
    out = {}
    for which in ("native", "imported"):
        tmp = tmp_path_factory.mktemp(which)
        state = state_copy(which, tmp / "state")
        before = folder_state(state)
        target = tmp / "out" / "lcm.sqlite"
        report = reconcile("--dest", target, env={"OPENCLAW_STATE_DIR": str(state)})
        out[which] = (state, target, report, before)
    return out


@pytest.mark.parametrize("case", expected(), ids=lambda e: f"{e['set']}.{e['name']}")
def test_each_window_lands_as_exactly_its_active_path(reconciled, case):
    state, target, _, _ = reconciled[case["set"]]
    got = session_entries(target, case["sessionId"])
    assert [(i, r) for i, r, _ in got] == [(m["id"], ROLES.get(m["role"], m["role"])) for m in case["activePath"]]
    store = store_of(state, case["agentId"])
    for (entry_id, _, content), want in zip(got, case["activePath"]):
        line = event(store, case["sessionId"], entry_id)
        assert js_message_sha256(line["message"]) == want["message_sha256"]
        # lone surrogates have no UTF-8 form: U+FFFD in content, as lossless-claw stores them (transcript/transcripts.py)
        assert content == without_surrogates(extract_content(line["message"]["content"], strip_binary=True))


def test_a_store_read_leaves_every_byte_of_the_state_folder_as_it_was(reconciled):
    for which, (state, _, _, before) in reconciled.items():
        assert folder_state(state) == before, which   # no -shm, no new -wal, no checkpoint of the -wal


def test_the_report_lists_stores_windows_and_the_archives_it_read(reconciled):
    _, _, report, _ = reconciled["native"]
    extra = report["extra"]
    assert report["messages"]["inserted"] == 109 + 4   # every window, and the deleted session's archive
    assert sorted((s["agent_id"], s["user_version"], s["windows"], s["archives"]) for s in extra["stores"]) == [
        ("main", 23, 9, 1), ("ops", 23, 2, 0)]
    assert {(a["reason"], a["session_id"], a["imported"]) for a in extra["archives"]} == {
        ("deleted", "0198a1b2-0009-7c3d-8e4f-a1b2c3d4e509", True)}
    assert len(extra["archives"]) == 2   # the store's row and its published .zst file
    assert {f["projection"] for f in extra["files"] if f["kind"] == "window"} == {"fresh, agrees"}


def test_a_second_run_reads_only_past_each_windows_recorded_seq_and_adds_nothing(reconciled, tmp_path):
    state, target, _, _ = reconciled["native"]
    again = reconcile("--dest", target, env={"OPENCLAW_STATE_DIR": str(state)})
    assert again["messages"]["inserted"] == 0
    assert again["messages"]["already_present"] == 109 + 4   # the archive's row and its file: read whole, held once
    assert {f["read"] for f in again["extra"]["files"] if f["kind"] == "window"} == {"appended"}
    assert again["boundary_events"] == 0


def test_session_key_keeps_a_rewinds_windows_in_one_session_with_each_entry_once(tmp_path):
    state = state_copy("native", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", state, "--dest", target, "--key-by", "session-key")
    cases = {e["name"]: e for e in expected("native")}
    key = cases["rewind"]["sessionKey"]
    got = [i for i, _, _ in session_entries(target, key)]
    previous = [m["id"] for m in cases["rewind.previous"]["activePath"]]
    current = [m["id"] for m in cases["rewind"]["activePath"]]
    assert got == previous + [i for i in current if i not in previous]
    assert len(set(got)) == len(got)
    meta = [json.loads(r["metadata"]) for r in target_rows(target) if r["session_id"] == key]
    assert {m["session_window"] for m in meta} == {cases["rewind.previous"]["sessionId"], cases["rewind"]["sessionId"]}
    assert {m["session_key"] for m in meta} == {key}


def test_window_metadata_names_the_window_and_key_not_the_container_it_was_read_from(reconciled):
    _, target, _, _ = reconciled["native"]
    row = next(r for r in target_rows(target) if r["session_id"] == "0198a1b2-0008-7c3d-8e4f-a1b2c3d4e508")
    meta = json.loads(row["metadata"])
    assert meta["source"] == "openclaw-jsonl"
    assert meta["agent_id"] == "main" and meta["session_window"] == meta["header_id"] == row["session_id"]
    assert meta["session_key"] == "agent:main:telegram:group:-1002233445566"
    assert not {"seq", "file", "line", "store", "cold_storage", "title", "channel", "chat_type"} & meta.keys()


def test_a_default_run_imports_the_deleted_sessions_archive_once(tmp_path):
    state = state_copy("native", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    report = reconcile("--sessions", state, "--dest", target)
    case = next(e for e in expected("native", source=None) if e["name"] == "deleted")
    got = session_entries(target, case["sessionId"])
    assert [(i, r) for i, r, _ in got] == [(m["id"], ROLES.get(m["role"], m["role"])) for m in case["activePath"]]
    assert report["messages"]["inserted"] == 109 + len(got)
    assert all(a["imported"] for a in report["extra"]["archives"])


def test_exclude_deleted_leaves_the_deleted_session_out_and_lists_its_archive(tmp_path):
    state = state_copy("native", tmp_path / "state")
    report = reconcile("--sessions", state, "--dest", tmp_path / "t.sqlite", "--exclude-deleted")
    assert report["messages"]["inserted"] == 109
    assert [a["imported"] for a in report["extra"]["archives"]] == [False, False]   # its row and its file


def test_naming_an_archive_file_imports_it(tmp_path):
    state = state_copy("native", tmp_path / "state")
    archive = next((state / "agents" / "main" / "sessions").glob("*.zst"))
    report = reconcile("--sessions", archive, "--dest", tmp_path / "t.sqlite")
    assert report["messages"]["inserted"] == 4
    assert report["extra"]["archives"][0]["imported"] is True


@pytest.mark.parametrize("first", ["jsonl", "store"])
def test_the_jsonl_era_and_the_store_agree_and_either_order_leaves_each_message_once(tmp_path, first):
    """The doctor's import: its originals (session-sqlite-import-archive/*.imported-*) and the store it wrote."""
    state = state_copy("imported", tmp_path / "state")
    originals = state / "agents" / "main" / "session-sqlite-import-archive"
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    runs = {"jsonl": ("--sessions", originals), "store": ("--sessions", store)}
    order = [first, "store" if first == "jsonl" else "jsonl"]
    one = reconcile(*runs[order[0]], "--dest", target)
    two = reconcile(*runs[order[1]], "--dest", target)
    assert one["messages"]["inserted"] == 85
    assert two["messages"]["inserted"] == 0
    # the doctor rewrote 4 channel-telegram messages in place (same id, new label): counted, never duplicated
    assert two["extra"]["rewritten_in_place"] == 4
    for case in expected("imported"):
        got = session_entries(target, case["sessionId"])
        assert [i for i, _, _ in got] == [m["id"] for m in case["activePath"]]


def test_a_store_changed_by_a_live_gateway_syncs_appends_and_rereads_a_rewritten_window(tmp_path):
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    env = {"OPENCLAW_STATE_DIR": str(state)}
    reconcile("--dest", target, env=env)
    plain, group = "0198a1b2-0001-7c3d-8e4f-a1b2c3d4e501", "0198a1b2-0008-7c3d-8e4f-a1b2c3d4e508"
    writer = StoreWriter(store)
    try:
        new = writer.append(plain, ["one more question", "one more answer"])
        first_user = session_entries(target, group)[0]
        writer.rewrite(group, first_user[0], "Conversation info (untrusted metadata):", "Conversation info: ⟦x⟧")
        report = reconcile("--dest", target, env=env)
    finally:
        writer.close()
    assert report["messages"]["inserted"] == 2
    reads = {f.get("window"): f["read"] for f in report["extra"]["files"]}
    assert reads[plain] == "appended" and reads[group] == "whole"   # the watermark moved: read whole
    assert report["extra"]["rewritten_in_place"] == 1
    assert [i for i, _, _ in session_entries(target, plain)][-2:] == new
    assert session_entries(target, group)[0] == first_user            # kept as imported
    fresh = tmp_path / "fresh.sqlite"
    reconcile("--dest", fresh, env=env)
    for sid in (plain, group):
        assert [i for i, _, _ in session_entries(fresh, sid)] == [i for i, _, _ in session_entries(target, sid)]


def test_a_schema_19_store_with_a_stale_materialized_path_is_read_by_walking_the_tree(tmp_path):
    state = state_copy("imported", tmp_path / "state")
    make_schema_19(store_of(state, "main"))
    target = tmp_path / "t.sqlite"
    report = reconcile("--sessions", state, "--dest", target)
    assert report["extra"]["stores"][0]["user_version"] == 19
    assert report["extra"]["stores"][0]["compressed_rows"] is False
    assert {f["projection"] for f in report["extra"]["files"] if f["kind"] == "window"} == {"stale"}
    for case in expected("imported"):
        assert [i for i, _, _ in session_entries(target, case["sessionId"])] == [m["id"] for m in case["activePath"]]


def test_a_newer_store_with_the_columns_needed_is_read(tmp_path):
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "ops")
    con = sqlite3.connect(store)
    con.execute("ALTER TABLE transcript_events ADD COLUMN future_column TEXT")
    con.execute("CREATE TABLE future_table (x)")
    con.execute("PRAGMA user_version = 31")
    con.commit()
    con.close()
    report = reconcile("--sessions", store, "--dest", tmp_path / "t.sqlite")
    assert report["extra"]["stores"][0]["user_version"] == 31
    assert report["messages"]["inserted"] == 10


def _bad_store(kind: str, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "not-openclaw":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE notes (x)")
        con.commit()
        con.close()
    elif kind == "truncated":
        data = store_of(state_copy("imported", path.parent / "full"), "main").read_bytes()
        path.write_bytes(data[: len(data) // 3])
    elif kind == "no-transcript-events":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE schema_meta (meta_key, role, schema_version, agent_id)")
        con.execute("CREATE TABLE session_windows (session_id)")
        con.commit()
        con.close()
    elif kind == "no-event-json":
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE transcript_events (session_id, seq, body)")
        con.execute("PRAGMA user_version = 40")
        con.commit()
        con.close()


@pytest.mark.parametrize("kind, message", [
    ("not-openclaw", "lcm-etl: error: session store {p} holds no transcript_events table (not an OpenClaw session "
                     "store); pass --sessions with an agents/<id>/agent/openclaw-agent.sqlite, an agent folder, a state "
                     "folder or a JSONL file"),
    ("no-transcript-events", "lcm-etl: error: session store {p} holds no transcript_events table (an OpenClaw agent "
                             "database of another kind); pass --sessions with an agents/<id>/agent/openclaw-agent.sqlite,"
                             " an agent folder, a state folder or a JSONL file"),
    ("no-event-json", "lcm-etl: error: session store {p} (user_version 40) lacks transcript_events.event_json, which "
                      "lcm-etl needs to read its transcripts; nothing was written"),
    ("truncated", "lcm-etl: error: session store is not a readable SQLite database: {p} ("),
])
def test_a_bad_store_is_exit_2_with_one_line_and_nothing_written(tmp_path, kind, message):
    store = tmp_path / "agent" / "openclaw-agent.sqlite"
    _bad_store(kind, store)
    target = tmp_path / "out" / "t.sqlite"
    proc = run_cli("reconcile", "--sessions", store, "--dest", target)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(message.format(p=store)), proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not target.exists() and not target.parent.exists()


def test_a_store_locked_by_a_writer_mid_transaction_is_read_as_of_its_last_commit(tmp_path):
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "ops")
    writer = StoreWriter(store)
    try:
        writer.con.execute("BEGIN EXCLUSIVE")
        writer.con.execute("DELETE FROM transcript_events")   # uncommitted: never seen
        report = reconcile("--sessions", store, "--dest", tmp_path / "t.sqlite")
    finally:
        writer.con.execute("ROLLBACK")
        writer.close()
    assert report["messages"]["inserted"] == 10


def test_audit_sessions_finds_the_store_pending_then_clean(tmp_path):
    state = state_copy("native", tmp_path / "state")
    target = empty_target(tmp_path / "t.sqlite")
    env = {"OPENCLAW_STATE_DIR": str(state)}
    before = run_cli("audit", "--dest", target, "--json", env=env)
    assert before.returncode == 3, before.stderr
    assert json.loads(before.stdout)["extra"]["transcript_messages_pending"] == 109 + 4   # and the deleted archive
    reconcile("--dest", target, env=env)
    after = run_cli("audit", "--sessions", state, "--dest", target)
    assert after.returncode == 0, after.stdout + after.stderr
    assert after.stdout.startswith("lcm-etl audit: CLEAN")


def test_inspect_describes_a_session_store(tmp_path):
    state = state_copy("native", tmp_path / "state")
    proc = run_cli("inspect", "--src", store_of(state, "main"), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["kind"] == "openclaw-session-store" and info["user_version"] == 23 and info["agent_id"] == "main"
    windows = {w["session_id"]: w for w in info["windows"]}
    assert windows["0198a1b2-0007-7c3d-8e4f-a1b2c3d4e507"]["messages_on_path"] == 20
    assert windows["0198a1b2-0005-7c3d-8e4f-a1b2c3d4e505"]["compressed_rows"] == 1
    assert [a["reason"] for a in info["archives"]] == ["deleted"]


def test_reconcile_watch_follows_a_gateway_writing_the_store_and_ends_equal_to_one_reconcile(tmp_path):
    from watchlib import Watcher

    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    plain, group = "0198a1b2-0001-7c3d-8e4f-a1b2c3d4e501", "0198a1b2-0008-7c3d-8e4f-a1b2c3d4e508"
    w = Watcher("reconcile", "--sessions", state, "--dest", target, "--interval", "0.2", tmp=tmp_path / "tmp")
    writer = StoreWriter(store)   # holds the store open: its commits stay in the -wal, as a running gateway's do
    try:
        assert w.next_sync()["messages"]["inserted"] == 109 + 4   # and the deleted session's archive
        writer.append(plain, ["are you there?", "yes"])
        assert w.sync_until(lambda s: s["messages"]["inserted"])["messages"]["inserted"] == 2
        writer.append(group, ["one", "two", "three"])
        first_user = session_entries(target, group)[0][0]
        writer.rewrite(group, first_user, "Conversation info (untrusted metadata):", "Conversation info: ⟦x⟧")
        third = w.sync_until(lambda s: s["messages"]["inserted"] or s["extra"]["rewritten_in_place"])
        if third["messages"]["inserted"] < 3:   # the append and the rewrite may land in two syncs
            w.sync_until(lambda s: s["extra"]["rewritten_in_place"])
        code, err = w.stop()
    finally:
        writer.close()
        w.kill()
    assert code == 0, err
    once = tmp_path / "once.sqlite"
    reconcile("--sessions", state, "--dest", once)
    for case in expected("native"):
        sid = case["sessionId"]
        assert [i for i, _, _ in session_entries(target, sid)] == [i for i, _, _ in session_entries(once, sid)]


def test_a_window_read_again_whole_replaces_its_rows_in_the_run_file(tmp_path):
    """Every window goes into the run file as it is read (lcm_etl/read/sessions/run_file.py); one read again whole (settle,
    under the lock) has its rows replaced by the new read's, in its place: the same message ids, nothing twice."""
    from lcm_etl.read.sessions.transcript_reading import ReadOptions, read_all

    state = state_copy("native", tmp_path / "state")
    reading = read_all(ReadOptions(sessions=[str(state)]))
    try:
        def rows():
            return reading.run.query("SELECT message_id, session_id, entry_id, content, metadata FROM jsonl_messages "
                                     "LEFT JOIN jsonl_content USING (message_id) ORDER BY 1").fetchall(), \
                reading.run.query("SELECT count(*) FROM jsonl_parts").fetchone()[0]
        before = rows()
        assert before[0] and all(r[3] is not None for r in before[0])   # content written as read
        reading.read_whole({0: "a cause", 3: "another"})
        assert rows() == before
        assert reading.run.query("SELECT file_order, read, why FROM transcripts WHERE why LIKE 'a%' ORDER BY 1"
                                 ).fetchall() == [(0, "whole", "a cause"), (3, "whole", "another")]
    finally:
        reading.close()

def _scan(entries: list[dict]) -> list[str]:
    """The message ids on the active path of a window of these entries (OpenClaw 2026.7.2+'s scan rules)."""
    from pathlib import Path

    from lcm_etl.read.transcript.transcripts import parse_transcript

    lines = [(0, json.dumps({"type": "session", "version": 4, "id": "w"}).encode())]
    lines += [(seq, json.dumps(e).encode()) for seq, e in enumerate(entries, 1)]
    return [m.entry_id for m in parse_transcript(Path("store"), lines, store_rules=True).messages]


def _msg(eid: str, parent: str | None, **extra) -> dict:
    return {"type": "message", "id": eid, "parentId": parent, "message": {"role": "user", "content": eid}, **extra}


def test_after_a_reset_an_entry_hung_below_what_the_reset_closed_continues_from_the_leaf():
    entries = [_msg("a", None), _msg("b", "a"), {"type": "reset", "id": "r", "parentId": "b", "reason": "new"},
               _msg("c", "r"), _msg("late", "a")]   # a late write whose parent is before the reset
    assert _scan(entries) == ["a", "b", "c", "late"]


def test_a_side_entry_and_a_side_leaf_control_do_not_move_the_leaf():
    entries = [_msg("a", None), _msg("b", "a"), _msg("side", "a", appendMode="side"),
               {"type": "leaf", "id": "l", "parentId": "b", "targetId": "a", "appendMode": "side"}]
    assert _scan(entries) == ["a", "b"]
    rewound = entries[:3] + [{"type": "leaf", "id": "l", "parentId": "b", "targetId": "a"}, _msg("c", "l")]
    assert _scan(rewound) == ["a", "c"]


def test_a_missing_parent_continues_from_the_leaf_in_a_store_and_from_the_line_before_in_a_jsonl_file():
    from pathlib import Path

    from lcm_etl.read.transcript.transcripts import parse_transcript

    entries = [_msg("a", None), _msg("b", "a"), _msg("side", "b", appendMode="side"), _msg("c", "gone")]
    assert _scan(entries) == ["a", "b", "c"]
    lines = [(n, json.dumps(e).encode()) for n, e in enumerate([{"type": "session", "version": 3, "id": "w"}]
                                                                 + entries, 1)]
    jsonl = parse_transcript(Path("w.jsonl"), lines)   # OpenClaw 2026.7.1: the entry before it in file order
    assert [m.entry_id for m in jsonl.messages] == ["a", "b", "side", "c"]


def test_a_dry_run_on_a_store_reports_what_a_run_would_write_and_creates_nothing(tmp_path):
    state = state_copy("native", tmp_path / "state")
    before = folder_state(state)
    target = tmp_path / "out" / "t.sqlite"
    report = reconcile("--sessions", state, "--dest", target, "--dry-run")
    assert report["messages"]["inserted"] == 109 + 4 and report["dry_run"] is True
    assert not target.parent.exists()
    assert folder_state(state) == before


def test_a_store_named_through_a_symlink_or_a_relative_path_is_read_from_its_record(tmp_path):
    state = state_copy("native", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", store_of(state, "ops"), "--dest", target)
    (tmp_path / "link").symlink_to(state / "agents" / "ops")
    again = subprocess.run([str(LCM_ETL), "reconcile", "--json", "--sessions", "agent/openclaw-agent.sqlite",
                            "--dest", str(target)], capture_output=True, text=True, cwd=tmp_path / "link")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["messages"]["inserted"] == 0
    assert {f["read"] for f in report["extra"]["files"]} == {"appended"}


def test_a_store_locked_mid_transaction_in_rollback_journal_mode_is_exit_2_and_nothing_is_written(tmp_path):
    """A WAL store is read as of its last commit (above); a rollback-journal store whose journal is live holds
    pages of a transaction that is not committed, which a read-only reader cannot roll back."""
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "ops")
    con = sqlite3.connect(store, isolation_level=None)
    con.execute("PRAGMA journal_mode=DELETE")
    con.execute("PRAGMA cache_size=1")          # the writer spills its changed pages into the main file
    con.create_function("octet_length", 1, octet_length)   # OpenClaw's CHECKs call it (storelib.StoreWriter)
    con.execute("BEGIN EXCLUSIVE")
    con.execute("UPDATE transcript_events SET created_at = created_at + 1")
    try:
        assert (store.parent / "openclaw-agent.sqlite-journal").exists()
        target = tmp_path / "out" / "t.sqlite"
        proc = run_cli("reconcile", "--sessions", store, "--dest", target)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == (f"lcm-etl: error: session store {store} is locked by a writer in the middle of a "
                               "transaction (its rollback journal openclaw-agent.sqlite-journal is live); run again "
                               "once OpenClaw is idle; nothing was written\n")
        assert not target.parent.exists()
    finally:
        con.execute("ROLLBACK")
        con.close()
    assert reconcile("--sessions", store, "--dest", tmp_path / "after.sqlite")["messages"]["inserted"] == 10


def test_the_run_file_holds_a_row_per_transcript_and_its_messages(tmp_path):
    """What a read leaves is the run file: one row per transcript (11 windows and 2 archives: the deleted session's
    row and its published file, 4 messages each) and its messages; Python keeps none of them."""
    from lcm_etl.read.sessions.transcript_reading import ReadOptions, read_all

    state = state_copy("native", tmp_path / "state")
    reading = read_all(ReadOptions(sessions=[str(state)]))
    try:
        kinds = dict(reading.run.query("SELECT kind, count(*) FROM transcripts GROUP BY 1").fetchall())
        assert kinds == {"window": 11, "archive": 2} and reading.run.count == 13
        assert reading.run.query("SELECT count(*) FROM jsonl_messages").fetchone()[0] == 109 + 2 * 4
        assert reading.run.query("SELECT sum(read_count) FROM transcripts").fetchone()[0] == 109 + 2 * 4
    finally:
        reading.close()