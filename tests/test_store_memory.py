"""What a reconcile of a session store holds while it reads does not grow with the store, nor with how much of it
is new (docs/benchmarks.md): each transcript goes into the run file as it is read (lcm_etl/read/sessions/run_file.py), on a
first run and on a re-run alike, and nothing of it stays in Python."""
from __future__ import annotations

import gc
import sqlite3
import subprocess
import sys
import tracemalloc
from pathlib import Path

from conftest import ROOT
from test_huge_values import measured

GENERATE = ROOT / "fixtures" / "generate_store.py"


def _store(path: Path, events: int, per_window: int = 100) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(GENERATE), str(path), "--events", str(events), "--per-window", str(per_window)],
                   check=True, stdout=subprocess.DEVNULL)
    return path


def _append(path: Path, percent: int) -> None:
    subprocess.run([sys.executable, str(GENERATE), str(path), "--append-percent", str(percent)],
                   check=True, stdout=subprocess.DEVNULL)


def _held_after_reading(store: Path, target: Path | None = None) -> tuple[int, list, int]:
    """Python memory still allocated when every window has been read (tracemalloc), the run file's rows of the
    transcripts (read, read_count, messages with content), and how many parsed transcripts and messages are still
    alive then (the reading still open)."""
    from lcm_etl.read.sessions import transcript_decision as decide
    from lcm_etl.read.transcript.transcripts import Transcript, TranscriptMessage
    from lcm_etl.read.sessions.transcript_reading import ReadOptions, read_all

    records = decide.recorded(target) if target is not None else None
    tracemalloc.start()
    try:
        gc.collect()   # a full collection empties Python's free lists: what is left is what is held
        before = tracemalloc.get_traced_memory()[0]
        reading = read_all(ReadOptions(sessions=[str(store)]), records)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    alive = sum(isinstance(o, (Transcript, TranscriptMessage)) for o in gc.get_objects())
    try:
        return held, reading.run.query(
            "SELECT t.read, t.read_count, (SELECT count(*) FROM jsonl_content c WHERE c.message_id BETWEEN "
            "t.file_order << 32 AND (t.file_order << 32) + 4294967295) FROM transcripts t ORDER BY t.file_order"
        ).fetchall(), alive
    finally:
        reading.close()


def test_what_reading_holds_does_not_grow_with_the_windows_read(tmp_path):
    """Ten times the windows (4 → 40, 100 events each): what Python still holds once they are read does not grow
    with them; each window's messages are in the run file, content included. Before, the first 16 MiB of lines
    stayed parsed (several times their bytes), so the 40-window store held about ten times the 4-window store's
    parse."""
    small = _store(tmp_path / "small" / "agent" / "openclaw-agent.sqlite", 400)
    large = _store(tmp_path / "large" / "agent" / "openclaw-agent.sqlite", 4000)
    _held_after_reading(small)   # what the first read allocates once (imports, caches) is not the windows'
    held_small, small_read, _ = _held_after_reading(small)
    held_large, large_read, alive = _held_after_reading(large)
    assert len(small_read) == 4 and len(large_read) == 40 and alive == 0
    assert all(count and written == count for _, count, written in small_read + large_read)
    per_window = (held_large - held_small) / 36   # the parse's bounded caches, still filling (about 1,200 bytes)
    assert per_window < 2_000, f"{per_window:.0f} bytes held per window read"


def test_a_window_once_read_holds_nothing_in_python(tmp_path):
    """Ten times the windows (300 → 3,000, ten events each): what Python still holds once they are read grows by
    less than a few bytes a window. Before, each window read kept its transcript, window, read mark, report and
    session (about 1,150 bytes a window, 11 MB at 10,000: docs/benchmarks.md, 2026-11-26 22:21), then a pickled
    copy in a shelf and a list slot; now its row is in the run file."""
    small = _store(tmp_path / "small" / "agent" / "openclaw-agent.sqlite", 3000, per_window=10)
    large = _store(tmp_path / "large" / "agent" / "openclaw-agent.sqlite", 30000, per_window=10)
    _held_after_reading(small)   # what the first read allocates once (imports, caches) is not the windows'
    held_small, small_read, _ = _held_after_reading(small)
    held_large, large_read, alive = _held_after_reading(large)
    assert (len(small_read), len(large_read), alive) == (300, 3000, 0)
    per_window = (held_large - held_small) / 2700
    assert per_window < 50, f"{per_window:.0f} bytes held per window read"


