"""Per-fixture faithfulness. Every fixture DB is migrated into a fresh target once per test session (the
`imported` fixture of conftest.py: a dry run, then the real run) and the target is compared with
expectations computed here, with sqlite3 and Python, from a private copy of the source (never by
calling the product's transforms)."""
from __future__ import annotations

import datetime as dt
import json
import re

from conftest import ISO_MS, columns, comparable, facts, resolve_session, source_messages, target_messages


def conversation_sessions(src) -> dict:
    key = "session_key" if "session_key" in columns(src, "conversations") else "NULL"
    return {r[0]: resolve_session(r[0], r[1], r[2])
            for r in src.execute(f"SELECT conversation_id, session_id, {key} FROM conversations")}


def turns_by_source_message(src, tgt) -> dict:
    """source message_id -> target turn_index (through the dedup identity kept in metadata)."""
    rows = target_messages(tgt)
    out = {}
    for mid, cid, seq in src.execute("SELECT message_id, conversation_id, seq FROM messages"):
        row = rows.get((str(cid), seq))
        if row is not None:
            out[mid] = row["turn_index"]
    return out


def expected_summaries(src, tgt) -> dict:
    """Summary ranges and parents (docs/mapping.md) computed in Python: summary_id -> (session, msg_start, msg_end, parent_id, candidates)."""
    conv_session = conversation_sessions(src)
    msg_session = {mid: conv_session.get(cid) for mid, cid in src.execute("SELECT message_id, conversation_id FROM messages")}
    turn = turns_by_source_message(src, tgt)
    summaries = {r["summary_id"]: dict(r) for r in src.execute("SELECT * FROM summaries")}
    linked: dict[str, set] = {s: set() for s in summaries}
    for sid, mid in src.execute("SELECT summary_id, message_id FROM summary_messages"):
        linked.setdefault(sid, set()).add(mid)
    edges = src.execute("SELECT summary_id, parent_summary_id, ordinal FROM summary_parents").fetchall()
    below: dict[str, set] = {}
    for cover, source, _ in edges:
        below.setdefault(cover, set()).add(source)

    def closure(sid):
        seen, stack = set(), [sid]
        while stack:
            x = stack.pop()
            if x not in seen:
                seen.add(x)
                stack.extend(below.get(x, ()))
        return seen

    ranges = {}
    for sid, s in summaries.items():
        session = conv_session.get(s["conversation_id"])
        if session is None:
            continue
        msgs = {m for node in closure(sid) for m in linked.get(node, ())}
        own = [turn[m] for m in msgs if msg_session.get(m) == session and m in turn]
        if own:
            ranges[sid] = (session, min(own), max(own))
    out = {}
    for sid, (session, lo, hi) in ranges.items():
        cands = sorted((ordinal, cover) for cover, source, ordinal in edges
                       if source == sid and cover in ranges and ranges[cover][0] == session)
        out[sid] = (session, lo, hi, cands[0][1] if cands else None, len(cands))
    return out


def test_every_source_message_lands_once_with_equal_role_content_tokens_and_instant(imported):
    src_rows = source_messages(imported.src)
    tgt = target_messages(imported.tgt)
    assert imported.tgt.execute("SELECT count(*) FROM lcm_messages").fetchone()[0] == len(src_rows)
    assert len(tgt) == len(src_rows)
    for m in src_rows:
        t = tgt[(str(m["conversation_id"]), m["seq"])]
        assert (t["session_id"], t["role"], t["content"], t["token_count"]) == \
            (m["session"], m["role"], m["content"], m["token_count"]), (m["message_id"])
        assert isinstance(t["content"], str) and t["content"].encode("utf-8") == m["content"].encode("utf-8")
        assert re.match(ISO_MS, t["created_at"]), t["created_at"]
        got = dt.datetime.fromisoformat(t["created_at"].replace("Z", "+00:00"))
        assert got == m["ts"]


def test_message_metadata_carries_the_source_identity_and_title(imported):
    tgt = target_messages(imported.tgt)
    key_col = "session_key" if "session_key" in columns(imported.src, "conversations") else "NULL"
    hash_col = "m.identity_hash" if "identity_hash" in columns(imported.src, "messages") else "NULL"
    key = "c.session_key" if key_col == "session_key" else "NULL"
    rows = imported.src.execute(f"""SELECT m.conversation_id, m.seq, m.created_at, c.title, {key} AS k,
                                           {hash_col} AS h
                                    FROM messages m JOIN conversations c USING (conversation_id)""").fetchall()
    for r in rows:
        raw = imported.tgt.execute("SELECT metadata FROM lcm_messages WHERE id = ?",
                                   (tgt[(str(r["conversation_id"]), r["seq"])]["id"],)).fetchone()[0]
        assert raw == json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))  # compact JSON
        meta = json.loads(raw)
        assert meta["source"] == "lossless-claw"
        assert meta["conversation_id"] == r["conversation_id"]
        assert meta["source_seq"] == r["seq"]
        assert meta["title"] == r["title"]
        assert meta["identity_hash"] == r["h"]
        if r["k"] is not None:
            assert meta["session_key"] == r["k"]
        created = tgt[(str(r["conversation_id"]), r["seq"])]["created_at"]
        if created != r["created_at"]:
            assert meta["source_created_at"] == r["created_at"]


