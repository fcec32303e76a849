"""Re-runs (of every fixture, after conftest's `imported` run), dry-runs on an existing target, the source
left untouched, rows that live only in the -wal file, and imports appended after native Remnic rows."""
from __future__ import annotations

import sqlite3

import pytest

from conftest import (comparable, fixture_rows, folder_state, make_native_target, migrate_api, open_db, oracle,
                      run_cli, source_messages, table_counts, target_messages)


def fts_rows(con) -> tuple[int, int]:
    return (con.execute("SELECT count(*) FROM lcm_messages_fts_docsize").fetchone()[0],
            con.execute("SELECT count(*) FROM lcm_summaries_fts_docsize").fetchone()[0])


@pytest.mark.parametrize("full", [True, False], ids=["full-plan", "shortcut"])
def test_rerunning_imports_zero_new_rows_and_writes_no_boundary_event(imported, full):
    # re-run on a copy of the imported target, so the session-wide `imported` target stays as it was;
    # both through the full plan and through the unchanged-source shortcut
    dest = imported.base / f"rerun-{full}" / "lcm.sqlite"
    dest.parent.mkdir(exist_ok=True)
    copy = sqlite3.connect(dest)
    imported.tgt.backup(copy)          # a consistent copy, whatever the open handle has in its -wal
    copy.execute("PRAGMA journal_mode=WAL")
    copy.close()
    with open_db(dest) as con:
        before, fts_before = table_counts(con), fts_rows(con)
    source_before = folder_state(imported.source.parent)
    second = migrate_api(imported.source, dest, full=full)
    assert (second["sync_decision"]["how"] == "no-op") is not full
    assert folder_state(imported.source.parent) == source_before
    with open_db(dest) as con:
        after, fts_after = table_counts(con), fts_rows(con)
    assert after.pop("lcm_etl_runs") == before.pop("lcm_etl_runs") + 1
    assert after.pop("lcm_etl_sync_state") == before.pop("lcm_etl_sync_state") + 1   # beside the run's ledger row
    assert after == before
    assert fts_after == fts_before
    first = imported.report
    for kind in ("messages", "parts", "summaries"):
        assert second[kind]["inserted"] == 0
        assert second[kind]["already_present"] == first[kind]["inserted"]
    assert second["boundary_events"] == 0
    assert second["sessions_touched"] == []
    assert second["collapsed_parents"] == 0


def test_dry_run_on_an_existing_target_reports_what_the_real_run_then_does_and_changes_nothing(fixture_copy,
                                                                                             tmp_path):
    src = fixture_copy("shared-session-newest.db")
    dest = tmp_path / "out" / "lcm.sqlite"
    migrate_api(src, dest, session_filter=["a08ff49b-6f77-4632-a16c-43069c43a8c3"])
    before = folder_state(dest.parent)
    dry = migrate_api(src, dest, dry_run=True)
    assert folder_state(dest.parent) == before
    real = migrate_api(src, dest)
    assert comparable(dry) == comparable(real)
    assert real["messages"]["inserted"] == 10 and real["messages"]["already_present"] == 41


def test_dry_run_text_report_says_nothing_was_written(fixture_copy, tmp_path):
    src = fixture_copy("basic-0.1.0.db")
    dest = tmp_path / "out" / "lcm.sqlite"
    proc = run_cli("migrate", "--src", src, "--dest", dest, "--dry-run")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("lcm-etl migrate: DRY RUN - nothing was written; a real run would do this:\n")
    assert "would insert" in proc.stdout
    assert not dest.parent.exists()


