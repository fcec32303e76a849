"""What a reconcile of a session store holds in Python while it reads does not grow with the store, nor with how
much of it is new (docs/benchmarks.md, 2026-11-26): each window is released as it is read, its plan rows spooled
to Parquet and its content rows written to the stage file, on a first run and on a re-run alike."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import tracemalloc
from pathlib import Path

from conftest import ROOT

GENERATE = ROOT / "fixtures" / "generate_store.py"


def _store(path: Path, events: int, per_window: int = 100) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(GENERATE), str(path), "--events", str(events), "--per-window", str(per_window)],
                   check=True, stdout=subprocess.DEVNULL)
    return path


def _append(path: Path, percent: int) -> None:
    subprocess.run([sys.executable, str(GENERATE), str(path), "--append-percent", str(percent)],
                   check=True, stdout=subprocess.DEVNULL)


def _held_after_reading(store: Path, target: Path | None = None) -> tuple[int, list]:
    """Python memory still allocated when every window has been read (tracemalloc), and the transcripts."""
    from lcm_etl.read import transcript_decision as decide
    from lcm_etl.read.transcript_reading import ReadOptions, read_all

    records = decide.recorded(target, hint=True) if target is not None else None
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        reading = read_all(ReadOptions(sessions=[str(store)]), records)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    try:
        return held, list(reading.transcripts)
    finally:
        reading.close()


def test_what_reading_holds_does_not_grow_with_the_windows_read(tmp_path):
    """Ten times the windows (4 → 40, 100 events each): what is still held once they are read grows by the
    windows' small records (their read marks and reports), never by their parses. Before, the first 16 MiB of
    lines stayed parsed (several times their bytes), so the 40-window store held about ten times the 4-window
    store's parse."""
    small = _store(tmp_path / "small" / "agent" / "openclaw-agent.sqlite", 400)
    large = _store(tmp_path / "large" / "agent" / "openclaw-agent.sqlite", 4000)
    _held_after_reading(small)   # what the first read allocates once (imports, caches) is not the windows'
    held_small, small_read = _held_after_reading(small)
    held_large, large_read = _held_after_reading(large)
    assert len(small_read) == 4 and len(large_read) == 40
    assert all(not t.messages and t.staged for t in small_read + large_read)
    per_window = (held_large - held_small) / 36
    assert per_window < 8_000, f"{per_window:.0f} bytes held per window read"


def test_a_window_once_read_holds_a_list_slot_not_its_transcript(tmp_path):
    """Ten times the windows (300 → 3,000, ten events each, more than the spool gathers): what Python still holds
    once they are read grows by a few dozen bytes a window (their places in the list). Before, each released
    window kept its transcript, window, read mark, report and session in memory: about 1,150 bytes a window, 11 MB
    at 10,000 (docs/benchmarks.md, 2026-11-26 22:21); now they are shelved in the run's folder (window_shelf.py)."""
    small = _store(tmp_path / "small" / "agent" / "openclaw-agent.sqlite", 3000, per_window=10)
    large = _store(tmp_path / "large" / "agent" / "openclaw-agent.sqlite", 30000, per_window=10)
    _held_after_reading(small)   # what the first read allocates once (imports, caches) is not the windows'
    held_small, small_read = _held_after_reading(small)
    held_large, large_read = _held_after_reading(large)
    assert (len(small_read), len(large_read)) == (300, 3000)
    per_window = (held_large - held_small) / 2700
    assert per_window < 250, f"{per_window:.0f} bytes held per window read"


def test_a_re_run_releases_each_windows_appended_messages_and_writes_what_one_run_writes(tmp_path):
    """A re-run after rows were appended to every window reads each window past its recorded seq; those messages
    are released as read as a first run's are (before, every window's appended messages stayed parsed until they
    were staged: a 5,000,000-event store's re-run after 1 % appended held 50,000 events parsed), and the target
    ends as one reconcile of the final store writes it."""
    from lcm_etl.commands import reconcile as command

    store = _store(tmp_path / "s" / "agent" / "openclaw-agent.sqlite", 4000)
    target = tmp_path / "t.sqlite"
    command.reconcile(command.ReconcileOptions(sessions=[str(store)], target=target))
    _append(store, 10)
    _, transcripts = _held_after_reading(store, target)
    assert len(transcripts) == 40
    assert all(t.mark is not None and t.mark.read_from > 0 for t in transcripts)   # read past the record
    assert all(not t.messages and t.staged and t.read_count for t in transcripts)
    report = command.reconcile(command.ReconcileOptions(sessions=[str(store)], target=target))
    assert report.extra["files_read_from_offset"] == 40 and report.messages.inserted > 0
    _append(store, 10)   # a second append, as a gateway keeps appending: read from the record the re-run left
    report = command.reconcile(command.ReconcileOptions(sessions=[str(store)], target=target))
    assert report.extra["files_read_from_offset"] == 40 and report.messages.inserted > 0

    once = tmp_path / "once.sqlite"
    command.reconcile(command.ReconcileOptions(sessions=[str(store)], target=once))

    def rows(path: Path) -> list[tuple]:
        with sqlite3.connect(path) as con:
            return con.execute("SELECT session_id, turn_index, role, content, token_count, metadata FROM lcm_messages "
                               "ORDER BY 1, 2").fetchall()
    assert rows(target) == rows(once)


