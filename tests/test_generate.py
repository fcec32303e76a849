"""Tests for fixtures/generate.py (large lossless-claw source DB generator). No timing assertions."""
from __future__ import annotations

import hashlib
import importlib.util
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEN_PATH = ROOT / "fixtures" / "generate.py"
FIXTURE = ROOT / "fixtures" / "lossless-claw" / "basic-0.15.3.db"
N = 3000

_spec = importlib.util.spec_from_file_location("lcm_fixture_generate", GEN_PATH)
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen
_spec.loader.exec_module(gen)


def _open_copy(src: Path, tmp: Path) -> sqlite3.Connection:
    """Open a copy so no -wal/-shm sidecars appear next to committed fixtures."""
    dst = tmp / src.name
    shutil.copyfile(src, dst)
    return sqlite3.connect(dst)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen")
    path = d / "small.db"
    counts = gen.generate(path, messages=N, seed=7)
    return path, counts


@pytest.fixture()
def con(small):
    c = sqlite3.connect(small[0])
    yield c
    c.close()


@pytest.fixture(scope="module")
def fixture_con(tmp_path_factory):
    c = _open_copy(FIXTURE, tmp_path_factory.mktemp("fx"))
    yield c
    c.close()


def _tables(c):
    return [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


def test_schema_matches_fixture(con, fixture_con):
    assert _tables(con) == _tables(fixture_con)
    for t in _tables(fixture_con):
        assert con.execute(f"PRAGMA table_info('{t}')").fetchall() == \
            fixture_con.execute(f"PRAGMA table_info('{t}')").fetchall(), t
    q = "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_stat%' ORDER BY name"
    assert con.execute(q).fetchall() == fixture_con.execute(q).fetchall()


def test_wal_mode_and_integrity(con):
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # integrity_check also re-verifies NOT NULL and CHECK constraints (skipped during the load)
    assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []


def test_counts_match_request(small, con):
    _, counts = small
    assert counts["messages"] == N
    for t in gen.COUNTED:
        assert con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] == counts[t], t
    assert con.execute("SELECT count(DISTINCT session_id) FROM conversations").fetchone()[0] == max(1, N // 400)
    # ~2.5 parts per message
    assert 2.0 < counts["message_parts"] / N < 3.0
    # FTS filled from the base tables
    assert con.execute("SELECT count(*) FROM messages_fts").fetchone()[0] == \
        con.execute("SELECT count(*) FROM messages WHERE content != ''").fetchone()[0]
    assert con.execute("SELECT count(*) FROM summaries_fts").fetchone()[0] == counts["summaries"]
    assert con.execute("SELECT count(*) FROM summaries_fts_cjk").fetchone()[0] == counts["summaries"]
    assert con.execute("SELECT count(*) FROM large_files").fetchone()[0] >= 1


@pytest.mark.parametrize("n,sessions", [(0, None), (1, None), (37, 5), (1234, 2)])
def test_exact_counts_small(tmp_path, n, sessions):
    r = gen.generate(tmp_path / "x.db", messages=n, sessions=sessions, seed=3)
    c = sqlite3.connect(tmp_path / "x.db")
    assert r["messages"] == n == c.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert c.execute("PRAGMA foreign_key_check").fetchall() == []
    assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_every_part_type_and_columns(con):
    types = {r[0] for r in con.execute("SELECT DISTINCT part_type FROM message_parts")}
    assert types == set(gen.PART_TYPES)
    # real column usage
    assert con.execute("SELECT count(*) FROM message_parts WHERE part_type='tool' AND tool_call_id IS NOT NULL "
                       "AND tool_name IS NOT NULL AND json_valid(tool_input)").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM message_parts WHERE tool_output IS NOT NULL AND json_valid(tool_output)"
                       ).fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM message_parts WHERE NOT json_valid(metadata)").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM message_parts WHERE metadata->>'rawType' IS NOT NULL "
                       "AND metadata->'raw' IS NOT NULL").fetchone()[0] > 0
    # ordinals are 0-based and dense per message
    assert con.execute("SELECT count(*) FROM (SELECT message_id, min(ordinal) mn, max(ordinal) mx, count(*) n "
                       "FROM message_parts GROUP BY message_id) WHERE mn != 0 OR mx != n - 1").fetchone()[0] == 0
    # uuid-looking part ids
    pid = con.execute("SELECT part_id FROM message_parts LIMIT 1").fetchone()[0]
    assert len(pid) == 36 and pid[14] == "4" and pid.count("-") == 4
    # a few rows fill the normally-NULL columns
    for col in ("file_name", "file_url", "file_mime", "patch_files", "step_cost", "snapshot_hash",
                "subtask_prompt", "tool_status", "compaction_auto"):
        assert con.execute(f"SELECT count(*) FROM message_parts WHERE {col} IS NOT NULL").fetchone()[0] > 0, col
    assert con.execute("SELECT typeof(step_cost) FROM message_parts WHERE step_cost IS NOT NULL"
                       ).fetchone()[0] == "real"


