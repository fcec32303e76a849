"""What lossless-claw changes in rows it already wrote (docs/mapping.md, "When the source changes"), applied
to a migrated source with the statements the plugin runs, then a re-run: never a duplicate, never a lost
target row, FTS in step, the change counted in the report and in the ledger; `audit` clean afterwards.
The policy for each change is stated in docs/mapping.md ("When the source changes")."""
from __future__ import annotations

import json
import os
import sqlite3

import pytest

from conftest import copy_fixture, fixture_rows, migrate_api, open_db, run_cli

FIXTURE = "basic-0.15.3.db"


@pytest.fixture
def synced(tmp_path):
    src = copy_fixture(FIXTURE, tmp_path / "src")
    target = tmp_path / "out" / "lcm.sqlite"
    migrate_api(src, target)
    return src, target


def change(src, *statements) -> None:
    con = sqlite3.connect(src)
    with con:
        for sql, *args in statements:
            con.execute(sql, *args)
    con.close()


def resync(src, target, **options) -> dict:
    report = migrate_api(src, target, **options)
    proc = run_cli("audit", "--src", src, "--dest", target, "--json", *(
        ["--key-by", options["key_by"]] if "key_by" in options else []))
    assert proc.returncode == 0, proc.stdout
    return report


def count(target, sql="SELECT count(*) FROM lcm_messages", *args) -> int:
    con = open_db(target)
    try:
        return con.execute(sql, args).fetchone()[0]
    finally:
        con.close()


def last_ledger_counts(target) -> dict:
    con = open_db(target)
    try:
        return json.loads(con.execute("SELECT counts FROM lcm_etl_runs ORDER BY rowid DESC LIMIT 1").fetchone()[0])
    finally:
        con.close()


def test_a_summary_the_doctor_rewrote_is_updated_with_its_search_index(synced):
    src, target = synced
    sid = count(target, "SELECT id FROM lcm_summary_nodes ORDER BY id LIMIT 1")
    # /lcm doctor apply: src/plugin/lcm-doctor-apply.ts writes content and token_count, keeps the id
    change(src, ("UPDATE summaries SET content = 'Zanzibarquux repaired summary', token_count = 7 "
                 "WHERE summary_id = ?", (sid,)))
    before = count(target, "SELECT count(*) FROM lcm_summary_nodes")
    report = resync(src, target)
    assert (report["summaries"]["updated"], report["summaries"]["inserted"]) == (1, 0)
    assert count(target, "SELECT count(*) FROM lcm_summary_nodes") == before
    assert count(target, "SELECT token_count FROM lcm_summary_nodes WHERE id = ?", sid) == 7
    assert count(target, "SELECT count(*) FROM lcm_summaries_fts WHERE lcm_summaries_fts MATCH 'Zanzibarquux'") == 1
    con = open_db(target)
    con.execute("INSERT INTO lcm_summaries_fts(lcm_summaries_fts) VALUES ('integrity-check')")
    con.close()
    assert last_ledger_counts(target)["written"]["summaries_updated"] == 1


def test_the_rollover_split_repair_moves_messages_without_duplicating_them(synced):
    src, target = synced
    before = count(target)
    # /lcm doctor apply rollover-splits: conversation 3's rows move into conversation 2, and every message of
    # the group is renumbered 1..n (sources first, then the target's own), summaries follow
    change(src,
           ("CREATE TEMP TABLE renum AS SELECT message_id, row_number() OVER "
            "(ORDER BY conversation_id = 2, seq, message_id) AS seq FROM messages WHERE conversation_id IN (2, 3)",),
           ("UPDATE messages SET seq = -(seq + 1000 * conversation_id) WHERE conversation_id IN (2, 3)",),
           ("UPDATE messages SET conversation_id = 2 WHERE conversation_id = 3",),
           ("UPDATE messages SET seq = (SELECT r.seq FROM renum r WHERE r.message_id = messages.message_id) "
            "WHERE conversation_id = 2",),
           ("UPDATE summaries SET conversation_id = 2 WHERE conversation_id = 3",))
    report = resync(src, target)
    assert report["messages"]["inserted"] == 0
    assert report["messages"]["updated"] == 81 and report["changes"]["moved"] == 81
    assert count(target) == before
    # the moved rows name their new place in the source
    assert count(target, "SELECT count(*) FROM lcm_messages WHERE json_extract(metadata, '$.conversation_id') = 3") == 0
    assert last_ledger_counts(target)["written"]["messages_updated"] == 81


