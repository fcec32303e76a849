"""fixtures/generate_store.py makes stores OpenClaw 2026.9.6 appends to as they are.

OpenClaw refused to append to the old generator's stores ("invalid persisted session row requires repair ... run
openclaw doctor --fix"), and its doctor then rewrote their events. The rules OpenClaw applies are asserted here in
Python, not by running OpenClaw (which CI does not have): the generator's port of OpenClaw's transcript index
(tree scan, active path, full-text rows, identities) must give, on every store OpenClaw wrote in fixtures/, exactly
the rows OpenClaw wrote; and a generated store must hold, for every window, the rows those rules give, with no row
that OpenClaw's validation or its doctor would repair. docs/benchmarks.md (History, 2026-11-28) has the command that
appends to a generated store through OpenClaw's own SessionManager.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from conftest import ROOT

GEN_PATH = ROOT / "fixtures" / "generate_store.py"
_spec = importlib.util.spec_from_file_location("lcm_fixture_generate_store", GEN_PATH)
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen
_spec.loader.exec_module(gen)

# every agent database OpenClaw 2026.9.6 wrote among the fixtures (native runs, doctor imports, cold storage,
# evictions, a pending input, profiles and a custom agentDir)
OPENCLAW_STORES = sorted(p for d in ("openclaw-sqlite", "openclaw-hidden")
                         for p in (ROOT / "fixtures" / d).rglob("openclaw-agent.sqlite"))


def _copy(db: Path, tmp: Path) -> sqlite3.Connection:
    """A writable copy of a store and its -wal (the fixture itself is never opened)."""
    tmp.mkdir(parents=True, exist_ok=True)
    dst = tmp / db.name
    shutil.copyfile(db, dst)
    wal = Path(f"{db}-wal")
    if wal.exists():
        shutil.copyfile(wal, f"{dst}-wal")
    return gen.connect(dst)


def _rows(con: sqlite3.Connection, sid: str) -> list:
    out = []
    for seq, ej, ez, created in con.execute("SELECT seq, event_json, event_zstd, created_at FROM transcript_events "
                                            "WHERE session_id = ? ORDER BY seq", (sid,)):
        text = ej if ej is not None else zstandard.ZstdDecompressor().decompress(ez).decode()
        out.append((seq, json.loads(text), created))
    return out


def _stored_index(con: sqlite3.Connection, sid: str) -> dict:
    state = con.execute("SELECT indexed_seq, leaf_event_id, needs_rebuild, active_event_count, active_message_count "
                        "FROM session_transcript_index_state WHERE session_id = ?", (sid,)).fetchone()
    return {
        "active": con.execute("SELECT active_position, event_seq, message_position, context_eligible FROM "
                              "session_transcript_active_events WHERE session_id = ? ORDER BY active_position",
                              (sid,)).fetchall(),
        "fts": con.execute("SELECT f.message_id, f.role, f.text, f.timestamp FROM session_transcript_fts_rows r "
                           "JOIN session_transcript_fts f ON f.rowid = r.id WHERE r.session_id = ? ORDER BY r.id",
                           (sid,)).fetchall(),
        "state": state,
    }


def _expected_index(rows: list) -> dict:
    p = gen.project_window(rows)
    return {"active": p["active"], "fts": p["fts"],
            "state": (p["indexed_seq"], p["leaf_event_id"], 0, p["active_event_count"], p["active_message_count"])}


def _windows(con: sqlite3.Connection) -> list[str]:
    return [r[0] for r in con.execute("SELECT DISTINCT session_id FROM transcript_events ORDER BY session_id")]


@pytest.mark.parametrize("db", OPENCLAW_STORES, ids=lambda p: str(p.relative_to(ROOT / "fixtures").parent.parent))
def test_port_gives_the_rows_openclaw_wrote(db, tmp_path):
    """On every store OpenClaw wrote: the port's active path, full-text rows, index state and identities are
    OpenClaw's own, row for row, and every event's created_at/event_utf8_bytes are as OpenClaw derives them."""
    con = _copy(db, tmp_path)
    checked = 0
    for sid in _windows(con):
        rows = _rows(con, sid)
        stored = _stored_index(con, sid)
        if stored["state"] is None or stored["state"][2] != 0:
            continue      # not indexed (or due a rebuild) when OpenClaw stopped: nothing of OpenClaw's to compare
        assert _expected_index(rows) == stored, sid
        ids = con.execute("SELECT seq, event_id, event_type, parent_id, message_idempotency_key FROM "
                          "transcript_event_identities WHERE session_id = ? ORDER BY seq", (sid,)).fetchall()
        assert ids == [(seq, *gen.identity(e)) for seq, e, _c in rows if gen.identity(e)], sid
        for (seq, e, created), (ej, nbytes) in zip(rows, con.execute(
                "SELECT event_json, event_utf8_bytes FROM transcript_events WHERE session_id = ? ORDER BY seq",
                (sid,))):
            if ej is not None:
                assert nbytes == len(ej.encode()), (sid, seq)
            if gen.iso_ms(e.get("timestamp")) is not None:
                assert created == gen.iso_ms(e["timestamp"]), (sid, seq)
        checked += 1
    con.close()
    assert checked > 0


def test_label_rewrite_matches_the_doctors(tmp_path):
    """The imported fixture was relabelled by OpenClaw's doctor in place: its JSONL original has the legacy form."""
    src = ROOT / "fixtures" / "openclaw-sqlite" / "imported" / "agents" / "main" / "session-sqlite-import-archive"
    original = next(src.glob("agent_main_telegram_direct_*.jsonl.imported-*"))
    legacy = [json.loads(line) for line in original.read_text().splitlines() if "untrusted metadata" in line]
    assert len(legacy) == 4
    con = _copy(ROOT / "fixtures" / "openclaw-sqlite" / "imported" / "agents" / "main" / "agent" /
                "openclaw-agent.sqlite", tmp_path)
    for e in legacy:
        assert gen.has_legacy_labels(e)
        (stored,) = con.execute("SELECT event_json FROM transcript_events WHERE json_extract(event_json, '$.id') = ?",
                                (e["id"],)).fetchone()
        assert gen.relabel(json.loads(json.dumps(e))) == json.loads(stored)
        assert not gen.has_legacy_labels(json.loads(stored))
    con.close()