def test_turn_index_strictly_follows_time_then_conversation_then_seq_per_session(imported):
    tgt = target_messages(imported.tgt)
    by_session: dict[str, list] = {}
    for m in source_messages(imported.src):   # already sorted by (session, time, conversation, seq)
        by_session.setdefault(m["session"], []).append(tgt[(str(m["conversation_id"]), m["seq"])]["turn_index"])
    for session, turns in by_session.items():
        assert turns == list(range(len(turns))), session   # a fresh target: 0..n-1 in exactly this order
    native = imported.tgt.execute(
        "SELECT session_id, count(*), count(DISTINCT turn_index) FROM lcm_messages GROUP BY 1").fetchall()
    assert all(n == d for _, n, d in native)


def test_every_non_null_value_of_every_part_is_in_its_target_row(imported):
    src, tgt = imported.src, imported.tgt
    tmsg = target_messages(tgt)
    ids = {}
    for mid, cid, seq in src.execute("SELECT message_id, conversation_id, seq FROM messages"):
        ids[mid] = tmsg[(str(cid), seq)]
    tparts = {(r["message_id"], r["ordinal"]): dict(r) for r in tgt.execute("SELECT * FROM lcm_message_parts")}
    sparts = src.execute("SELECT * FROM message_parts").fetchall()
    assert len(tparts) == len(sparts) == tgt.execute("SELECT count(*) FROM lcm_message_parts").fetchone()[0]
    for p in sparts:
        owner = ids[p["message_id"]]
        t = tparts[(owner["id"], p["ordinal"])]
        payload = json.loads(t["payload"])
        assert isinstance(payload, dict)
        for col in p.keys():
            value = p[col]
            if value is None or col in ("message_id", "ordinal"):
                continue
            if col == "tool_name":
                assert t["tool_name"] == value
            elif col == "part_type":
                assert t["kind"] == value or (value == "tool" and t["kind"] in ("tool_call", "tool_result"))
            else:
                assert payload.get(col) == value, (p["part_id"], col)
        if p["part_type"] != "tool":
            assert t["kind"] == p["part_type"]
        for col in ("file_url", "file_name"):
            if p[col] is not None:
                assert t["file_path"] is not None
        assert t["created_at"] == owner["created_at"]   # lossless-claw parts have no created_at of their own


def test_summary_ranges_and_parent_links_follow_spec_3_5_and_3_6(imported):
    want = expected_summaries(imported.src, imported.tgt)
    got = {r["id"]: dict(r) for r in imported.tgt.execute("SELECT * FROM lcm_summary_nodes")}
    assert set(got) == set(want)
    src_sum = {r["summary_id"]: r for r in imported.src.execute("SELECT * FROM summaries")}
    for sid, (session, lo, hi, parent, _) in want.items():
        row = got[sid]
        assert (row["session_id"], row["msg_start"], row["msg_end"], row["parent_id"]) == (session, lo, hi, parent), sid
        assert (row["depth"], row["summary_text"], row["token_count"]) == \
            (src_sum[sid]["depth"], src_sum[sid]["content"], src_sum[sid]["token_count"])
    r = imported.report
    assert r["summaries"]["inserted"] == len(want)
    assert sum(r["summaries"]["skipped"].values()) == len(src_sum) - len(want)
    assert sorted(s["summary_id"] for s in r["skipped_summaries"]) == sorted(set(src_sum) - set(want))
    assert r["collapsed_parents"] == sum(1 for w in want.values() if w[4] > 1)


def test_condensed_summaries_are_imported_not_dropped(imported):
    kinds = dict(imported.src.execute("SELECT kind, count(*) FROM summaries GROUP BY kind").fetchall())
    got = imported.tgt.execute("SELECT count(*) FROM lcm_summary_nodes WHERE depth > 0").fetchone()[0]
    want = expected_summaries(imported.src, imported.tgt)
    condensed = {r[0] for r in imported.src.execute("SELECT summary_id FROM summaries WHERE kind = 'condensed'")}
    assert got == sum(1 for s in want if s in condensed)
    if kinds.get("condensed"):
        assert any(s in condensed for s in want)


