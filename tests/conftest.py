"""Shared helpers for the lcm-etl migrate tests.

Fixture databases under fixtures/lossless-claw/ are WAL-mode and read-only: every test works on a copy
in its own temporary folder (the -wal/-shm files travel with the .db). The CLI is run through the
installed console script next to sys.executable, exactly as a user would run it.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# A suite started as a background job without job control has SIGINT ignored, and every lcm-etl it starts would
# inherit that: the tests that press Ctrl-C would meet runs that cannot hear it (a CI run started that way saw
# test_runs' interrupted run exit 0). A handler, unlike SIG_IGN, is reset to the default in the child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# A text report fits 100 columns, or $LCM_ETL_WIDTH (lcm_etl/report.py: fit), wrapping and shortening what is longer.
# The temporary paths in the reports tests read differ in length from run to run (pytest-7, pytest-12...): those
# tests read the reports unwrapped (0); the width tests (test_reports.py, test_demo.py) run without it.
os.environ["LCM_ETL_WIDTH"] = "0"

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_DIR = ROOT / "fixtures" / "lossless-claw"
FIXTURES = sorted(p.name for p in FIXTURE_DIR.glob("*.db"))
LCM_ETL = Path(sys.executable).parent / "lcm-etl"

ISO_MS = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"

# Remnic's LCM schema version 2 as Remnic's applySchema creates it, written out
# here independently of lcm_etl.store.target so a drift in the product is caught.
REMNIC_DDL = """
CREATE TABLE lcm_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE lcm_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
  turn_index INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, token_count INTEGER NOT NULL,
  created_at TEXT NOT NULL, metadata TEXT);
CREATE INDEX idx_lcm_messages_session ON lcm_messages(session_id, turn_index);
CREATE TABLE lcm_message_parts (id INTEGER PRIMARY KEY AUTOINCREMENT,
  message_id INTEGER NOT NULL REFERENCES lcm_messages(id) ON DELETE CASCADE, ordinal INTEGER NOT NULL,
  kind TEXT NOT NULL, payload TEXT NOT NULL, tool_name TEXT, file_path TEXT, created_at TEXT NOT NULL);
CREATE INDEX idx_lcm_message_parts_msg ON lcm_message_parts(message_id, ordinal);
CREATE INDEX idx_lcm_message_parts_tool ON lcm_message_parts(tool_name);
CREATE INDEX idx_lcm_message_parts_file ON lcm_message_parts(file_path);
CREATE TABLE lcm_summary_nodes (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, depth INTEGER NOT NULL,
  parent_id TEXT, summary_text TEXT NOT NULL, token_count INTEGER NOT NULL, msg_start INTEGER NOT NULL,
  msg_end INTEGER NOT NULL, escalation INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL,
  FOREIGN KEY (parent_id) REFERENCES lcm_summary_nodes(id));
CREATE INDEX idx_lcm_summary_session ON lcm_summary_nodes(session_id, depth);
CREATE INDEX idx_lcm_summary_range ON lcm_summary_nodes(session_id, msg_start, msg_end);
CREATE TABLE lcm_compaction_events (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
  fired_at TEXT NOT NULL, msg_before INTEGER NOT NULL, tokens_before INTEGER NOT NULL,
  tokens_after INTEGER NOT NULL);