def test_rows_that_exist_only_in_the_wal_file_are_imported(fixture_copy, tmp_path):
    with_wal = fixture_copy("wal-newest.db", "with-wal")
    main_only = tmp_path / "main-only" / "wal-newest.db"
    main_only.parent.mkdir()
    main_only.write_bytes(with_wal.read_bytes())
    full = migrate_api(with_wal, tmp_path / "a" / "lcm.sqlite")
    partial = migrate_api(main_only, tmp_path / "b" / "lcm.sqlite")
    assert (full["messages"]["inserted"], full["parts"]["inserted"], full["summaries"]["inserted"]) == (34, 43, 2)
    assert (partial["messages"]["inserted"], partial["parts"]["inserted"], partial["summaries"]["inserted"]) == (20, 25, 1)
    with open_db(tmp_path / "a" / "lcm.sqlite") as con:
        sessions = dict(con.execute("SELECT session_id, count(*) FROM lcm_messages GROUP BY 1").fetchall())
    assert sessions == {"a08ff49b-6f77-4632-a16c-43069c43a8c3": 30, "f80f8a0c-ccee-40a7-a892-b284361060a2": 4}
    # the oracle (SQLite reading the copy with its -wal) agrees row for row
    src = oracle("wal-newest.db", tmp_path / "oracle")
    assert len(source_messages(src)) == 34


NATIVE_SESSION = "a08ff49b-6f77-4632-a16c-43069c43a8c3"


def add_native_rows(con, session: str, n: int) -> int:
    tokens = 0
    for turn in range(n):
        text = f"native remnic turn {turn} zebrafish"
        con.execute("INSERT INTO lcm_messages (session_id, turn_index, role, content, token_count, created_at, "
                    "metadata) VALUES (?, ?, ?, ?, ?, ?, NULL)",
                    (session, turn, "user" if turn % 2 == 0 else "assistant", text, len(text) // 4 + 1,
                     f"2027-01-01T00:00:0{turn}.000Z"))
        rid = con.execute("SELECT last_insert_rowid()").fetchone()[0]
        con.execute("INSERT INTO lcm_messages_fts (rowid, content) VALUES (?, ?)", (rid, text))
        tokens += len(text) // 4 + 1
    con.execute("INSERT INTO lcm_summary_nodes (id, session_id, depth, parent_id, summary_text, token_count, "
                "msg_start, msg_end, escalation, created_at) VALUES ('native-leaf', ?, 0, NULL, 'native', 1, 0, ?, 0, "
                "'2027-01-01T00:00:09.000Z')", (session, n - 1))
    return tokens


def test_import_into_a_session_with_native_remnic_rows_is_appended_after_them(fixture_copy, tmp_path):
    src = fixture_copy("basic-0.15.3.db")
    dest = tmp_path / "memory" / "state" / "lcm.sqlite"
    con = make_native_target(dest)
    native_tokens = add_native_rows(con, NATIVE_SESSION, 5)
    native = con.execute("SELECT * FROM lcm_messages ORDER BY id").fetchall()
    con.close()

    report = migrate_api(src, dest)
    assert report["messages"]["inserted"] == fixture_rows("basic-0.15.3.db")
    with open_db(dest) as tgt:
        assert [tuple(r) for r in tgt.execute("SELECT * FROM lcm_messages WHERE id <= 5 ORDER BY id")] == \
            [tuple(r) for r in native]
        src_con = oracle("basic-0.15.3.db", tmp_path / "oracle")
        rows = target_messages(tgt)
        session_msgs = [m for m in source_messages(src_con) if m["session"] == NATIVE_SESSION]
        turns = [rows[(str(m["conversation_id"]), m["seq"])]["turn_index"] for m in session_msgs]
        assert turns == list(range(5, 5 + len(session_msgs)))
        other = [m for m in source_messages(src_con) if m["session"] != NATIVE_SESSION]
        assert min(rows[(str(m["conversation_id"]), m["seq"])]["turn_index"] for m in other) == 0
        # summaries of that session are ranged over the shifted turns
        lo, = tgt.execute("SELECT min(msg_start) FROM lcm_summary_nodes WHERE session_id = ? AND id <> 'native-leaf'",
                          (NATIVE_SESSION,)).fetchone()
        assert lo >= 5
        ev = tgt.execute("SELECT msg_before, tokens_before, tokens_after FROM lcm_compaction_events "
                         "WHERE session_id = ?", (NATIVE_SESSION,)).fetchall()
        imported_tokens = sum(m["token_count"] for m in session_msgs)
        assert [tuple(e) for e in ev] == [(5 + len(session_msgs), native_tokens + imported_tokens,
                                           native_tokens + imported_tokens)]
        hits = tgt.execute("SELECT count(*) FROM lcm_messages_fts WHERE lcm_messages_fts MATCH 'zebrafish'").fetchone()[0]
        assert hits == 5
        tgt.execute("INSERT INTO lcm_messages_fts(lcm_messages_fts, rank) VALUES ('integrity-check', 1)")
        assert tgt.execute("PRAGMA foreign_key_check").fetchall() == []

    again = migrate_api(src, dest)
    assert again["messages"]["inserted"] == again["parts"]["inserted"] == again["summaries"]["inserted"] == 0
    assert again["boundary_events"] == 0