def test_each_session_gets_one_boundary_event_with_its_token_sum_and_next_turn(imported):
    sums: dict[str, list] = {}
    for m in source_messages(imported.src):
        s = sums.setdefault(m["session"], [0, 0])
        s[0] += m["token_count"]
        s[1] += 1
    events = imported.tgt.execute(
        "SELECT session_id, msg_before, tokens_before, tokens_after FROM lcm_compaction_events").fetchall()
    assert sorted(e[0] for e in events) == sorted(sums)
    for session, msg_before, before, after in events:
        assert before == after == sums[session][0]
        assert msg_before == sums[session][1]
    assert imported.report["boundary_events"] == len(sums)
    assert sorted(imported.report["sessions_touched"]) == sorted(sums)


def test_per_session_token_sums_match_the_fixture_facts(imported):
    want = {}
    for c in facts(imported.name)["conversations"]:
        s = resolve_session(c["conversation_id"], c["session_id"])
        want[s] = want.get(s, 0) + c["token_sum"]
    got = dict(imported.tgt.execute("SELECT session_id, sum(token_count) FROM lcm_messages GROUP BY 1").fetchall())
    assert got == {s: n for s, n in want.items() if n or s in got}


def test_fts_match_finds_imported_text_and_integrity_check_passes(imported):
    tgt = imported.tgt
    tgt.execute("INSERT INTO lcm_messages_fts(lcm_messages_fts, rank) VALUES ('integrity-check', 1)")
    tgt.execute("INSERT INTO lcm_summaries_fts(lcm_summaries_fts, rank) VALUES ('integrity-check', 1)")
    probed = 0
    for table, fts, col, key in (("lcm_messages", "lcm_messages_fts", "content", "id"),
                                 ("lcm_summary_nodes", "lcm_summaries_fts", "summary_text", "rowid")):
        for rid, text in tgt.execute(f"SELECT {key}, {col} FROM {table}").fetchall():
            words = [w for w in re.findall(r"[^\W_]+", text) if re.fullmatch(r"[A-Za-z]{4,}", w)]
            if not words:
                continue
            word = max(words, key=len)
            hits = {r[0] for r in tgt.execute(f"SELECT rowid FROM {fts} WHERE {fts} MATCH ?", (f'"{word}"',))}
            assert rid in hits, (table, rid, word)
            probed += 1
    assert probed > 0


def test_foreign_key_check_is_empty_and_schema_is_remnic_version_2(imported):
    tgt = imported.tgt
    assert tgt.execute("PRAGMA foreign_key_check").fetchall() == []
    assert tgt.execute("SELECT value FROM lcm_meta WHERE key = 'schema_version'").fetchone()[0] == "2"
    assert tgt.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert tgt.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_report_counters_equal_the_rows_in_the_target(imported):
    r, tgt = imported.report, imported.tgt
    assert r["dry_run"] is False
    assert r["messages"]["inserted"] == tgt.execute("SELECT count(*) FROM lcm_messages").fetchone()[0]
    assert r["parts"]["inserted"] == tgt.execute("SELECT count(*) FROM lcm_message_parts").fetchone()[0]
    assert r["summaries"]["inserted"] == tgt.execute("SELECT count(*) FROM lcm_summary_nodes").fetchone()[0]
    assert r["messages"]["already_present"] == r["parts"]["already_present"] == 0
    assert r["warnings"] == []


def test_conversations_and_large_files_are_kept_in_provenance(imported):
    src, tgt = imported.src, imported.tgt
    convs = {r["conversation_id"]: r["title"] for r in src.execute("SELECT conversation_id, title FROM conversations")}
    kept = dict(tgt.execute("SELECT conversation_id, title FROM lcm_etl_conversations").fetchall())
    assert kept == convs
    n_files = src.execute("SELECT count(*) FROM large_files").fetchone()[0] \
        if src.execute("SELECT 1 FROM sqlite_master WHERE name = 'large_files'").fetchone() else 0
    assert tgt.execute("SELECT count(*) FROM lcm_etl_large_files").fetchone()[0] == n_files
    assert tgt.execute("SELECT count(*) FROM lcm_etl_runs").fetchone()[0] == 1


def test_a_dry_run_reports_exactly_what_the_real_run_then_does_and_creates_nothing(imported):
    assert imported.dry["dry_run"] is True
    assert imported.target_folder_after_dry_run is False
    assert comparable(imported.dry) == comparable(imported.report)


def test_the_source_bytes_are_unchanged_and_no_file_appears_beside_it(imported):
    assert imported.source_files_after == imported.source_files_before


def test_a_new_target_keeps_integer_source_message_ids_as_its_ids(imported):
    # every lossless-claw release declares messages.message_id INTEGER PRIMARY KEY (TEXT ids: test_sources.py)
    declared = [r[2].upper() for r in imported.src.execute("PRAGMA table_info(messages)")
                if r[1] == "message_id" and r[5]]
    assert declared == ["INTEGER"]
    ids = [(r[0], json.loads(r[1])["source_message_id"])
           for r in imported.tgt.execute("SELECT id, metadata FROM lcm_messages ORDER BY id")]
    assert ids and all(tid == sid for tid, sid in ids)
