"""reconcile's re-run decision (lcm_etl/read/sessions/transcript_decision.py): each transcript read whole on a re-run says
why, in one of a fixed set of words; the report's `sync:` line counts them, and --json carries the counts
(`sync_decision.read_whole`) and each transcript's cause (`why`)."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path


from conftest import LCM_ETL, ROOT, run_cli
from lcm_etl.read.sessions import transcript_decision as decide
from storelib import StoreWriter, session_entries, state_copy, store_of
from test_reconcile import build_pair
from test_reconcile_offsets import lines_of, the_file, v1_lines, write

SCHEMAS = ROOT / "docs" / "schemas"
PLAIN, GROUP = "0198a1b2-0001-7c3d-8e4f-a1b2c3d4e501", "0198a1b2-0008-7c3d-8e4f-a1b2c3d4e508"   # native store windows
# a rewind's two windows of one session key in the native store: the one it left, and the one it made
BEFORE_REWIND, REWOUND = "0198a1b2-0006-7c3d-8e4f-a1b2c3d4e506", "11de10f3-a008-4482-b1c4-33892a873186"


def reconcile(*args) -> dict:
    proc = run_cli("reconcile", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def recorded(tmp_path: Path, lines: list[bytes]) -> tuple[Path, Path]:
    """s.jsonl holding `lines`, and a target one reconcile of it recorded."""
    jsonl = write(tmp_path / "s.jsonl", lines)
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", jsonl, "--dest", target)
    return jsonl, target


def decided(*args) -> dict:
    """A run's report, after a dry run of the same arguments whose text report prints, as its `sync:` line,
    the line the run's --json carries."""
    dry = run_cli("reconcile", "--dry-run", *args)
    assert dry.returncode == 0, dry.stderr
    report = reconcile(*args)
    assert [line for line in dry.stdout.splitlines() if line.startswith("  sync:")] == [
        f"  sync:    {report['sync_decision']['line']}"]
    return report


def whys(report: dict) -> dict[str, str | None]:
    """Each transcript's cause (None: read from its record), by file name, or a store window's session id."""
    return {f.get("window") or Path(f["file"]).name: f["why"] for f in report["extra"]["files"]}


def line(report: dict) -> str:
    return report["sync_decision"]["line"]