def test_a_session_filtered_run_then_a_full_run_imports_the_rest_once(fixture_copy, tmp_path):
    src = fixture_copy("basic-0.9.4.db")
    dest = tmp_path / "out" / "lcm.sqlite"
    one = migrate_api(src, dest, session_filter=["b7cf3c25-632b-4240-ad3f-b64afebede10"])
    assert one["messages"]["inserted"] == 41
    rest = migrate_api(src, dest)
    assert rest["messages"]["inserted"] == 81 and rest["messages"]["already_present"] == 41
    assert rest["sessions_touched"] == ["a08ff49b-6f77-4632-a16c-43069c43a8c3", "d4e8eb2a-f2f2-4165-a881-cd424e42a851"]
    with open_db(dest) as con:
        assert con.execute("SELECT count(*) FROM lcm_messages").fetchone()[0] == 122
        assert con.execute("SELECT count(*) FROM lcm_compaction_events").fetchone()[0] == 3


def content_of(path) -> dict:
    """The target's content without row ids (which depend on write order)."""
    with open_db(path) as con:
        msgs = sorted(tuple(r) for r in con.execute(
            "SELECT session_id, turn_index, role, content, token_count, created_at, metadata FROM lcm_messages"))
        parts = sorted(tuple(r) for r in con.execute(
            "SELECT m.session_id, m.turn_index, p.ordinal, p.kind, p.payload, p.tool_name, p.file_path, p.created_at "
            "FROM lcm_message_parts p JOIN lcm_messages m ON m.id = p.message_id"))
        sums = sorted(tuple(r) for r in con.execute(
            "SELECT id, session_id, depth, parent_id, summary_text, token_count, msg_start, msg_end, created_at "
            "FROM lcm_summary_nodes"))
        events = sorted(tuple(r) for r in con.execute(
            "SELECT session_id, msg_before, tokens_before, tokens_after FROM lcm_compaction_events"))
        fts = con.execute("SELECT count(*) FROM lcm_messages_fts").fetchone()[0]
    return {"messages": msgs, "parts": parts, "summaries": sums, "events": events, "fts": fts}


def test_small_write_batches_on_an_existing_target_give_the_same_content_as_one_batch(imported, tmp_path):
    # with 100 rows per batch the basic-* fixtures' sessions are cut into several batches; the other side is a
    # new target, built in one transaction (parts finished beside the writer and copied with their indexes)
    dest = tmp_path / "chunked" / "lcm.sqlite"
    make_native_target(dest).close()            # an existing target is written batch by batch
    report = migrate_api(imported.source, dest, batch_rows=100)
    assert report["messages"]["inserted"] == imported.report["messages"]["inserted"]
    assert content_of(dest) == content_of(imported.target)
    with open_db(dest) as con:
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    assert imported.tgt.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_version_1_remnic_target_is_upgraded_and_the_import_appended_after_its_rows(fixture_copy, tmp_path):
    src = fixture_copy("multiparent-newest.db")
    dest = tmp_path / "mem" / "state" / "lcm.sqlite"
    con = make_native_target(dest)
    con.execute("DROP TABLE lcm_message_parts")             # a v1 database predates lcm_message_parts
    con.execute("UPDATE lcm_meta SET value = '1' WHERE key = 'schema_version'")
    native_tokens = add_native_rows(con, NATIVE_SESSION, 3)
    con.close()
    report = migrate_api(src, dest)
    want = {"messages": fixture_rows("multiparent-newest.db"), "parts": fixture_rows("multiparent-newest.db",
                                                                                   "message_parts")}
    assert report["messages"]["inserted"] == want["messages"] and report["parts"]["inserted"] == want["parts"]
    with open_db(dest) as con:
        assert con.execute("SELECT value FROM lcm_meta WHERE key = 'schema_version'").fetchone()[0] == "2"
        assert con.execute("SELECT count(*) FROM lcm_message_parts").fetchone()[0] == want["parts"]
        assert tuple(con.execute("SELECT min(turn_index), max(turn_index) FROM lcm_messages WHERE session_id = ? "
                                 "AND metadata IS NOT NULL", (NATIVE_SESSION,)).fetchone()) == (3, 3 + 36 - 1)
        ev = con.execute("SELECT tokens_before FROM lcm_compaction_events WHERE session_id = ?",
                         (NATIVE_SESSION,)).fetchone()[0]
        assert ev == native_tokens + 1232
    again = migrate_api(src, dest)
    assert again["messages"]["inserted"] == again["parts"]["inserted"] == again["summaries"]["inserted"] == 0