def test_entry_ids_and_sender_metadata_filled_in_later_are_refreshed(synced):
    src, target = synced
    mid = count(target.parent.parent / "src" / FIXTURE, "SELECT min(message_id) FROM messages "
                "WHERE transcript_entry_id IS NULL AND role = 'user'")
    # adoption (src/store/conversation-store.ts): the entry id, and sender metadata only where it was NULL
    change(src, ("UPDATE messages SET transcript_entry_id = 'entry-adopted-1', openclaw_sender_metadata = "
                 "coalesce(openclaw_sender_metadata, '{\"sender\":\"x\"}') WHERE message_id = ? "
                 "AND transcript_entry_id IS NULL", (mid,)))
    report = resync(src, target)
    assert (report["messages"]["inserted"], report["messages"]["updated"]) == (0, 1)
    assert report["changes"]["transcript_entry_id"] == 1
    assert count(target, "SELECT count(*) FROM lcm_messages WHERE "
                         "json_extract(metadata, '$.transcript_entry_id') = 'entry-adopted-1'") == 1


def test_an_identity_hash_backfill_is_refreshed(synced):
    src, target = synced
    change(src, ("UPDATE messages SET identity_hash = 'rehashed-' || message_id WHERE conversation_id = 1",))
    report = resync(src, target)
    assert (report["messages"]["inserted"], report["messages"]["updated"]) == (0, 41)
    assert report["changes"] == {"identity_hash": 41}


def test_a_pruned_heartbeat_turn_stays_and_the_message_that_reuses_its_seq_is_imported(synced):
    src, target = synced
    before = count(target)
    con = sqlite3.connect(src)
    gone = con.execute("SELECT message_id, seq FROM messages WHERE conversation_id = 1 AND message_id NOT IN "
                       "(SELECT message_id FROM summary_messages) ORDER BY seq DESC LIMIT 1").fetchone()
    con.close()
    # pruneHeartbeatOkTurns deletes the turn; the next ingested message takes MAX(seq)+1 = the deleted seq
    change(src, ("DELETE FROM message_parts WHERE message_id = ?", (gone[0],)),
           ("DELETE FROM messages WHERE message_id = ?", (gone[0],)),
           ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
            "VALUES (1, (SELECT max(seq) + 1 FROM messages WHERE conversation_id = 1), 'user', "
            "'a later question', 4, '2030-01-01 00:00:00')",))
    report = resync(src, target)
    assert report["messages"]["inserted"] == 1
    assert count(target) == before + 1
    assert count(target, "SELECT count(*) FROM lcm_messages WHERE json_extract(metadata, '$.source_message_id') = ?",
                 gone[0]) == 1


def test_a_conversation_rebound_to_a_new_session_id_keeps_its_history_in_one_session(synced):
    src, target = synced
    before = count(target)
    old = count(target, "SELECT session_id FROM lcm_messages WHERE json_extract(metadata, '$.conversation_id') = 2 "
                        "LIMIT 1")
    # getOrCreateConversation's silent rebind by session key, then a new turn
    change(src, ("UPDATE conversations SET session_id = 'rebound-session' WHERE conversation_id = 2",),
           ("INSERT INTO messages (conversation_id, seq, role, content, token_count, created_at) "
            "VALUES (2, 42, 'user', 'after the rebind', 3, '2030-01-01 00:00:00')",))
    report = resync(src, target)
    assert report["messages"]["inserted"] == 1 and report["sessions_kept"] == 1
    assert count(target) == before + 1
    assert count(target, "SELECT count(*) FROM lcm_messages WHERE session_id = 'rebound-session'") == 0
    assert count(target, "SELECT count(*) FROM lcm_messages WHERE session_id = ? AND content = 'after the rebind'",
                 old) == 1
    assert count(target, "SELECT source_session_id FROM lcm_etl_conversations WHERE conversation_id = 2") \
        == "rebound-session"