def test_messages_shape(con):
    roles = {r[0] for r in con.execute("SELECT DISTINCT role FROM messages")}
    assert roles == {"system", "user", "assistant", "tool"}
    assert con.execute("SELECT min(token_count) FROM messages").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM messages WHERE identity_hash IS NULL").fetchone()[0] == 0
    row = con.execute("SELECT role, content, identity_hash FROM messages LIMIT 1").fetchone()
    assert hashlib.sha256(f"{row[0]}\x00{row[1]}".encode()).hexdigest() == row[2]
    assert con.execute("SELECT count(*) FROM messages WHERE content = ''").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM messages WHERE instr(content, char(0)) > 0").fetchone()[0] > 0
    nonascii = [c for (c,) in con.execute("SELECT content FROM messages") if any(ord(ch) > 127 for ch in c)]
    assert nonascii
    assert con.execute("SELECT count(*) FROM messages WHERE transcript_entry_id IS NOT NULL").fetchone()[0] > 0
    # seq 1-based per conversation, with gaps somewhere
    assert con.execute("SELECT min(mn) FROM (SELECT min(seq) mn FROM messages GROUP BY conversation_id)"
                       ).fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM (SELECT conversation_id, max(seq) mx, count(*) n FROM messages "
                       "GROUP BY conversation_id) WHERE mx > n").fetchone()[0] > 0
    # created_at format and same-second ties
    assert con.execute("SELECT count(*) FROM messages WHERE created_at NOT GLOB "
                       "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9]'"
                       ).fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM (SELECT created_at FROM messages GROUP BY created_at "
                       "HAVING count(*) > 1)").fetchone()[0] > 0
    # created_at order disagrees with seq order somewhere
    assert con.execute("SELECT count(*) FROM messages a JOIN messages b ON a.conversation_id = b.conversation_id "
                       "AND b.seq > a.seq WHERE b.created_at < a.created_at").fetchone()[0] > 0


def test_conversations_shape(con):
    # rotation: several conversations share one session_id, older ones archived
    shared = con.execute("SELECT session_id, count(*) n, sum(active) FROM conversations WHERE session_id != '' "
                         "GROUP BY session_id HAVING n > 1").fetchall()
    assert shared and all(active <= 1 for _, _, active in shared)
    assert con.execute("SELECT count(*) FROM conversations WHERE active = 0 AND archived_at IS NOT NULL "
                       "AND archive_cause IS NOT NULL").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM conversations WHERE session_id = ''").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM conversations WHERE session_key IS NULL").fetchone()[0] == 1
    # messages of a session's conversations interleave in time
    inter = con.execute("""
        SELECT count(*) FROM conversations a JOIN conversations b
          ON a.session_id = b.session_id AND a.conversation_id < b.conversation_id
        WHERE (SELECT max(created_at) FROM messages WHERE conversation_id = a.conversation_id)
            > (SELECT min(created_at) FROM messages WHERE conversation_id = b.conversation_id)""").fetchone()[0]
    assert inter > 0