def test_a_new_file_beside_an_appended_one_is_read_whole_as_new(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    lines = lines_of("tool-heavy")
    write(folder / "a.jsonl", lines[:20])
    target = tmp_path / "t.sqlite"
    first = reconcile("--sessions", folder, "--dest", target)
    assert line(first) == "offsets: 0 of 1 transcripts read from where the last run stopped; 1 read whole: 1 new"
    write(folder / "a.jsonl", lines)
    write(folder / "b.jsonl", lines_of("plain-chat"))
    report = decided("--sessions", folder, "--dest", target)
    assert whys(report) == {"a.jsonl": None, "b.jsonl": "new"}
    assert report["sync_decision"]["read_whole"] == {"new": 1}
    assert line(report) == "offsets: 1 of 2 transcripts read from where the last run stopped; 1 read whole: 1 new"


def test_a_header_only_transcript_unchanged_is_read_from_its_record_on_the_next_run(tmp_path):
    """A session with no message yet is recorded too: its transcript is not read whole as new on every run."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    write(folder / "a.jsonl", lines_of("plain-chat"))
    write(folder / "hdr.jsonl", [b'{"type":"session","version":3,"id":"hdr-only","timestamp":"2026-01-01T00:00:00Z"}\n'])
    target = tmp_path / "t.sqlite"
    assert line(reconcile("--sessions", folder, "--dest", target)).endswith("; 2 read whole: 2 new")
    report = decided("--sessions", folder, "--dest", target)
    assert whys(report) == {"a.jsonl": None, "hdr.jsonl": None}
    assert line(report) == "offsets: 2 of 2 transcripts read from where the last run stopped"


def test_a_session_whose_rows_are_gone_and_whose_transcript_is_a_header_is_read_whole_once_not_every_run(tmp_path):
    """A planned session the target holds no row of has no figures to mark (94): its earlier mark goes with the run
    that planned it, so the next run does not find its rows 'no longer held as recorded' again, and again."""
    lines = lines_of("plain-chat")
    jsonl, target = recorded(tmp_path, lines)
    con = sqlite3.connect(target)   # a cleanup in Remnic: the session's rows are gone
    with con:
        for table in ("lcm_messages", "lcm_compaction_events", "lcm_summary_nodes"):
            con.execute(f"DELETE FROM {table}")
    con.close()
    write(jsonl, lines[:1])   # and OpenClaw started the transcript over: its header alone
    assert whys(decided("--sessions", jsonl, "--dest", target)) == {"s.jsonl": "the recorded prefix changed"}
    report = decided("--sessions", jsonl, "--dest", target)
    assert whys(report) == {"s.jsonl": None}
    assert line(report) == "offsets: 1 of 1 transcripts read from where the last run stopped"


def test_an_appended_file_is_read_from_its_record_and_the_line_names_no_cause(tmp_path):
    lines = lines_of("tool-heavy")
    jsonl, target = recorded(tmp_path, lines[:20])
    write(jsonl, lines)
    report = decided("--sessions", jsonl, "--dest", target)
    assert whys(report) == {"s.jsonl": None} and report["sync_decision"]["read_whole"] == {}
    assert line(report) == "offsets: 1 of 1 transcripts read from where the last run stopped"


def test_a_file_rewritten_to_the_same_size_is_read_whole_because_the_recorded_prefix_changed(tmp_path):
    lines = lines_of("plain-chat")
    jsonl, target = recorded(tmp_path, lines)
    at = lines[7].index(b'"text":"') + len(b'"text":"')
    lines[7] = lines[7][:at] + (b"Z" if lines[7][at:at + 1] != b"Z" else b"Y") + lines[7][at + 1:]
    write(jsonl, lines)
    report = decided("--sessions", jsonl, "--dest", target)
    assert whys(report) == {"s.jsonl": "the recorded prefix changed"}
    assert line(report) == ("offsets: 0 of 1 transcripts read from where the last run stopped; "
                            "1 read whole: 1 the recorded prefix changed")


def test_a_branch_appended_is_read_whole_as_not_a_plain_append(tmp_path):
    lines = lines_of("branched")
    jsonl, target = recorded(tmp_path, lines[:10])
    write(jsonl, lines)
    report = decided("--sessions", jsonl, "--dest", target)
    assert whys(report) == {"s.jsonl": "not a plain append"}
    assert report["sync_decision"]["read_whole"] == {"not a plain append": 1}
    assert line(report).endswith("; 1 read whole: 1 not a plain append")


def test_a_v1_file_unchanged_is_read_from_its_record_and_grown_has_nothing_to_continue_from(tmp_path):
    lines = v1_lines()
    jsonl, target = recorded(tmp_path, lines[:-1])
    unchanged = decided("--sessions", jsonl, "--dest", target)
    f = the_file(unchanged)
    assert (f["why"], f["read"], f["lines_read"], unchanged["messages"]["inserted"]) == (None, "appended", 0, 0)
    write(jsonl, lines)
    grown = decided("--sessions", jsonl, "--dest", target)
    f = the_file(grown)
    assert (f["why"], f["read"], f["lines_read"], f["already_present"]) == (decide.NO_TIP, "whole", 4, 2)
    assert grown["messages"]["inserted"] == 1
    assert line(grown).endswith(f"; 1 read whole: 1 {decide.NO_TIP}")


def test_a_run_under_another_key_by_reads_whole_what_was_recorded_under_the_first(tmp_path):
    jsonl, target = recorded(tmp_path, lines_of("tool-heavy"))
    report = decided("--sessions", jsonl, "--dest", target, "--key-by", "session-key")
    assert whys(report) == {"s.jsonl": "recorded under another --key-by or --src"}
    assert line(report).endswith("; 1 read whole: 1 recorded under another --key-by or --src")


def test_after_an_undo_of_the_recording_run_the_cause_is_the_undo(tmp_path):
    jsonl, target = recorded(tmp_path, lines_of("tool-heavy"))
    second = reconcile("--sessions", jsonl, "--dest", target)
    assert run_cli("undo", second["run_id"], "--dest", target, "-q").returncode == 0
    report = decided("--sessions", jsonl, "--dest", target)
    assert whys(report) == {"s.jsonl": "its last run was undone or did not complete"}
    assert report["sync_decision"]["read_whole"] == {"its last run was undone or did not complete": 1}


def test_a_file_moved_to_another_session_by_sessions_json_is_read_again_whole(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    jsonl = write(folder / "s.jsonl", lines_of("plain-chat"))
    sid = "48d65de3-91ba-42bc-8a50-1266ada06a6f"
    target = tmp_path / "t.sqlite"
    (folder / "sessions.json").write_text(json.dumps({"agent:main:one": {"sessionId": sid}}))
    reconcile("--sessions", jsonl, "--dest", target, "--key-by", "session-key")
    (folder / "sessions.json").write_text(json.dumps({"agent:main:two": {"sessionId": sid}}))
    report = decided("--sessions", jsonl, "--dest", target, "--key-by", "session-key")
    assert whys(report) == {"s.jsonl": "re-read: recorded under another session"}
    assert line(report).endswith("; 1 read whole: 1 re-read: recorded under another session")


def test_the_other_transcript_of_a_session_with_one_read_whole_is_read_again_whole(tmp_path):
    """Two copies of one transcript (one header id: one session); one is rewritten in place."""
    lines = lines_of("plain-chat")
    one, two = write(tmp_path / "one.jsonl", lines), write(tmp_path / "two.jsonl", lines)
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", one, "--sessions", two, "--dest", target)
    at = lines[7].index(b'"text":"') + len(b'"text":"')
    write(two, lines[:7] + [lines[7][:at] + b"~" + lines[7][at + 1:]] + lines[8:])
    report = decided("--sessions", one, "--sessions", two, "--dest", target)
    assert whys(report) == {"one.jsonl": "re-read: another transcript of its session read whole",
                            "two.jsonl": "the recorded prefix changed"}
    assert line(report) == ("offsets: 0 of 2 transcripts read from where the last run stopped; 2 read whole: "
                            "1 the recorded prefix changed, 1 re-read: another transcript of its session read whole")


def without_entry_ids(tmp_path: Path) -> tuple[Path, Path, list[bytes]]:
    """tool-heavy's transcript, cut 3 lines short, an lcm.db of the whole one whose rows, as an older lossless-claw
    wrote them, have no transcript_entry_id, and the transcript's lines."""
    pair = build_pair("tool-heavy", tmp_path / "state")
    lcm_db = tmp_path / "state" / "lcm.db"
    con = sqlite3.connect(lcm_db)
    with con:
        con.execute("UPDATE messages SET transcript_entry_id = NULL")
    con.close()
    transcript = Path(pair["transcript"])
    lines = transcript.read_bytes().splitlines(keepends=True)
    write(transcript, lines[:-3])
    return transcript, lcm_db, lines


def test_a_session_whose_held_rows_lack_entry_ids_is_read_again_whole(tmp_path):
    """lcm.db rows an older lossless-claw wrote (no transcript_entry_id) count as held only by identity."""
    transcript, lcm_db, lines = without_entry_ids(tmp_path)
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", transcript, "--src", lcm_db, "--dest", target)
    write(transcript, lines)   # appended: its new messages are matched against the session's held rows
    report = decided("--sessions", transcript, "--src", lcm_db, "--dest", target)
    assert list(whys(report).values()) == ["re-read: its session holds rows without entry ids"]
    assert line(report).endswith("; 1 read whole: 1 re-read: its session holds rows without entry ids")


def test_a_session_whose_target_rows_lack_entry_ids_is_read_again_whole(tmp_path):
    """The target's rows migrated from an lcm.db without transcript_entry_id count as held only by identity too:
    the re-run without --src reads the session whole."""
    transcript, lcm_db, lines = without_entry_ids(tmp_path)
    target = tmp_path / "t.sqlite"
    assert run_cli("migrate", "--src", lcm_db, "--dest", target).returncode == 0
    reconcile("--sessions", transcript, "--dest", target)
    write(transcript, lines)
    report = decided("--sessions", transcript, "--dest", target)
    assert list(whys(report).values()) == ["re-read: its session holds rows without entry ids"]


def holds_open(pid: int, suffix: str) -> bool:
    """Whether the process has a file ending in `suffix` open; an fd closed between the listing and its readlink is
    not that file."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(suffix):
                return True
        except FileNotFoundError:
            continue
    return False


def test_a_record_changed_while_the_run_waited_for_the_lock_is_read_again_whole(tmp_path):
    jsonl, target = recorded(tmp_path, lines_of("tool-heavy"))
    lock = os.open(target.with_name(f".{target.name}.lcm-etl-lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)   # another lcm-etl run, as far as the run lock goes
    try:
        run = subprocess.Popen([str(LCM_ETL), "reconcile", "--json", "--sessions", str(jsonl), "--dest", str(target),
                                "--lock-timeout", "600"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not holds_open(run.pid, ".lcm-etl-lock"):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        con = sqlite3.connect(target)   # the record, as a run with another --src would have left it
        with con:
            con.execute("UPDATE lcm_etl_transcript_files SET held_by = '/elsewhere/lcm.db'")
        con.close()
    finally:
        os.close(lock)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    report = json.loads(out)
    assert whys(report) == {"s.jsonl": "re-read: the record changed under the lock"}
    assert line(report).endswith("; 1 read whole: 1 re-read: the record changed under the lock")


def test_beside_a_live_remnic_a_run_reads_from_its_records_and_a_dry_run_says_it_read_none(tmp_path):
    """Remnic holds its store open in WAL mode: a -wal and a -shm beside the target all the time. A run reads the
    records through them, as any reader; a dry run touches none of the target's files, so it has no records."""
    lines = lines_of("tool-heavy")
    jsonl, target = recorded(tmp_path, lines[:-2])
    write(jsonl, lines)   # two more lines appended
    live = sqlite3.connect(target)   # a live Remnic: WAL mode, its connection open, its commit in the -wal
    try:
        live.execute("PRAGMA journal_mode=WAL")
        live.execute("PRAGMA wal_autocheckpoint=0")
        with live:
            live.execute("CREATE TABLE remnic_live (x)")
        assert Path(f"{target}-wal").exists() and Path(f"{target}-shm").exists()
        dry = reconcile("--sessions", jsonl, "--dest", target, "--dry-run")
        report = reconcile("--sessions", jsonl, "--dest", target)
    finally:
        live.close()
    assert whys(dry) == {"s.jsonl": decide.RECORDS_UNREAD}
    assert dry["sync_decision"]["read_whole"] == {decide.RECORDS_UNREAD: 1}
    assert whys(report) == {"s.jsonl": None}
    assert report["sync_decision"]["read_whole"] == {}
    assert dry["messages"]["inserted"] == report["messages"]["inserted"] > 0


def test_a_store_window_rewritten_in_place_and_one_appended_say_how_each_was_read(tmp_path):
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", store, "--dest", target)
    writer = StoreWriter(store)
    try:
        writer.append(PLAIN, ["one more question", "one more answer"])
        first_user = session_entries(target, GROUP)[0]
        writer.rewrite(GROUP, first_user[0], "Conversation info (untrusted metadata):", "Conversation info: ⟦x⟧")
        report = decided("--sessions", store, "--dest", target)
    finally:
        writer.close()
    causes = whys(report)
    assert (causes[PLAIN], causes[GROUP]) == (None, "rewritten in place (watermark changed)")
    # 9 windows, and the deleted session's archive (unchanged: from its record)
    assert len(causes) == 10 and list(causes.values()).count(None) == 9
    assert report["sync_decision"]["read_whole"] == {"rewritten in place (watermark changed)": 1}
    assert line(report) == ("offsets: 9 of 10 transcripts read from where the last run stopped; "
                            "1 read whole: 1 rewritten in place (watermark changed)")


def test_a_store_window_that_no_longer_reaches_its_recorded_seq_started_over(tmp_path):
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", store, "--dest", target)
    con = sqlite3.connect(store)   # the window made again, shorter (its last events gone)
    with con:
        top = con.execute("SELECT max(seq) FROM transcript_events WHERE session_id = ?", (PLAIN,)).fetchone()[0]
        con.execute("DELETE FROM transcript_events WHERE session_id = ? AND seq > ?", (PLAIN, top - 2))
    con.close()
    report = decided("--sessions", store, "--dest", target)
    assert whys(report)[PLAIN] == "the window started over"
    assert report["sync_decision"]["read_whole"] == {"the window started over": 1}


def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is_read_whole(tmp_path):
    """An archive never grows: a re-run takes it from its record while its bytes hash the same (a store row's own
    archive_sha256, a file's bytes), and reads it whole when they do not."""
    state = state_copy("native", tmp_path / "state")
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", state, "--dest", target)
    report = reconcile("--sessions", state, "--dest", target)
    archives = [f for f in report["extra"]["files"] if f["kind"] == "archive"]
    assert len(archives) == 2   # the store's row and its published file
    assert {(f["read"], f["lines_read"], f["already_present"]) for f in archives} == {("appended", 0, 4)}
    assert report["sync_decision"]["read_whole"] == {} and report["messages"]["inserted"] == 0
    published = next((state / "agents" / "main" / "sessions").glob("*.jsonl.deleted.*.zst"))
    import zstandard

    text = zstandard.ZstdDecompressor().decompressobj().decompress(published.read_bytes())
    blob = zstandard.ZstdCompressor(level=3).compress(text)   # the same entries, other bytes: the row's and the file's
    published.write_bytes(blob)   # (a file that is not its row's bytes is a finding: tests/test_damage.py)
    con = sqlite3.connect(state / "agents" / "main" / "agent" / "openclaw-agent.sqlite")
    con.execute("UPDATE session_transcript_archives SET archive_blob = ?, archive_sha256 = ? WHERE archive_name = ?",
                (blob, hashlib.sha256(blob).hexdigest(), published.name))
    con.commit()
    con.close()
    again = reconcile("--sessions", state, "--dest", target)
    assert again["sync_decision"]["read_whole"] == {"the archive changed": 2} and again["warnings"] == []
    assert again["messages"]["inserted"] == 0 and again["messages"]["already_present"] == 109 + 4   # row and file: once
    assert [(f["read"], f["already_present"]) for f in again["extra"]["files"] if f["kind"] == "archive"] == [
        ("whole", 4), ("whole", 4)]


def test_the_schemas_list_exactly_the_causes_the_decision_names():
    report = json.loads((SCHEMAS / "run-report.schema.json").read_text())
    per_file = json.loads((SCHEMAS / "reconcile.schema.json").read_text())
    counts = report["properties"]["sync_decision"]["oneOf"][1]["properties"]["read_whole"]["oneOf"][1]
    assert counts["propertyNames"]["enum"] == list(decide.CAUSES)
    assert per_file["properties"]["extra"]["properties"]["files"]["items"]["properties"]["why"]["enum"] == [
        None, *decide.CAUSES]
    assert len(set(decide.CAUSES)) == len(decide.CAUSES)



def test_a_window_read_from_its_record_then_whole_for_its_sessions_sake_lands_each_message_once(tmp_path):
    """--key-by session-key: a rewind's two windows are one session. One window is rewritten in place (read whole),
    the other appended to: read past its record first, then whole again for its session (its content staged twice,
    the second replacing the first). The target then holds what one run of the final store holds, each entry once."""
    state = state_copy("native", tmp_path / "state")
    store = store_of(state, "main")
    target = tmp_path / "t.sqlite"
    reconcile("--sessions", store, "--dest", target, "--key-by", "session-key")
    writer = StoreWriter(store)
    try:
        writer.append(REWOUND, ["one more question", "one more answer"])
        _, some_entry = writer.tip(BEFORE_REWIND)
        writer.rewrite(BEFORE_REWIND, some_entry, "-", "-")   # the watermark moves, the text stays
    finally:
        writer.close()
    report = reconcile("--sessions", store, "--dest", target, "--key-by", "session-key")
    causes = whys(report)
    assert (causes[BEFORE_REWIND], causes[REWOUND]) == (decide.REWRITTEN, decide.SESSION_WHOLE)
    assert report["messages"]["inserted"] == 2
    once = tmp_path / "once.sqlite"
    reconcile("--sessions", store, "--dest", once, "--key-by", "session-key")

    def entries(path: Path) -> list[tuple]:
        with sqlite3.connect(path) as con:
            return sorted(con.execute("SELECT session_id, json_extract(metadata, '$.transcript_entry_id'), role, "
                                      "content FROM lcm_messages").fetchall())
    assert entries(target) == entries(once)
    assert len({r[:2] for r in entries(target)}) == len(entries(target))