def test_an_archived_conversation_and_its_replacement_are_recorded(synced):
    src, target = synced
    change(src, ("UPDATE conversations SET active = 0, archived_at = '2030-01-01 00:00:00', "
                 "archive_cause = 'manual-reset', updated_at = '2030-01-01 00:00:00' WHERE conversation_id = 1",),
           ("INSERT INTO conversations (session_id, session_key, title, active, created_at, updated_at) "
            "SELECT session_id, session_key, title, 1, '2030-01-01 00:00:01', '2030-01-01 00:00:01' "
            "FROM conversations WHERE conversation_id = 1",))
    report = resync(src, target)
    assert report["conversations_changed"] == 2
    assert report["messages"]["inserted"] == 0
    assert count(target, "SELECT archive_cause FROM lcm_etl_conversations WHERE conversation_id = 1") == "manual-reset"


def test_changing_key_by_between_runs_imports_nothing_twice(synced):
    src, target = synced
    before = count(target)
    report = resync(src, target, key_by="session-key")
    assert report["messages"]["inserted"] == 0 and report["summaries"]["inserted"] == 0
    assert count(target) == before == 122


def test_two_different_files_sharing_conversation_ids_and_seqs_are_both_kept(synced, tmp_path):
    src, target = synced
    other = copy_fixture(FIXTURE, tmp_path / "other")
    # another installation's lcm.db: same ids and seqs, other messages (another day, other words)
    change(other, ("UPDATE messages SET content = 'elsewhere: ' || content, "
                   "created_at = datetime(created_at, '+1 day')",))
    report = migrate_api(other, target)
    assert report["messages"]["inserted"] == fixture_rows(FIXTURE)
    assert count(target) == 244


# --------------------------------------------------------------------------------------------------
# one policy for a source row whose id and instant match an imported row but whose values do not (issue 24
# items 8 and 9): it is another message, imported beside the imported row, which is kept as it was

def _row(target, source_message_id: int, content: str | None = None) -> list[tuple]:
    con = open_db(target)
    try:
        return [tuple(r) for r in con.execute(
            "SELECT id, turn_index, content, json_extract(metadata, '$.identity_hash') FROM lcm_messages "
            "WHERE json_extract(metadata, '$.source_message_id') = ? ORDER BY id", (source_message_id,))]
    finally:
        con.close()


def test_a_restored_source_reusing_an_id_within_the_same_second_imports_the_new_message_beside_the_old(synced):
    src, target = synced
    before = count(target)
    con = sqlite3.connect(src)
    mid, conv, seq, created, old_hash = con.execute(
        "SELECT message_id, conversation_id, seq, created_at, identity_hash FROM messages "
        "ORDER BY message_id DESC LIMIT 1").fetchone()
    con.close()
    old = _row(target, mid)
    # restored from a backup taken before message `mid`: its row is gone and AUTOINCREMENT issues its id again,
    # to a new message written within the same second
    change(src, ("DELETE FROM message_parts WHERE message_id = ?", (mid,)),
           ("DELETE FROM messages WHERE message_id = ?", (mid,)),
           ("UPDATE sqlite_sequence SET seq = ? WHERE name = 'messages'", (mid - 1,)),
           ("INSERT INTO messages (conversation_id, seq, role, content, token_count, identity_hash, created_at) "
            "VALUES (?, ?, 'user', 'Wombatquill: a question asked after the restore', 9, 'hash-after-restore', ?)",
            (conv, seq, created)))
    assert count(src, "SELECT max(message_id) FROM messages") == mid
    report = resync(src, target)
    assert report["messages"]["inserted"] == 1 and report["messages"]["updated"] == 0
    assert report["messages_superseded"] == 1 and report["changes"] == {}
    assert count(target) == before + 1
    rows = _row(target, mid)
    assert rows[0] == old[0] and old[0][3] == old_hash   # the imported row keeps its identity
    assert rows[1][2:] == ("Wombatquill: a question asked after the restore", "hash-after-restore")
    assert count(target, "SELECT count(*) FROM lcm_messages_fts WHERE lcm_messages_fts MATCH 'Wombatquill'") == 1
    again = resync(src, target)
    assert (again["messages"]["inserted"], again["messages_superseded"]) == (0, 0)