TEMPLATE_SCHEMA = "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_stat%' ORDER BY name"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A generated store of 3,000 events: six windows of 500, every fixture window's lines replicated in turn."""
    path = tmp_path_factory.mktemp("store") / "openclaw-agent.sqlite"
    assert gen.generate(path, 3000) == 3000
    return path


@pytest.fixture()
def con(store):
    c = gen.connect(store)
    yield c
    c.close()


def _assert_openclaw_rows(c: sqlite3.Connection) -> None:
    """Every row beside the events is the one OpenClaw writes, and nothing is left for its validation or doctor."""
    assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert c.execute("PRAGMA foreign_key_check").fetchall() == []
    # session_nodes as upsertSessionEntry certifies them: entry_valid 1 and nothing queued for validation
    # (session-canonical-key validateCanonicalSessionRow refuses any other row: "invalid persisted session row
    # requires repair")
    nodes = c.execute("SELECT session_key, current_session_id, entry_json, entry_valid, updated_at FROM session_nodes"
                      ).fetchall()
    assert nodes
    for key, sid, entry, valid, updated in nodes:
        assert valid == 1
        assert json.loads(entry) == {"sessionId": sid, "updatedAt": updated, "delivery": {"kind": "none"}}
        assert key.startswith("agent:main:") and key == key.strip().lower()
    assert c.execute("SELECT count(*) FROM session_canonical_validation_pending").fetchone()[0] == 0
    assert c.execute("SELECT count(*) FROM session_windows WHERE transcript_updated_at IS NULL OR "
                     "transcript_observed_at IS NULL OR session_entry_provenance != 1").fetchone()[0] == 0
    assert c.execute("SELECT count(*) FROM session_windows w LEFT JOIN transcript_rewrite_watermarks r USING "
                     "(session_id) WHERE r.generation IS NULL").fetchone()[0] == 0
    fts = 0
    for sid in _windows(c):
        rows = _rows(c, sid)
        # the index OpenClaw keeps with each append: current (indexed to the last seq, no rebuild due), so the next
        # append through SessionManager is indexed forward instead of rebuilding the window
        stored = _stored_index(c, sid)
        assert stored == _expected_index(rows), sid
        assert stored["state"][0] == rows[-1][0]
        fts += len(stored["fts"])
        ids = c.execute("SELECT seq, event_id, event_type, parent_id, message_idempotency_key, created_at FROM "
                        "transcript_event_identities WHERE session_id = ? ORDER BY seq", (sid,)).fetchall()
        created = dict(c.execute("SELECT seq, created_at FROM transcript_events WHERE session_id = ?", (sid,)))
        assert ids == [(seq, *gen.identity(e), created[seq]) for seq, e, _c in rows], sid
        for seq, e, at in rows:
            assert at == gen.iso_ms(e["timestamp"]), (sid, seq)
            assert not gen.has_legacy_labels(e), (sid, seq)
        (updated,) = c.execute("SELECT updated_at FROM session_transcript_index_state WHERE session_id = ?",
                               (sid,)).fetchone()
        assert updated == rows[-1][2]
    # no full-text row of any other window (the template's own were removed with its windows)
    assert c.execute("SELECT count(*) FROM session_transcript_fts_rows").fetchone()[0] == fts
    assert c.execute("SELECT count(*) FROM session_transcript_fts").fetchone()[0] == fts
    for ej, nbytes in c.execute("SELECT event_json, event_utf8_bytes FROM transcript_events WHERE event_json IS NOT NULL"):
        assert nbytes == len(ej.encode())
    # a compressed row's navigation_json (what OpenClaw walks the tree by) names the row's own ids
    for sid, seq, ez, nav in c.execute("SELECT session_id, seq, event_zstd, navigation_json FROM transcript_events "
                                       "WHERE event_zstd IS NOT NULL"):
        e = json.loads(zstandard.ZstdDecompressor().decompress(ez))
        nav = json.loads(nav)
        for part in (nav["report"]["entry"], nav["navigation"], nav["reset"], nav["model"]):
            for k in gen.ID_KEYS:
                if k in part:
                    assert part[k] == e[k], (sid, seq, k)