def _peak_rss_mb(*args) -> float:
    """The peak memory of `lcm-etl reconcile`, started by a fresh interpreter (test_huge_values.measured): wait4's
    rusage of a child of pytest starts from pytest's own peak (a `python -c pass` of a 400 MB parent: 411 MB)."""
    run = measured("reconcile", *args, "-q")
    assert run["rc"] == 0, run["stderr"]
    return run["peak_mb"]


def test_the_process_peak_grows_by_less_than_30_mb_from_200_to_2000_windows(tmp_path):
    """The bound on the process: ten times the windows (200 → 2,000, ten events each), a first run and a re-run
    after every window grew. Measured in a process of its own (2026-11-28): first runs 115 → 133 MB, re-runs
    118 → 140 MB. The peak is not flat: 142 MB at 6,000 windows, 200 MB at 20,000 (first runs); this bounds its
    growth at this size. (wait4's figures, used before, started from pytest's own peak: the test could not fail.)"""
    peaks = {}
    for n in (2000, 20000):
        store = _store(tmp_path / str(n) / "agent" / "openclaw-agent.sqlite", n, per_window=10)
        target = tmp_path / str(n) / "t.sqlite"
        first = _peak_rss_mb("--sessions", store, "--dest", target)
        _append(store, 10)
        peaks[n] = (first, _peak_rss_mb("--sessions", store, "--dest", target))
    for small, large in zip(peaks[2000], peaks[20000]):
        assert large - small < 30, peaks


def test_a_re_run_releases_each_windows_appended_messages_and_writes_what_one_run_writes(tmp_path):
    """A re-run after rows were appended to every window reads each window past its recorded seq; those messages
    go into the run file as read, as a first run's do (before the spools, every window's appended messages stayed
    parsed until they were staged: a 5,000,000-event store's re-run after 1 % appended held 50,000 events parsed),
    and the target ends as one reconcile of the final store writes it."""
    from lcm_etl.commands import reconcile as command

    store = _store(tmp_path / "s" / "agent" / "openclaw-agent.sqlite", 4000)
    target = tmp_path / "t.sqlite"
    command.reconcile(command.ReconcileOptions(sessions=[str(store)], target=target))
    _append(store, 10)
    _, transcripts, alive = _held_after_reading(store, target)
    assert (len(transcripts), alive) == (40, 0)   # every appended message is in the run file, none parsed in Python
    assert all(how == "appended" and count and written == count for how, count, written in transcripts)
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


def test_the_run_file_writer_holds_at_most_its_threshold_however_few_rows_each_transcript_brings(tmp_path):
    """One writer, one size threshold: rows are gathered in Python until FLUSH_BYTES, then written, whether they
    come as a few large transcripts or as many windows of a few messages each (a re-run's)."""
    from lcm_etl.read.sessions import run_file
    from lcm_etl.read.transcript.transcripts import Mark, Transcript, TranscriptMessage, TranscriptReport

    def message(eid: str) -> TranscriptMessage:
        return TranscriptMessage(eid, None, 1, "user", "hi" * 500, "hi", 1, "h" * 64, None, None, None, {},
                                 [{"ordinal": 0, "kind": "text", "payload": {"text": "hi"}, "tool_name": None,
                                   "file_path": None, "created_at": None}])

    run = run_file.RunFile(tmp_path / "run.sqlite")
    most = 0
    for order in range(5000):
        t = Transcript(tmp_path / "s.sqlite", f"w{order}", None, None, [message(f"e{order}-{i}") for i in range(3)],
                       TranscriptReport(), mark=Mark(3, 3, 3, f"e{order}-2", 3, "x"))
        run.add(t, "new", (f"w{order}", None), "file", "JSONL file", (None, None), {"kind": "file"}, "2026-11-28")
        most = max(most, run._size)
    assert most < run_file.FLUSH_BYTES
    assert run.query("SELECT count(*), count(DISTINCT file_order) FROM jsonl_messages").fetchone() == (15000, 5000)
    run.close()


def test_the_plans_tables_are_compressed_and_dropped_after_their_last_use(tmp_path, monkeypatch):
    """The plan's tables live in a compressed in-memory database, checkpointed after each step: DuckDB's own
    in-memory database keeps rows uncompressed, and a re-run's tables grew with the new rows (1 % appended to a
    5,000,000-event store: 41 MB of tables against 10 MB at 500,000). The transcripts' rows are views of the run
    file, not copied in; what only the plan's steps read is dropped once it has run."""
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