def test_a_message_edited_in_place_is_pending_in_audit_until_a_migrate_imports_it_beside_the_imported_row(synced):
    src, target = synced
    before = count(target)
    con = sqlite3.connect(src)
    mid = con.execute("SELECT min(l.message_id) FROM summary_messages l JOIN messages m USING (message_id) "
                      "WHERE m.conversation_id = 1").fetchone()[0]
    con.close()
    (old,) = _row(target, mid)
    spans = count(target, "SELECT group_concat(id || ':' || msg_start || '-' || msg_end) FROM lcm_summary_nodes")
    change(src, ("UPDATE messages SET content = 'Quokkaflux: edited by hand' WHERE message_id = ?", (mid,)))
    proc = run_cli("audit", "--src", src, "--dest", target)
    assert proc.returncode == 3
    assert "a migrate would write: 1 message," in proc.stdout
    assert (f"message: differs: content  session a08ff49b-6f77-4632-a16c-43069c43a8c3  1:1  (target id {old[0]}; "
            "a migrate writes the source's row beside it)") in proc.stdout
    report = resync(src, target)   # and audit is clean after it
    assert (report["messages"]["inserted"], report["messages_superseded"]) == (1, 1)
    assert count(target) == before + 1
    old_again, new = _row(target, mid)
    assert old_again == old
    assert new[1:3] == (old[1], "Quokkaflux: edited by hand")   # at the turn of the row it stands beside
    # the summaries over it keep their ranges, and the search index is in step
    assert count(target, "SELECT group_concat(id || ':' || msg_start || '-' || msg_end) FROM lcm_summary_nodes") == spans
    assert count(target, "SELECT count(*) FROM lcm_messages_fts WHERE lcm_messages_fts MATCH 'Quokkaflux'") == 1
    con = open_db(target)
    con.execute("INSERT INTO lcm_messages_fts(lcm_messages_fts) VALUES ('integrity-check')")
    con.close()
    audit = json.loads(run_cli("audit", "--src", src, "--dest", target, "--json").stdout)
    assert audit["extra"]["messages kept, no longer in the source"] == 1
    assert resync(src, target)["messages"]["inserted"] == 0


def test_a_message_edited_in_place_is_found_by_a_re_run_without_the_kept_snapshot(synced):
    # no previous snapshot to compare pages with: the marks decide, and they digest the content too
    src, target = synced
    con = sqlite3.connect(src)
    mid = con.execute("SELECT max(message_id) FROM messages WHERE conversation_id = 2").fetchone()[0]
    con.close()
    change(src, ("UPDATE messages SET content = content || ' (edited)' WHERE message_id = ?", (mid,)))
    env = {**os.environ, "LCM_ETL_CACHE_DIR": "off"}
    proc = run_cli("migrate", "--src", src, "--dest", target, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert "sessions re-planned" in report["sync_decision"]["line"]   # a sync re-run, not a full plan
    assert (report["messages"]["inserted"], report["messages_superseded"]) == (1, 1)
    assert run_cli("audit", "--src", src, "--dest", target, env=env).returncode == 0