CREATE VIRTUAL TABLE lcm_messages_fts USING fts5(content, content=lcm_messages, content_rowid=id);
CREATE VIRTUAL TABLE lcm_summaries_fts USING fts5(summary_text, content=lcm_summary_nodes, content_rowid=rowid);
INSERT INTO lcm_meta (key, value) VALUES ('schema_version', '2');
"""


@pytest.fixture(autouse=True, scope="session")
def _private_snapshot_cache(tmp_path_factory):
    """Kept snapshots (lcm_etl/read/snapshot/snapcache.py) go to the test session's temporary folder, never ~/.cache:
    the CLI subprocesses inherit the environment. So does Remnic's memory dir, the target of a run given none
    (lcm_etl/store/remnic_home.py): a test's own folder, never the user's Remnic store."""
    import os
    private = {"LCM_ETL_CACHE_DIR": str(tmp_path_factory.mktemp("snapshot-cache")),
               "REMNIC_MEMORY_DIR": str(tmp_path_factory.mktemp("remnic-memory"))}
    before = {name: os.environ.get(name) for name in private}
    os.environ.update(private)
    yield
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def facts(name: str) -> dict:
    """What fixtures/lossless-claw/expected-facts.json recorded about fixture `name` when it was generated: the
    counts tests expect, read rather than typed in."""
    return json.loads((FIXTURE_DIR / "expected-facts.json").read_text("utf-8"))[name]


def fixture_rows(name: str, table: str = "messages") -> int:
    return facts(name)["row_counts"][table]


def session_messages(name: str, session_id: str) -> int:
    return next(s["messages"] for s in facts(name)["sessions"] if s["session_id"] == session_id)


def copy_fixture(name: str, folder: Path) -> Path:
    """Copy fixture `name` (with its -wal/-shm when present) into `folder`; return the copied .db path."""
    folder.mkdir(parents=True, exist_ok=True)
    src = FIXTURE_DIR / name
    out = folder / name
    shutil.copyfile(src, out)
    for side in ("-wal", "-shm"):
        extra = Path(str(src) + side)
        if extra.exists():
            shutil.copyfile(extra, str(out) + side)
    return out


def run_cli(*args, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(LCM_ETL), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def migrate_json(src: Path, dest: Path, *extra) -> dict:
    proc = run_cli("migrate", "--src", src, "--dest", dest, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return json.loads(proc.stdout)


def migrate_api(src: Path, dest: Path, **options) -> dict:
    """The same migration in-process (no interpreter start-up): for tests about data, not about the CLI."""
    from lcm_etl.commands.migrate import MigrateOptions, migrate

    return migrate(MigrateOptions(src=Path(src), target=Path(dest), **options)).as_dict()


def comparable(report: dict) -> dict:
    """A report without what legitimately differs between a dry run and the real run (a dry run keeps no snapshot:
    it writes nothing, the cache included, so only the real run says the size of the copy it kept)."""
    extra = {k: v for k, v in report.get("extra", {}).items() if k != "kept_snapshot_bytes"}
    return {k: v for k, v in report.items() if k not in ("dry_run", "elapsed_s", "run_id")} | {"extra": extra}


def open_db(path: Path) -> sqlite3.Connection:
    """Open a database (a target, or a private oracle copy of a source) for reading. Autocommit, so a
    statement such as FTS 'integrity-check' never leaves a transaction open behind a test."""
    con = sqlite3.connect(path, isolation_level=None)
    con.row_factory = sqlite3.Row
    return con


def fetch(path: Path, sql: str, *params) -> list[tuple]:
    """The rows of one query of a database, opened and closed for it."""
    con = sqlite3.connect(path)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def oracle(name: str, folder: Path) -> sqlite3.Connection:
    """A private copy of a fixture to compute expectations from (never the copy handed to lcm-etl)."""
    return open_db(copy_fixture(name, folder))


def make_native_target(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.executescript(REMNIC_DDL)
    return con


def empty_target(path: Path) -> Path:
    """A Remnic target with no rows (audit of a target that does not exist is bad input, exit 2)."""
    make_native_target(path).close()
    return path


def columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def parse_source_time(text: str) -> dt.datetime:
    """lossless-claw stamps `YYYY-MM-DD HH:MM:SS` in UTC; other writers may use ISO-8601."""
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def resolve_session(conversation_id, session_id, session_key=None, key_by: str = "session-id") -> str:
    """The session rule (docs/mapping.md, "Sessions"), written independently of transforms/10_sessions.sql."""
    ws = " \t\n\r\x0b\x0c\u00a0\ufeff"
    if key_by == "session-key" and session_key is not None and session_key.strip(ws):
        return session_key.strip(ws)
    if session_id is not None and session_id.strip(ws):
        return session_id.strip(ws)
    return str(conversation_id)


def source_messages(con: sqlite3.Connection, key_by: str = "session-id") -> list[dict]:
    """Every source message with its resolved session, ordered by the turn order's key within each session."""
    ccols = columns(con, "conversations")
    key = "c.session_key" if "session_key" in ccols else "NULL"
    rows = con.execute(f"""SELECT m.message_id, m.conversation_id, m.seq, m.role, m.content, m.token_count,
                                  m.created_at, c.session_id, {key} AS session_key, c.title
                           FROM messages m JOIN conversations c USING (conversation_id)""").fetchall()
    out = []
    for r in rows:
        d = dict(r)
        d["session"] = resolve_session(r["conversation_id"], r["session_id"], r["session_key"], key_by)
        d["ts"] = parse_source_time(r["created_at"])
        out.append(d)
    out.sort(key=lambda d: (d["session"], d["ts"], _conv_order(d["conversation_id"]), d["seq"]))
    return out