def test_summary_dag(con):
    assert con.execute("SELECT count(*) FROM summaries WHERE summary_id NOT GLOB "
                       "'sum_[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]"
                       "[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]'").fetchone()[0] == 0
    depths = {r for r in con.execute("SELECT DISTINCT kind, depth FROM summaries")}
    assert {("leaf", 0), ("condensed", 1), ("condensed", 2)} <= depths
    # condensed nodes with several sources; sources feeding more than one condensed node
    assert con.execute("SELECT count(*) FROM (SELECT summary_id FROM summary_parents GROUP BY summary_id "
                       "HAVING count(*) > 1)").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM (SELECT parent_summary_id FROM summary_parents "
                       "GROUP BY parent_summary_id HAVING count(*) > 1)").fetchone()[0] > 0
    # ordinal ties inside one condensed node
    assert con.execute("SELECT count(*) FROM (SELECT summary_id, ordinal FROM summary_parents "
                       "GROUP BY summary_id, ordinal HAVING count(*) > 1)").fetchone()[0] > 0
    # leaves link contiguous runs with 0-based ordinals
    assert con.execute("SELECT min(ordinal) FROM summary_messages").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM summary_messages sm JOIN summaries s USING (summary_id) "
                       "WHERE s.kind != 'leaf'").fetchone()[0] == 0
    # unlinked summaries, cross-conversation links
    assert con.execute("SELECT count(*) FROM summaries s WHERE kind='leaf' AND NOT EXISTS "
                       "(SELECT 1 FROM summary_messages m WHERE m.summary_id = s.summary_id)").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM summaries s WHERE kind='condensed' AND NOT EXISTS "
                       "(SELECT 1 FROM summary_parents p WHERE p.summary_id = s.summary_id)").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM summary_messages sm JOIN summaries s USING (summary_id) "
                       "JOIN messages m USING (message_id) WHERE m.conversation_id != s.conversation_id"
                       ).fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM summaries WHERE earliest_at NOT LIKE '____-__-__T__:__:__.___Z'"
                       ).fetchone()[0] == 0
    # a condensed node is deeper than every source
    assert con.execute("SELECT count(*) FROM summary_parents p JOIN summaries c ON c.summary_id = p.summary_id "
                       "JOIN summaries s ON s.summary_id = p.parent_summary_id WHERE c.depth <= s.depth"
                       ).fetchone()[0] == 0
    # context items reference both kinds
    assert {r[0] for r in con.execute("SELECT DISTINCT item_type FROM context_items")} == {"message", "summary"}


def _dump(path: Path) -> str:
    c = sqlite3.connect(path)
    h = hashlib.sha256()
    for t in gen.COUNTED + ("lcm_migration_state",):
        for row in c.execute(f"SELECT * FROM {t} ORDER BY 1, 2"):
            h.update(repr(row).encode("utf-8", "surrogatepass"))
    c.close()
    return h.hexdigest()


def test_deterministic(tmp_path, small):
    a, b, other = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "c.db"
    gen.generate(a, messages=N, seed=7)
    gen.generate(b, messages=N, seed=7, parallel=False)  # in-process path gives the same rows
    gen.generate(other, messages=N, seed=8)
    assert _dump(a) == _dump(b) == _dump(small[0])
    assert _dump(other) != _dump(a)


def test_cli(tmp_path):
    out = tmp_path / "cli.db"
    cmd = [sys.executable, str(GEN_PATH), str(out), "--messages", "500", "--sessions", "3", "--seed", "2",
           "--parts-per-message", "1.5", "--summary-every", "5"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    assert "messages=500" in r.stdout and "bytes=" in r.stdout and len(r.stdout.strip().splitlines()) == 1
    c = sqlite3.connect(out)
    assert c.execute("SELECT count(*) FROM messages").fetchone()[0] == 500
    assert c.execute("SELECT count(DISTINCT session_id) FROM conversations").fetchone()[0] == 3
    c.close()
    # refuses to overwrite without --force
    r2 = subprocess.run(cmd, capture_output=True, text=True)
    assert r2.returncode != 0
    subprocess.run(cmd + ["--force"], capture_output=True, text=True, check=True)
