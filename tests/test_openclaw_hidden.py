"""reconcile and audit on the history OpenClaw 2026.9.6 keeps outside its live transcript rows: cold windows (a file in
sessions/cold/, or a blob after a backup restore), windows evicted for disk space and deleted sessions (archives),
the doctor's archive-tier leftovers and a pending input (fixtures/openclaw-hidden/README.md, written by OpenClaw's
own code).

Every fixtures/openclaw-hidden/expected/*.json of these state folders is a test: after one default reconcile the
target holds that window's (or archive's) active path as OpenClaw computed it, in order, each entry once.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, empty_target, run_cli, target_rows
from storelib import ROLES, octet_length, session_entries

HIDDEN = ROOT / "fixtures" / "openclaw-hidden"
# state folder -> the expected files that describe it (prefix), less those of another folder of the same case
CASES = {"cold/state": ("cold.", "cold.restored."), "cold/restored": ("cold.restored.", None),
         "evicted/before": ("evicted.before.", None), "evicted/state": ("evicted.", "evicted.before."),
         "archive-tier/state": ("archive-tier.", None), "pending/state": ("pending.", "pending.pending-inputs")}
PENDING = json.loads((HIDDEN / "expected" / "pending.pending-inputs.json").read_text())["rows"][0]


def cases() -> list[tuple[str, dict]]:
    out = []
    for state, (prefix, other) in CASES.items():
        for f in sorted((HIDDEN / "expected").glob(f"{prefix}*.json")):
            if other is None or not f.name.startswith(other):
                out.append((state, {**json.loads(f.read_text()), "file": f.name}))
    return out


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under a folder with its bytes: a read must leave all of them as they were, and add none."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_state(state: str, into: Path) -> Path:
    shutil.copytree(HIDDEN / state, into)
    for p in into.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return into


def cli_json(*args) -> dict:
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def reconciled(tmp_path_factory):
    """Each state folder reconciled once with default options, then again; audit before, between and after."""
    out = {}
    for state in CASES:
        tmp = tmp_path_factory.mktemp(state.replace("/", "-"))
        copy = copy_state(state, tmp / "state")
        before = tree(copy)
        target = tmp / "t.sqlite"
        empty = run_cli("audit", "--sessions", copy, "--dest", empty_target(tmp / "empty.sqlite"))
        first = cli_json("reconcile", "--sessions", copy, "--dest", target)
        second = cli_json("reconcile", "--sessions", copy, "--dest", target)
        audited = run_cli("audit", "--sessions", copy, "--dest", target)
        out[state] = {"state": copy, "target": target, "before": before, "first": first, "second": second,
                      "empty": empty, "audited": audited}
    return out


@pytest.mark.parametrize("state,case", cases(), ids=lambda v: v["file"] if isinstance(v, dict) else v)
def test_each_window_and_archive_lands_as_its_active_path_each_entry_once(reconciled, state, case):
    target = reconciled[state]["target"]
    got = [(i, r) for i, r, _ in session_entries(target, case["sessionId"]) if i is not None]
    assert got == [(m["id"], ROLES.get(m["role"], m["role"])) for m in case["activePath"]]


@pytest.mark.parametrize("state", CASES)
def test_a_second_run_adds_nothing_and_reads_no_archive_again(reconciled, state):
    second = reconciled[state]["second"]
    assert second["messages"]["inserted"] == 0 and second["boundary_events"] == 0
    archives = [f for f in second["extra"]["files"] if f["kind"] == "archive"]
    assert all(f["read"] == "appended" and f["lines_read"] == 0 for f in archives)


@pytest.mark.parametrize("state", CASES)
def test_the_state_folder_is_left_byte_for_byte_with_nothing_added(reconciled, state):
    assert tree(reconciled[state]["state"]) == reconciled[state]["before"]


@pytest.mark.parametrize("state", CASES)
def test_audit_is_pending_on_an_empty_target_and_clean_once_reconciled(reconciled, state):
    empty, audited = reconciled[state]["empty"], reconciled[state]["audited"]
    assert empty.returncode == 3, empty.stderr
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert audited.stdout.startswith("lcm-etl audit: CLEAN")


def test_cold_windows_are_read_from_their_archive_and_say_so(reconciled):
    report = reconciled["cold/state"]["first"]
    cold = [f for f in report["extra"]["files"] if f.get("cold")]
    assert sorted(f["messages_on_path"] for f in cold) == [6, 8, 8, 10, 21]
    assert {f["cold"] for f in cold} == {"file"}
    assert all("/sessions/cold/" in f["file"] and f["file"].endswith(".jsonl.zst") for f in cold)
    assert [(s["windows"], s["cold_windows"]) for s in report["extra"]["stores"]] == [(9, 5)]
    assert report["extra"]["transcripts_by_where"] == {"cold window (file)": 5, "live window": 4}
    restored = reconciled["cold/restored"]["first"]
    assert {f["cold"] for f in restored["extra"]["files"] if f.get("cold")} == {"sqlite"}


@pytest.mark.parametrize("state,where", [
    ("cold/state", {"cold window (file)": 53, "live window": 60}),
    ("cold/restored", {"cold window (blob in the store)": 53, "live window": 60}),
    ("evicted/state", {"deleted archive (store row)": 18, "live window": 76}),
    ("archive-tier/state", {"archive-tier file": 8 + 11, "live window": 65}),
    ("pending/state", {"pending input": 1, "live window": 14})])
def test_audit_names_where_the_missing_history_lives(tmp_path, state, where):
    copy = copy_state(state, tmp_path / "state")
    proc = run_cli("audit", "--sessions", copy, "--dest", empty_target(tmp_path / "t.sqlite"), "--json")
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["extra"]["transcript_messages_pending_by_where"] == where


def test_a_cold_archive_that_fails_verification_is_a_finding_naming_its_file(tmp_path):
    state = copy_state("cold/state", tmp_path / "state")
    bad = next((state / "agents" / "main" / "sessions" / "cold").glob("b9a5*.jsonl.zst"))
    bad.write_bytes(bad.read_bytes()[:-1] + b"\0")   # same length, one byte changed: the SHA-256 differs
    target = tmp_path / "t.sqlite"
    report = cli_json("reconcile", "--sessions", state, "--dest", target)
    assert report["messages"]["inserted"] == 113 - 8   # every other window lands
    assert any(str(bad) in w and "failed verification" in w for w in report["warnings"])
    audited = run_cli("audit", "--sessions", state, "--dest", target, "--json")
    assert audited.returncode == 3
    findings = json.loads(audited.stdout)["differences"]
    assert [(f["kind"], f["source_id"]) for f in findings] == [("cold archive", str(bad))]
    assert findings[0]["problem"].startswith("failed verification (2377 bytes, 2377 recorded; SHA-256 differs)")


def test_a_missing_cold_file_is_a_finding_too(tmp_path):
    state = copy_state("cold/state", tmp_path / "state")
    gone = next((state / "agents" / "main" / "sessions" / "cold").glob("b9a5*.jsonl.zst"))
    gone.unlink()
    audited = run_cli("audit", "--sessions", state, "--dest", empty_target(tmp_path / "t.sqlite"), "--json")
    assert audited.returncode == 3
    finding = next(f for f in json.loads(audited.stdout)["differences"] if f["kind"] == "cold archive")
    assert finding["source_id"] == str(gone) and finding["problem"].startswith("missing or unreadable")


def test_the_pending_input_lands_at_the_end_of_its_window_marked_pending(reconciled):
    target = reconciled["pending/state"]["target"]
    rows = [r for r in target_rows(target) if r["session_id"] == PENDING["session_id"]]
    last = rows[-1]
    assert (last["role"], last["content"]) == ("user", PENDING["message"]["content"])
    meta = json.loads(last["metadata"])
    assert meta["pending_input"] == PENDING["input_id"] and meta["pending_state"] == "queued"
    assert meta["idempotencyKey"] == PENDING["idempotency_key"] and "transcript_entry_id" not in meta
    files = reconciled["pending/state"]["first"]["extra"]["files"]
    assert [f["kind"] for f in files].count("pending input") == 1


def test_a_pending_input_that_openclaw_writes_later_stays_one_message(tmp_path):
    """OpenClaw writes the input as its turn runs (an entry with its own id, carrying the idempotency key) and deletes
    the row: the next run holds the message already, by identity, and adds nothing."""
    state = copy_state("pending/state", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    cli_json("reconcile", "--sessions", state, "--dest", target)
    store = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    con = sqlite3.connect(store, isolation_level=None)
    con.create_function("octet_length", 1, octet_length, deterministic=True)   # OpenClaw's CHECKs call it
    sid = PENDING["session_id"]
    seq, parent = con.execute("SELECT seq, json_extract(event_json, '$.id') FROM transcript_events "
                              "WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (sid,)).fetchone()
    eid = str(uuid.uuid4())
    line = json.dumps({"type": "message", "id": eid, "parentId": parent, "timestamp": "2026-08-22T07:45:01.000Z",
                       "message": PENDING["message"]}, separators=(",", ":"), ensure_ascii=False)
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO transcript_events (session_id, seq, event_json, created_at) VALUES (?, ?, ?, ?)",
                (sid, seq + 1, line, 1787384701000))
    con.execute("INSERT INTO transcript_event_identities (session_id, event_id, seq, event_type, parent_id, "
                "message_idempotency_key, created_at) VALUES (?, ?, ?, 'message', ?, ?, ?)",
                (sid, eid, seq + 1, parent, PENDING["idempotency_key"], 1787384701000))
    con.execute("DELETE FROM session_pending_inputs WHERE input_id = ?", (PENDING["input_id"],))
    con.execute("COMMIT")
    con.close()
    again = cli_json("reconcile", "--sessions", state, "--dest", target)
    assert again["messages"]["inserted"] == 0
    assert [c for _, _, c in session_entries(target, sid)].count(PENDING["message"]["content"]) == 1
    assert run_cli("audit", "--sessions", state, "--dest", target).returncode == 0


def test_exclude_deleted_leaves_out_a_deleted_session_but_not_an_evicted_window(tmp_path):
    deleted = copy_state("evicted/before", tmp_path / "before")
    report = cli_json("reconcile", "--sessions", deleted, "--dest", tmp_path / "b.sqlite", "--exclude-deleted")
    assert report["messages"]["inserted"] == 94   # the live windows; the deleted session's 8 left out, and listed
    assert {(a["reason"], a["imported"]) for a in report["extra"]["archives"]} == {("deleted", False)}
    evicted = copy_state("evicted/state", tmp_path / "state")
    report = cli_json("reconcile", "--sessions", evicted, "--dest", tmp_path / "s.sqlite", "--exclude-deleted")
    assert report["messages"]["inserted"] == 76 + 18   # telegram gen1, evicted for disk space: its session lives on


def test_an_unknown_table_holding_session_rows_in_a_newer_store_is_a_finding(tmp_path):
    state = copy_state("pending/state", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    cli_json("reconcile", "--sessions", state, "--dest", target)
    store = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    con = sqlite3.connect(store)
    con.execute("CREATE TABLE session_transcript_drafts (session_id TEXT, message_json TEXT)")   # a newer release's
    con.execute("CREATE TABLE gateway_metrics (name TEXT, value REAL)")   # holds no session rows: not a finding
    con.commit()
    con.close()
    report = cli_json("reconcile", "--sessions", state, "--dest", target)
    assert [w for w in report["warnings"] if "session_transcript_drafts" in w] == [
        f"session store table {store}#session_transcript_drafts: unknown, holds session rows: not read; columns "
        "message_json, session_id; a newer OpenClaw's (user_version 23): lcm-etl does not know it"]
    audited = run_cli("audit", "--sessions", state, "--dest", target, "--json")
    assert audited.returncode == 3
    assert [f["source_id"] for f in json.loads(audited.stdout)["differences"]] == [
        f"{store}#session_transcript_drafts"]


def test_turns_written_after_the_last_sync_of_a_session_then_deleted_land_from_its_archive(tmp_path):
    """`sessions.delete` (archiveTranscript): the window's rows become one zstd JSONL `session_transcript_archives`
    row in the transaction that deletes the window and its node. Turns a watcher had not synced yet exist only there:
    a default run imports them into the session it already holds, each once."""
    import hashlib

    import zstandard

    from storelib import STORE_FIXTURES, StoreWriter

    state = tmp_path / "state"
    shutil.copytree(STORE_FIXTURES / "native", state)
    for p in state.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    store = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    target = tmp_path / "t.sqlite"
    cli_json("reconcile", "--sessions", state, "--dest", target)
    plain = "0198a1b2-0001-7c3d-8e4f-a1b2c3d4e501"
    before = session_entries(target, plain)
    writer = StoreWriter(store)
    late = writer.append(plain, ["one more thing before I go", "noted"])
    con = writer.con
    con.execute("BEGIN IMMEDIATE")
    key = con.execute("SELECT session_key FROM session_windows WHERE session_id = ?", (plain,)).fetchone()[0]
    lines = [r[0] for r in con.execute("SELECT event_json FROM transcript_events WHERE session_id = ? ORDER BY seq",
                                       (plain,))]
    blob = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(("\n".join(lines) + "\n").encode())
    generation = uuid.uuid4().hex
    con.execute("INSERT INTO session_transcript_archives (session_id, generation, session_key, reason, encoding, "
                "archive_blob, archive_sha256, archive_name, created_at) VALUES (?, ?, ?, 'deleted', 'zstd', ?, ?, ?, ?)",
                (plain, generation, key, blob, hashlib.sha256(blob).hexdigest(),
                 f"{plain}.jsonl.deleted.2026-11-26T10-00-00.000Z.{generation}.zst", 1795600000000))
    for table in ("transcript_event_identities", "session_transcript_active_events", "session_transcript_index_state",
                  "transcript_rewrite_watermarks", "transcript_events"):
        con.execute(f"DELETE FROM {table} WHERE session_id = ?", (plain,))
    con.execute("DELETE FROM session_nodes WHERE session_key = ?", (key,))
    con.execute("DELETE FROM session_windows WHERE session_id = ?", (plain,))
    con.execute("COMMIT")
    writer.close()
    again = cli_json("reconcile", "--sessions", state, "--dest", target)
    assert again["messages"]["inserted"] == 2
    assert [i for i, _, _ in session_entries(target, plain)] == [i for i, _, _ in before] + late
    assert run_cli("audit", "--sessions", state, "--dest", target).returncode == 0
    assert cli_json("reconcile", "--sessions", state, "--dest", target)["messages"]["inserted"] == 0


def test_a_reconciles_elapsed_and_started_at_count_reading_the_transcripts(tmp_path, monkeypatch):
    """Reading is most of a first run of a large store: the report's elapsed and the ledger's started_at include it,
    and the report says how many write batches the run took."""
    import time
    from datetime import datetime

    from lcm_etl.commands import reconcile as command

    state = copy_state("pending/state", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    real = command.read_all

    def slow(*args, **kwargs):
        time.sleep(0.6)
        return real(*args, **kwargs)

    monkeypatch.setattr(command, "read_all", slow)
    before = datetime.now().astimezone()
    report = command.reconcile(command.ReconcileOptions(sessions=[str(state)], target=target))
    assert report.elapsed_s >= 0.6 and report.batches == 1
    con = sqlite3.connect(target)
    started, finished = con.execute("SELECT started_at, finished_at FROM lcm_etl_runs").fetchone()
    con.close()
    started_at = datetime.fromisoformat(started.replace("Z", "+00:00"))
    assert abs((started_at - before).total_seconds()) < 0.5   # when the read began, not when it ended
    assert (datetime.fromisoformat(finished.replace("Z", "+00:00")) - started_at).total_seconds() >= 0.6


def test_a_pending_input_whose_message_is_not_json_is_a_finding_and_the_rest_lands(tmp_path):
    state = copy_state("pending/state", tmp_path / "state")
    store = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    con = sqlite3.connect(store)
    con.execute("UPDATE session_pending_inputs SET message_json = '{\"role\": \"user\", \"content\": ' ")
    con.commit()
    con.close()
    target = tmp_path / "t.sqlite"
    report = cli_json("reconcile", "--sessions", state, "--dest", target)
    assert report["messages"]["inserted"] == 14
    assert report["warnings"] == [f"pending input {store}#session_pending_inputs/{PENDING['input_id']} (window "
                                  f"{PENDING['session_id']}): message_json is not a message; not read"]
    audited = run_cli("audit", "--sessions", state, "--dest", target, "--json")
    assert audited.returncode == 3
    assert [f["kind"] for f in json.loads(audited.stdout)["differences"]] == ["pending input"]
    strict = run_cli("reconcile", "--sessions", state, "--dest", tmp_path / "strict.sqlite", "--strict")
    assert (strict.returncode, strict.stderr) == (2, f"lcm-etl: error: --strict: {report['warnings'][0]}; nothing was "
                                                     "written\n")


@pytest.mark.parametrize("state,held", [("cold/state", (5, False, 0)), ("evicted/state", (0, True, 0)),
                                        ("pending/state", (0, False, 1))])
def test_a_stores_small_tables_are_read_with_its_sqlite_connection_not_duckdbs_scanner(tmp_path, monkeypatch, state,
                                                                                       held):
    """Its cold windows, archives, pending inputs and agent: each DuckDB query of the attached store opened a SQLite
    connection of its own, which read the store's schema again, and the pending inputs' query scanned the events'
    identities where SQLite looks each input's key up in OpenClaw's index. DuckDB is asked for the columns alone."""
    from lcm_etl import duck, sqlite_runtime
    from lcm_etl.read.openclaw.openclaw_store import OpenStore

    asked: list[str] = []

    class Recorded:
        def __init__(self, con):
            self._con = con

        def execute(self, sql, *args):
            asked.append(sql)
            return self._con.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._con, name)

    connect, lite = duck.connect, sqlite_runtime.connect
    monkeypatch.setattr(duck, "connect", lambda *a, **k: asked.append("duckdb") or Recorded(connect(*a, **k)))
    monkeypatch.setattr(sqlite_runtime, "connect", lambda path, *a, **k: asked.append(f"sqlite {path}") or
                        lite(path, *a, **k))
    [store] = (copy_state(state, tmp_path / "state") / "agents").glob("*/agent/openclaw-agent.sqlite")
    (tmp_path / "work").mkdir()
    with OpenStore(store, tmp_path / "work") as opened:
        c = opened.contents
        assert (len(c.cold), bool(c.archives), len(c.pending), c.agent_id) == (*held, "main")
        for w in c.windows:   # its rows and OpenClaw's path, and each pending input's message, by that connection too
            assert list(opened.events(w.session_id)) and opened.projection(w.session_id) is not None
        assert all(opened.pending_message(p).startswith(b"{") for p in c.pending)
        # one SQLite connection to the store's copy once the copy is made (DuckDB's attach is the first thing then)
        assert asked[asked.index("duckdb"):].count(f"sqlite {opened.kept.copy.path}") == 1
    # and every window's rows counted, as a store read without a kept snapshot is (StoreSnapshot.counts)
    assert [sql for sql in asked if " st." in sql] == ["SELECT session_id, max(seq), count(*) FROM st.transcript_events "
                                                        "GROUP BY 1"]
    assert any("information_schema.columns" in sql for sql in asked)


def test_a_store_whose_small_table_holds_text_that_is_not_utf8_is_a_finding_not_an_internal_error(tmp_path):
    state = copy_state("pending/state", tmp_path / "state")
    store = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    con = sqlite3.connect(store)
    con.execute("UPDATE session_pending_inputs SET session_key = CAST(x'ff41' AS TEXT)")   # read by SQLite as str
    con.commit()
    con.close()
    report = cli_json("reconcile", "--sessions", state, "--dest", tmp_path / "t.sqlite")
    why = f"session store {store} could not be read: Could not decode to UTF-8 column 'session_key' with text '\ufffdA'"
    assert report["warnings"] == [f"session store {store}: not a readable session store ({why}); not read"]
    strict = run_cli("reconcile", "--sessions", state, "--dest", tmp_path / "strict.sqlite", "--strict")
    assert (strict.returncode, strict.stderr) == (2, f"lcm-etl: error: {why}\n")