def _conv_order(cid):
    return (0, int(cid), "") if isinstance(cid, int) or str(cid).isdigit() else (1, 0, str(cid))


def target_messages(con: sqlite3.Connection) -> dict[tuple, dict]:
    """(conversation_id as text, source_seq) -> target row as a dict (metadata parsed)."""
    out = {}
    for r in con.execute("SELECT * FROM lcm_messages"):
        d = dict(r)
        d["meta"] = json.loads(r["metadata"]) if r["metadata"] else {}
        if d["meta"].get("source") == "lossless-claw":
            k = (str(d["meta"]["conversation_id"]), d["meta"]["source_seq"])
            assert k not in out, f"duplicate import of {k}"
            out[k] = d
    return out


def target_rows(target: Path) -> list[sqlite3.Row]:
    """The target's messages, in session and turn order, as rows by column name."""
    con = sqlite3.connect(target)
    con.row_factory = sqlite3.Row
    try:
        return con.execute("SELECT * FROM lcm_messages ORDER BY session_id, turn_index").fetchall()
    finally:
        con.close()


def table_counts(con: sqlite3.Connection) -> dict[str, int]:
    names = [r[0] for r in con.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
        "AND name NOT LIKE '%fts_%' ORDER BY name")]
    return {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}


def folder_state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def fixture_copy(tmp_path):
    """fixture_copy(name) -> path of a fresh copy of that fixture in this test's tmp_path/src."""
    def make(name: str, sub: str = "src") -> Path:
        return copy_fixture(name, tmp_path / sub)
    return make


@dataclass
class Imported:
    name: str
    src: sqlite3.Connection      # a private copy of the source, to compute expectations from
    tgt: sqlite3.Connection      # the target after one real run
    report: dict                 # the real run's report
    dry: dict                    # the dry run made just before it, on the missing target
    source: Path                 # the copy lcm-etl read
    target: Path
    base: Path
    target_folder_after_dry_run: bool
    source_files_before: dict
    source_files_after: dict


@pytest.fixture(scope="session", params=FIXTURES)
def imported(request, tmp_path_factory):
    """Each fixture migrated once per test session: dry run on a missing target, then the real run."""
    name = request.param
    base = tmp_path_factory.mktemp(name.replace(".", "_"))
    src_copy = copy_fixture(name, base / "src")
    target = base / "out" / "lcm.sqlite"
    before = folder_state(src_copy.parent)
    dry = migrate_api(src_copy, target, dry_run=True)
    target_folder_after_dry_run = target.parent.exists()
    report = migrate_api(src_copy, target)
    after = folder_state(src_copy.parent)
    src = oracle(name, base / "oracle")
    tgt = open_db(target)
    yield Imported(name, src, tgt, report, dry, src_copy, target, base, target_folder_after_dry_run, before, after)
    src.close()
    tgt.close()