def test_schema_is_openclaws(con, tmp_path):
    fixture = _copy(gen.TEMPLATE, tmp_path)
    assert con.execute(TEMPLATE_SCHEMA).fetchall() == fixture.execute(TEMPLATE_SCHEMA).fetchall()
    assert con.execute("PRAGMA user_version").fetchone()[0] == 23
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT schema_version, app_version FROM schema_meta").fetchall() == [(23, "2026.9.6")]
    fixture.close()


def test_generated_rows_are_openclaws(con):
    assert con.execute("SELECT count(*) FROM transcript_events").fetchone()[0] == 3000
    assert con.execute("SELECT count(*) FROM session_windows").fetchone()[0] == 6
    # the windows replicate branches, compactions, a rewind's leaf control, a reset and compressed rows
    types = {r[0] for r in con.execute("SELECT json_extract(event_json, '$.type') FROM transcript_events")}
    assert {"leaf", "reset", "compaction", "branch_summary", "message"} <= types
    assert con.execute("SELECT count(*) FROM transcript_events WHERE event_zstd IS NOT NULL").fetchone()[0] > 0
    _assert_openclaw_rows(con)


def test_small_windows(tmp_path):
    path = tmp_path / "s.sqlite"
    assert gen.generate(path, 111, per_window=37) == 111
    c = gen.connect(path)
    assert c.execute("SELECT count(*) FROM session_windows").fetchone()[0] == 3
    _assert_openclaw_rows(c)
    c.close()


def test_append_keeps_the_rows_openclaws(store, tmp_path):
    """generate_store's own append (the bench's fallback where OpenClaw is not installed) writes what OpenClaw's
    appendMessage writes: each turn continues the leaf, and the index is carried forward, not left to rebuild."""
    path = tmp_path / store.name
    shutil.copyfile(store, path)
    c = gen.connect(path)
    leaves = dict(c.execute("SELECT session_id, leaf_event_id FROM session_transcript_index_state"))
    c.close()
    assert gen.append(path, 1) == 30
    c = gen.connect(path)
    _assert_openclaw_rows(c)
    assert c.execute("SELECT count(*) FROM transcript_events").fetchone()[0] == 3030
    for sid, leaf in leaves.items():
        first = c.execute("SELECT parent_id FROM transcript_event_identities WHERE session_id = ? AND "
                          "seq = (SELECT min(seq) FROM transcript_events WHERE session_id = ? "
                          "AND created_at >= 1795000000000)", (sid, sid)).fetchone()
        assert first == (leaf,), sid
    c.close()


def test_cli_and_deterministic(tmp_path, store):
    out = tmp_path / "cli.sqlite"
    subprocess.run([sys.executable, str(GEN_PATH), str(out), "--events", "3000"], check=True, capture_output=True)
    q = "SELECT session_id, seq, event_json, event_zstd, created_at FROM transcript_events ORDER BY 1, 2"
    a, b = sqlite3.connect(out), sqlite3.connect(store)
    assert a.execute(q).fetchall() == b.execute(q).fetchall()
    a.close()
    b.close()


def test_bench_append_fallback_and_its_check(store, tmp_path):
    """bench/openclaw_append.py without OpenClaw: generate_store appends, says so, and its check passes; the check
    catches a rewritten event and an index left for a rebuild."""
    path = tmp_path / store.name
    shutil.copyfile(store, path)
    env = {k: v for k, v in __import__("os").environ.items() if k != "LCM_ETL_BENCH_OPENCLAW"}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "openclaw_append.py"), str(path), "--messages", "25",
                          "--verify"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "appended 25 messages" in out.stdout and "generate_store.py --append-events" in out.stdout
    assert "earlier events unchanged" in out.stdout
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import openclaw_append
    finally:
        sys.path.remove(str(ROOT / "bench"))
    before = openclaw_append.snapshot(path)
    assert openclaw_append.check(path, before, 0) == []
    c = gen.connect(path)
    c.execute("UPDATE transcript_events SET event_json = replace(event_json, 'a', 'b') WHERE seq = 3")
    c.execute("UPDATE session_transcript_index_state SET needs_rebuild = 1 WHERE rowid = 1")
    c.commit()
    c.close()
    problems = openclaw_append.check(path, before, 0)
    assert sum("rewritten" in p for p in problems) == 6 and any("rebuild" in p for p in problems), problems
