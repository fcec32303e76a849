"""A `reconcile --watch`'s later syncs of a session store read only the windows whose rows changed (issue 37): the
others are counted from the records the run that sealed the store's kept snapshot left, while it is still the
target's last run to write records. A real watcher process, a real store written as the gateway writes it."""
from __future__ import annotations

import json

from conftest import run_cli
from storelib import StoreWriter, state_copy, store_of
from test_watch import assert_every_line_matches_the_watch_schema
from watchlib import Watcher, counts

PLAIN = "0198a1b2-0001-7c3d-8e4f-a1b2c3d4e501"   # the native store's plain-chat window


def test_a_watchs_later_sync_reads_only_the_window_appended_to_and_counts_the_others_from_their_records(tmp_path):
    store = store_of(state_copy("native", tmp_path / "state"), "main")
    target = tmp_path / "lcm.sqlite"
    w = Watcher("reconcile", "--sessions", store, "--dest", target, "--interval", "0.2", tmp=tmp_path / "tmp")
    writer = StoreWriter(store)
    try:
        first = w.next_sync()
        writer.append(PLAIN, ["one more question", "one more answer"])
        second = w.next_sync()
        writer.append(PLAIN, ["and another", "and its answer"])
        third = w.next_sync()
        code, err = w.stop()
    finally:
        writer.close()
        w.kill()
    assert code == 0, err
    assert_every_line_matches_the_watch_schema([first, second, third])
    windows = first["extra"]["stores"][0]["windows"]
    assert first["extra"]["stores"][0]["windows_unchanged"] == 0 and len(first["extra"]["files"]) > windows
    # the second sync's snapshot was sealed by the first sync, which checked every session: the windows it left
    # settled and no page of which changed are not read; the report counts them from their records
    for later in (second, third):
        assert later["extra"]["stores"][0]["windows_unchanged"] == windows - 1
        assert [f["session_id"] for f in later["extra"]["files"] if f["kind"] == "window"] == [PLAIN]
        assert later["messages"]["inserted"] == 2
        total = len(later["extra"]["files"]) + windows - 1
        assert later["sync_decision"]["line"].startswith(f"offsets: {total} of {total} transcripts read from where")
    # what a run of the same store and target counts as held, nothing new: the unread windows' messages included
    run = json.loads(run_cli("reconcile", "--sessions", store, "--dest", target, "--json").stdout)
    assert run["messages"]["inserted"] == 0 and run["extra"]["stores"][0]["windows_unchanged"] == 0
    assert third["messages"]["already_present"] + 2 == run["messages"]["already_present"]
    assert third["parts"]["already_present"] + 2 == run["parts"]["already_present"]


def test_after_an_undo_between_two_syncs_the_next_sync_reads_every_window_and_lands_the_undone_rows_again(tmp_path):
    store = store_of(state_copy("native", tmp_path / "state"), "main")
    target = tmp_path / "lcm.sqlite"
    w = Watcher("reconcile", "--sessions", store, "--dest", target, "--interval", "0.2", tmp=tmp_path / "tmp")
    writer = StoreWriter(store)
    try:
        w.next_sync()
        writer.append(PLAIN, ["one more question", "one more answer"])
        second = w.next_sync()
        held = counts(target)["lcm_messages"]
        # the second sync's run undone: its records are no longer trusted, and its two messages leave the target
        assert run_cli("undo", second["run_id"], "--dest", target, "-q").returncode == 0
        writer.append(PLAIN, ["and another", "and its answer"])
        third = w.next_sync()
        code, err = w.stop()
    finally:
        writer.close()
        w.kill()
    assert code == 0, err
    # the undo is the target's last run to touch records, not the run that sealed the snapshot: every window read
    assert third["extra"]["stores"][0]["windows_unchanged"] == 0
    assert third["messages"]["inserted"] == 4 and counts(target)["lcm_messages"] == held + 2


def test_windows_left_unread_are_read_whole_when_a_run_wrote_records_since_the_snapshot_was_sealed(tmp_path):
    """Under the lock (Reading.confirm_unchanged): when the target's last run to write records is no longer the one
    that sealed the store's snapshot (a run between the hint and the lock), every window left unread is read
    whole, as a record that changed under the lock is, and the store's entry counts none unread."""
    from lcm_etl.read.sessions import transcript_decision as decide
    from lcm_etl.read.sessions.transcript_reading import read_all
    from lcm_etl.run_options import ReconcileOptions

    store = store_of(state_copy("native", tmp_path / "state"), "main")
    target = tmp_path / "lcm.sqlite"
    for _ in range(2):   # the second run seals the snapshot with each window's record settled
        assert run_cli("reconcile", "--sessions", store, "--dest", target, "-q").returncode == 0
    opts = ReconcileOptions(sessions=[str(store)], target=target, every_session=False)
    records = decide.recorded(target)
    try:
        reading = read_all(opts, records)
    finally:
        records.close()
    try:
        [unread] = reading.unchanged.values()
        assert len(unread) == reading.stores[0]["windows"] > 0
        assert reading.run.query("SELECT count(*) FROM transcripts WHERE kind = 'window'").fetchone()[0] == 0
        reading.confirm_unchanged("a run since")
        assert reading.run.query("SELECT why, count(*) FROM transcripts WHERE kind = 'window' GROUP BY 1").fetchall() \
            == [(decide.RECORD_CHANGED, reading.stores[0]["windows"])]
        assert reading.stores[0]["windows_unchanged"] == 0   # the report counts none left unread
    finally:
        reading.close()