def test_the_spool_holds_a_bounded_number_of_windows_however_few_rows_each_brings(tmp_path):
    """A re-run's windows bring a few appended messages each; their small tables cost about 20 KB a window held
    whatever their rows, so the spool writes a row group every SPOOL_WINDOWS windows too, not only every SPOOL_ROWS
    messages (10,000 windows of five messages held about 200 MB before)."""
    import duckdb

    from lcm_etl.read.transcript_rows import SPOOL_WINDOWS, FileSession, IdentitySpool, _tables
    from lcm_etl.read.transcript.transcripts import Transcript, TranscriptMessage, TranscriptReport

    def message(eid: str) -> TranscriptMessage:
        return TranscriptMessage(eid, None, 1, "user", "hi", "hi", 1, "h" * 64, None, None, None, {},
                                 [{"ordinal": 0}])

    spool = IdentitySpool(tmp_path)
    most = 0
    for order in range(10 * SPOOL_WINDOWS):
        t = Transcript(tmp_path / "s.sqlite", f"w{order}", None, None, [message(f"e{order}-{i}") for i in range(3)],
                       TranscriptReport())
        spool.add(_tables([t], [FileSession(f"w{order}", None)], "2026-11-26T00:00:00.000Z", first_order=order))
        most = max(most, len(spool._pending))
    assert most < SPOOL_WINDOWS
    sql = spool.sql("jsonl_messages")
    assert sql is not None
    assert duckdb.sql(f"SELECT count(*), count(DISTINCT file_order) FROM ({sql})").fetchone() == (30 * SPOOL_WINDOWS,
                                                                                                   10 * SPOOL_WINDOWS)


def test_the_plans_tables_are_compressed_and_dropped_after_their_last_use(tmp_path, monkeypatch):
    """The plan's tables live in a compressed in-memory database, checkpointed after each step: DuckDB's own
    in-memory database keeps rows uncompressed, and a re-run's tables grew with the new rows (1 % appended to a
    5,000,000-event store: 41 MB of tables against 10 MB at 500,000). The transcripts' rows are views of the
    spool and the Arrow tables, not copied in; what only the plan's steps read is dropped once it has run."""
    from lcm_etl.commands import reconcile as command
    from lcm_etl.planning import reconcile_plan

    seen: dict = {}

    def plan_transcripts(*args, **kwargs):
        con = reconcile_plan.plan_transcripts(*args, **kwargs)
        seen["tables"] = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()}
        seen["views"] = {r[0] for r in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE database_name = current_database()").fetchall()}
        seen["compression"] = {r[0] for r in con.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info('jsonl_plan') WHERE segment_type = 'VARCHAR'"
        ).fetchall()}
        return con

    monkeypatch.setattr(command, "plan_transcripts", plan_transcripts)
    store = _store(tmp_path / "s" / "agent" / "openclaw-agent.sqlite", 4000)
    target = tmp_path / "t.sqlite"
    command.reconcile(command.ReconcileOptions(sessions=[str(store)], target=target))
    _append(store, 10)
    report = command.reconcile(command.ReconcileOptions(sessions=[str(store)], target=target))
    assert report.messages.inserted > 0
    assert {"jsonl_plan", "write_messages", "session_work", "held"} <= seen["tables"]
    assert not seen["tables"] & {"jsonl_abandoned", "held_lcm", "batch_input"}, seen["tables"]
    assert seen["compression"] and seen["compression"] != {"Uncompressed"}, seen["compression"]
    assert seen["views"] == {"jsonl_messages", "jsonl_parts"}, seen["views"]