def test_a_new_target_is_planned_as_one_batch_whatever_batch_rows_says(fixture_copy, tmp_path):
    # a new target is built in one transaction, so its plan (and the dry run's) says one batch
    src = fixture_copy("basic-0.15.3.db")
    dest = tmp_path / "new" / "lcm.sqlite"
    dry = migrate_api(src, dest, batch_rows=5, dry_run=True)
    real = migrate_api(src, dest, batch_rows=5)
    assert dry["batches"] == real["batches"] == 1
    assert real["messages"]["inserted"] > 5
    again = tmp_path / "again" / "lcm.sqlite"
    make_native_target(again).close()   # an existing (empty) target is still cut into batches
    assert migrate_api(src, again, batch_rows=5)["batches"] > 1


# Times SQLite's strftime and DuckDB's TIMESTAMPTZ cast read differently (an offset without minutes, a
# fraction SQLite rounds up and DuckDB cuts, a slash date, a Julian day number) beside one both read alike.
TIMES_THE_ENGINES_READ_DIFFERENTLY = ["2026-03-01 10:00:00+02", "2026-03-01T10:00:00.9999Z",
                                      "2026/03/01 10:00:00", "2460000.5", "2026-03-01 10:00:00"]


def test_a_new_target_gives_parts_their_messages_time_as_the_plan_wrote_it_where_the_engines_disagree(
        fixture_copy, tmp_path):
    src = fixture_copy("basic-0.15.3.db")
    with sqlite3.connect(src) as con:
        owners = [r[0] for r in con.execute("SELECT DISTINCT message_id FROM message_parts ORDER BY message_id "
                                            f"LIMIT {len(TIMES_THE_ENGINES_READ_DIFFERENTLY)}")]
        for message_id, when in zip(owners, TIMES_THE_ENGINES_READ_DIFFERENTLY):
            con.execute("UPDATE messages SET created_at = ? WHERE message_id = ?", (when, message_id))
    fresh = tmp_path / "new" / "lcm.sqlite"
    migrate_api(src, fresh)
    with open_db(fresh) as con:
        times = dict(con.execute("SELECT id, created_at FROM lcm_messages WHERE id IN (%s)" % ",".join("?" * len(owners)),
                                 owners).fetchall())
        assert times[owners[0]] == "2026-03-01T08:00:00.000Z"   # DuckDB's reading, which the message row holds
        assert times[owners[1]] == "2026-03-01T10:00:00.999Z"
        stale = con.execute("SELECT count(*) FROM lcm_message_parts p JOIN lcm_messages m ON m.id = p.message_id "
                            "WHERE p.created_at <> m.created_at").fetchone()[0]
        assert stale == 0   # this release's parts have no time of their own: each takes its message's
    batched = tmp_path / "batched" / "lcm.sqlite"
    make_native_target(batched).close()
    migrate_api(src, batched, batch_rows=100)
    assert content_of(fresh) == content_of(batched)
