"""Damage is a finding, never a blocker, never silence (issue 36): each transcript, archive, cold file, pending input,
folder and store of an installation is read on its own. What cannot be read (no parsable line, another user's mode
bits, a FIFO or a device where a file should be, cut short, failing the hash or counts its row declares, inflating
past what it may) is a finding naming it: `reconcile` warns and lands everything intact (exit 0; --strict: exit 2,
nothing written), `audit` exits 3 naming it. Every case is a copy of fixtures/openclaw-hidden/ damaged as a crash, a
full disk or another user leaves it, run through the real CLI.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import zstandard

from conftest import LCM_ETL, ROOT, run_cli
from storelib import ROLES, session_entries

HIDDEN = ROOT / "fixtures" / "openclaw-hidden"
STORE = Path("agents/main/agent/openclaw-agent.sqlite")
TIER = Path("agents/main/session-sqlite-import-archive")
COLD = Path("agents/main/sessions/cold")
# state folder -> the expected files of it (prefix), less those of another folder of the same case
CASES = {"cold/state": ("cold.", "cold.restored."), "cold/restored": ("cold.restored.", None),
         "evicted/state": ("evicted.", "evicted.before."), "archive-tier/state": ("archive-tier.", None),
         "pending/state": ("pending.", "pending.pending-inputs")}
PLAIN_CHAT = "0199c01d-0001-7a00-8b00-00000000c001"   # cold/: a cold window, its archive b9a5afb5...


def copy_state(state: str, into: Path) -> Path:
    shutil.copytree(HIDDEN / state, into)
    for p in into.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    into.chmod(0o755)
    return into


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under a folder with its bytes (a FIFO or a device is listed, never read)."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<not a file>"
            for p in sorted(folder.rglob("*")) if not p.is_dir()}


def expected(state: str) -> dict[str, list[tuple[str, str]]]:
    """expected file -> (entry id, role) of the active path OpenClaw computed, with its session id first."""
    prefix, other = CASES[state]
    out = {}
    for f in sorted((HIDDEN / "expected").glob(f"{prefix}*.json")):
        if other is None or not f.name.startswith(other):
            e = json.loads(f.read_text())
            out[f.name] = [e["sessionId"]] + [(m["id"], ROLES.get(m["role"], m["role"])) for m in e["activePath"]]
    return out


def landed_as_expected(target: Path, state: str, but: tuple[str, ...] = ()) -> None:
    """Every window and archive of the state folder but those named lands as OpenClaw's active path, each entry
    once; the sessions of those named hold nothing."""
    for name, (sid, *path) in expected(state).items():
        got = [(i, r) for i, r, _ in session_entries(target, sid) if i is not None]
        assert got == ([] if name in but else path), name


def cold_file(state: Path, prefix: str = "b9a5") -> Path:
    return next((state / COLD).glob(f"{prefix}*.jsonl.zst"))


def reconcile(state: Path, target: Path, *extra, runner=run_cli) -> dict:
    proc = runner("reconcile", "--sessions", state, "--dest", target, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    return json.loads(proc.stdout)


def audit(state: Path, target: Path, runner=run_cli) -> tuple[int, list[dict], str]:
    """audit's exit code, its --json differences that are not missing messages, and its text."""
    proc = runner("audit", "--sessions", state, "--dest", target, "--json")
    text = runner("audit", "--sessions", state, "--dest", target)
    assert proc.returncode == text.returncode, text.stderr
    found = [f for f in json.loads(proc.stdout)["differences"] if f["problem"] != "missing in target"]
    return proc.returncode, found, text.stdout


def as_warning(f: dict) -> str:
    return f"{f['kind']} {f['source_id']}" + (f" (window {f['session_id']})" if f["session_id"] else "") + \
        f": {f['problem']}; {f['detail']}"


def damaged(state: Path, target: Path, warnings: list[str], runner=run_cli, *, messages: int | None = None) -> dict:
    """The common proof: reconcile exits 0 with exactly these findings as warnings (and the source left as it was,
    nothing beside it), a second run adds nothing and says them again, and audit exits 3 naming each one."""
    before = tree(state)
    first = reconcile(state, target, runner=runner)
    assert [w for w in first["warnings"] if ": skipped line (" not in w] == warnings
    if messages is not None:
        assert first["messages"]["inserted"] == messages
    second = reconcile(state, target, runner=runner)
    assert second["messages"]["inserted"] == 0
    assert [w for w in second["warnings"] if ": skipped line (" not in w] == warnings
    code, found, text = audit(state, target, runner=runner)
    assert code == 3
    assert [as_warning(f) for f in found] == warnings
    assert text.startswith("lcm-etl audit: PENDING")
    for f in found:
        assert f"{f['kind']}: {f['problem']}" in text and f["source_id"] in text
    assert tree(state) == before
    return first


# --------------------------------------------------------------------------------------------------------------------
# a leftover that holds no readable line

TIER_FILE = "archive-tier.a55f0cfb-1ecf-4522-a645-16078041dbc3.jsonl.imported-1787216412848"
DAMAGE = {"nul": (b"\0" * 8192, "holds no session header and no message entry"),
          "random": (random.Random(36).randbytes(8192), "is not UTF-8 text"),
          "bad-lines": (b'{"type":"message","id":"cut\n' * 40, "holds no session header and no message entry")}


@pytest.mark.parametrize("damage", DAMAGE)
def test_an_archive_tier_leftover_with_no_readable_line_is_a_finding_and_everything_else_lands(tmp_path, damage):
    state = copy_state("archive-tier/state", tmp_path / "state")
    bad = state / TIER / TIER_FILE
    data, why = DAMAGE[damage]
    bad.write_bytes(data)
    target = tmp_path / "t.sqlite"
    damaged(state, target, [f"archive {bad}: not an OpenClaw transcript ({why}); not read"])
    landed_as_expected(target, "archive-tier/state", but=("archive-tier.tier.rewritten.json",))


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_legacy_transcript_with_no_readable_line_is_a_finding_and_the_store_lands(tmp_path, damage):
    state = copy_state("pending/state", tmp_path / "state")
    (state / "agents/main/sessions").mkdir()
    bad = state / "agents/main/sessions/0199d0a1-dead-7a00-8b00-000000000001.jsonl"
    data, why = DAMAGE[damage]
    bad.write_bytes(data)
    target = tmp_path / "t.sqlite"
    damaged(state, target, [f"transcript {bad}: not an OpenClaw transcript ({why}); not read"], messages=15)
    landed_as_expected(target, "pending/state")


def test_a_cold_window_with_a_finding_is_one_warning_per_run_and_no_skipped_line(tmp_path):
    state = copy_state("cold/state", tmp_path / "state")
    cold_file(state).write_bytes(b"\0" * 2377)
    target = tmp_path / "t.sqlite"
    said = (f"cold archive {cold_file(state)} (window {PLAIN_CHAT}): failed verification (2377 bytes, 2377 recorded; "
            "SHA-256 differs); OpenClaw refuses it too: restore it from a backup")
    for _ in range(2):
        assert reconcile(state, target)["warnings"] == [said]
    text = run_cli("reconcile", "--sessions", state, "--dest", target)
    assert text.returncode == 0 and text.stdout.count("warning:") == 1


def test_a_cold_archive_longer_than_its_row_records_is_a_finding_read_only_to_that_length(tmp_path):
    state = copy_state("cold/state", tmp_path / "state")
    grown = cold_file(state)
    grown.write_bytes(grown.read_bytes() + b"\0" * 4096)
    damaged(state, tmp_path / "t.sqlite", [f"cold archive {grown} (window {PLAIN_CHAT}): failed verification (more "
                                          "than 2377 bytes, 2377 recorded); OpenClaw refuses it too: restore it "
                                          "from a backup"], messages=113 - 8)


def test_strict_makes_a_finding_exit_2_and_nothing_is_written_in_reconcile_and_audit(tmp_path):
    state = copy_state("archive-tier/state", tmp_path / "state")
    bad = state / TIER / TIER_FILE
    bad.write_bytes(b"\0" * 8192)
    target = tmp_path / "t.sqlite"
    proc = run_cli("reconcile", "--sessions", state, "--dest", target, "--strict")
    assert proc.returncode == 2
    assert proc.stderr == (f"lcm-etl: error: not a readable transcript: {bad}: line 1: unparsable line (not JSON: "
                           "unexpected character, expected a JSON value); nothing was written\n")
    assert not target.exists()
    cold = copy_state("cold/state", tmp_path / "cold")
    cold_file(cold).write_bytes(b"\0" * 2377)
    for command in ("reconcile", "audit"):   # a cold window's finding in its finding's words, as any other's
        proc = run_cli(command, "--sessions", cold, "--dest", target, "--strict")
        assert proc.returncode == 2 and not target.exists()
        assert proc.stderr == (f"lcm-etl: error: --strict: cold archive {cold_file(cold)} (window {PLAIN_CHAT}): "
                               "failed verification (2377 bytes, 2377 recorded; SHA-256 differs); OpenClaw refuses it "
                               "too: restore it from a backup; nothing was written\n")
    table = copy_state("pending/state", tmp_path / "table")   # a finding no line carries: refused after the read
    con = sqlite3.connect(table / STORE)
    con.execute("CREATE TABLE session_outbox (sessionId TEXT, msgId TEXT, payload TEXT)")
    con.commit()
    con.close()
    for command in ("reconcile", "audit"):
        proc = run_cli(command, "--sessions", table, "--dest", target, "--strict")
        assert proc.returncode == 2 and not target.exists()
        assert proc.stderr == (f"lcm-etl: error: --strict: session store table {table / STORE}#session_outbox: "
                               "unknown, holds session rows: not read; columns msgId, sessionId; a newer OpenClaw's "
                               "(user_version 23): lcm-etl does not know it; nothing was written\n")


def test_a_damaged_transcript_named_on_the_command_line_stays_exit_2(tmp_path):
    bad = tmp_path / "0199d0a1-dead-7a00-8b00-000000000001.jsonl"
    bad.write_bytes(b"\0" * 8192)
    proc = run_cli("reconcile", "--sessions", bad, "--dest", tmp_path / "t.sqlite")
    assert proc.returncode == 2 and not (tmp_path / "t.sqlite").exists()
    assert proc.stderr == (f"lcm-etl: error: not a readable transcript: {bad}: not an OpenClaw transcript (holds no "
                           "session header and no message entry); nothing was written\n")


# --------------------------------------------------------------------------------------------------------------------
# another user's mode bits: root reads a mode-000 file, so under root the CLI runs as nobody (setpriv)

NOBODY = 65534


@pytest.fixture
def shared_tmp():
    """A folder another user can reach (pytest's own is root's, mode 700)."""
    path = Path(tempfile.mkdtemp(prefix="lcm-etl-damage-"))
    path.chmod(0o755)
    (path / "out").mkdir(mode=0o777)
    (path / "out").chmod(0o777)
    yield path
    for p in path.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            p.chmod(0o755)
    shutil.rmtree(path)


def as_another_user(shared: Path):
    """A run_cli that mode bits apply to: the CLI itself when the tests are not root, else the CLI as nobody."""
    if os.geteuid() != 0:
        return run_cli
    if shutil.which("setpriv") is None:
        pytest.skip("the tests run as root, which reads mode-000 files, and setpriv is missing to run as another user")
    env = {**os.environ, "LCM_ETL_CACHE_DIR": str(shared / "out" / "cache"), "HOME": str(shared / "out")}

    def run(*args, timeout: float = 120, env_extra: dict | None = None):
        return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", str(LCM_ETL),
                               *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              env={**env, **(env_extra or {})})
    return run


def test_a_mode_000_leftover_is_a_finding_and_everything_else_lands(shared_tmp):
    runner = as_another_user(shared_tmp)
    state = copy_state("archive-tier/state", shared_tmp / "state")
    bad = state / TIER / TIER_FILE
    bad.chmod(0)
    target = shared_tmp / "out" / "t.sqlite"
    damaged(state, target, [f"archive {bad}: cannot be read (Permission denied); not read"], runner)
    landed_as_expected(target, "archive-tier/state", but=("archive-tier.tier.rewritten.json",))


def test_a_mode_000_legacy_transcript_is_a_finding_and_the_store_lands(shared_tmp):
    runner = as_another_user(shared_tmp)
    state = copy_state("pending/state", shared_tmp / "state")
    (state / "agents/main/sessions").mkdir()
    bad = state / "agents/main/sessions/0199d0a1-dead-7a00-8b00-000000000001.jsonl"
    shutil.copyfile(ROOT / "fixtures" / "sessions" / "plain-chat.jsonl", bad)
    bad.chmod(0)
    target = shared_tmp / "out" / "t.sqlite"
    damaged(state, target, [f"transcript {bad}: cannot be read (Permission denied); not read"], runner, messages=15)
    landed_as_expected(target, "pending/state")


@pytest.mark.parametrize("folder", ["agents/main/sessions/cold", "agents/main/sessions"])
def test_a_mode_000_cold_or_sessions_folder_is_a_finding_per_archive_and_the_live_windows_land(shared_tmp, folder):
    runner = as_another_user(shared_tmp)
    state = copy_state("cold/state", shared_tmp / "state")
    con = sqlite3.connect(state / STORE)
    cold = con.execute("SELECT session_id, archive_name FROM session_transcript_cold_archives").fetchall()
    con.close()
    (state / folder).chmod(0)
    target = shared_tmp / "out" / "t.sqlite"
    listed = [f"folder {state / folder}: cannot be read (Permission denied); not read"] \
        if folder == "agents/main/sessions" else []
    first = reconcile(state, target, runner=runner)
    want = listed + sorted(f"cold archive {state / COLD / name} (window {sid}): missing or unreadable (Permission "
                           "denied); OpenClaw refuses it too: restore it from a backup" for sid, name in cold)
    assert sorted(w for w in first["warnings"] if ": skipped line (" not in w) == sorted(want)
    assert first["messages"]["inserted"] == 60
    code, found, _text = audit(state, target, runner=runner)
    assert code == 3 and sorted(as_warning(f) for f in found) == sorted(want)
    cold_ids = {sid for sid, _ in cold}
    landed_as_expected(target, "cold/state", but=tuple(n for n, (sid, *_) in expected("cold/state").items()
                                                       if sid in cold_ids))
    (state / folder).chmod(0o755)   # given back: the next run lands the cold windows
    assert reconcile(state, target, runner=runner)["messages"]["inserted"] == 53
    landed_as_expected(target, "cold/state")


def test_a_mode_000_agent_folder_is_a_finding_and_the_doctors_originals_land(shared_tmp):
    runner = as_another_user(shared_tmp)
    state = copy_state("archive-tier/state", shared_tmp / "state")
    (state / "agents/main/agent").chmod(0)
    target = shared_tmp / "out" / "t.sqlite"
    damaged(state, target, [f"folder {state / 'agents/main/agent'}: cannot be read (Permission denied); not read"],
            runner)
    landed_as_expected(target, "archive-tier/state")   # every window's session is in a doctor's original too


@pytest.mark.parametrize("hidden", ["agents/main/agent/openclaw-agent.sqlite", "agents/main/agent/openclaw-agent.sqlite-wal",
                                    "agents"])
def test_a_mode_000_store_its_wal_or_the_agents_folder_is_a_finding_naming_it(shared_tmp, hidden):
    runner = as_another_user(shared_tmp)
    state = copy_state("pending/state", shared_tmp / "state")
    (state / hidden).chmod(0)
    kind = "folder" if hidden == "agents" else "session store"
    damaged(state, shared_tmp / "out" / "t.sqlite", [f"{kind} {state / hidden}: cannot be read (Permission denied); "
                                                     "not read"], runner, messages=0)


def home_copy(into: Path) -> Path:
    """The layout fixture's home, its registry's absolute paths re-pointed into the copy (tests/test_homes.py)."""
    home = copy_state("layout/home", into)
    con = sqlite3.connect(home / ".openclaw-work/state/openclaw.sqlite")
    con.execute("UPDATE agent_databases SET path = ? || substr(path, 12) WHERE path LIKE '/home/claw/%'", (f"{home}/",))
    con.commit()
    con.close()
    return home


@pytest.mark.parametrize("folder", ["state", "custom agentDir"])
def test_a_mode_000_state_folder_or_custom_agent_dir_is_said_and_the_agent_folders_land(shared_tmp, folder):
    runner = as_another_user(shared_tmp)
    home = home_copy(shared_tmp / "home")
    work = home / ".openclaw-work"
    hidden = work / "state" if folder == "state" else home / "agents" / "research"
    hidden.chmod(0)
    target = shared_tmp / "out" / "t.sqlite"
    proc = runner("reconcile", "--sessions", work, "--dest", target)
    assert proc.returncode == 0, proc.stderr
    assert "cannot be read (Permission denied)" in proc.stdout and str(hidden) in proc.stdout
    main = json.loads((HIDDEN / "layout/expected/layout.profile.main.json").read_text())
    assert [i for i, _, _ in session_entries(target, main["sessionId"])] == [m["id"] for m in main["activePath"]]
    if folder == "state":
        assert f"warning: folder {hidden}: cannot be read (Permission denied); not read" in proc.stdout
        code, found, _ = audit(work, target, runner=runner)
        assert code == 3 and [f["source_id"] for f in found] == [str(hidden)]


# --------------------------------------------------------------------------------------------------------------------
# not a regular file: never opened (a FIFO would block for ever, /dev/zero never ends); every run has a timeout


@pytest.mark.parametrize("what", ["FIFO", "symlink to /dev/zero"])
def test_a_fifo_or_dev_zero_at_a_cold_archives_path_is_a_finding_in_reconcile_audit_dry_run_and_inspect(tmp_path,
                                                                                                        what):
    state = copy_state("cold/state", tmp_path / "state")
    bad = cold_file(state)
    bad.unlink()
    if what == "FIFO":
        os.mkfifo(bad)
    else:
        bad.symlink_to("/dev/zero")
    kind = "a FIFO" if what == "FIFO" else "a character device"
    target = tmp_path / "t.sqlite"
    damaged(state, target, [f"cold archive {bad} (window {PLAIN_CHAT}): not a regular file ({kind}): not opened; "
                            "OpenClaw refuses it too: restore it from a backup"], messages=113 - 8)
    dry = run_cli("reconcile", "--sessions", state, "--dest", tmp_path / "dry.sqlite", "--dry-run", timeout=60)
    assert dry.returncode == 0 and not (tmp_path / "dry.sqlite").exists()
    assert run_cli("inspect", "--src", state / STORE, timeout=60).returncode == 0


def test_a_fifo_named_by_sessions_is_exit_2_and_one_in_a_sessions_folder_a_finding(tmp_path):
    fifo = tmp_path / "0199d0a1-dead-7a00-8b00-000000000001.jsonl"
    os.mkfifo(fifo)
    proc = run_cli("reconcile", "--sessions", fifo, "--dest", tmp_path / "t.sqlite", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == (f"lcm-etl: error: not a readable transcript: {fifo}: not a regular file (a FIFO): not "
                           "opened; nothing was written\n")
    state = copy_state("pending/state", tmp_path / "state")
    (state / "agents/main/sessions").mkdir()
    os.mkfifo(state / "agents/main/sessions" / fifo.name)
    damaged(state, tmp_path / "t.sqlite", [f"transcript {state / 'agents/main/sessions' / fifo.name}: not a regular "
                                           "file (a FIFO): not opened; not read"], messages=15)


# --------------------------------------------------------------------------------------------------------------------
# what each source declares, verified

EVICTED_FILE = "0199e71c-0002-7a00-8b00-00000000e002.jsonl.deleted.2026-08-14T10-00-18.487Z." \
               "c52f900e54c447fbaff8990c1151e7f0.zst"


def test_a_published_archive_cut_short_fails_its_rows_hash_and_the_rows_copy_lands(tmp_path):
    state = copy_state("evicted/state", tmp_path / "state")
    bad = state / "agents/main/sessions" / EVICTED_FILE
    bad.write_bytes(bad.read_bytes()[:2000])   # 2,000 of 2,720 bytes: a full disk
    target = tmp_path / "t.sqlite"
    damaged(state, target, [f"archive {bad}: failed verification (2000 bytes; SHA-256 differs from its store row's "
                            "archive_sha256); not read"], messages=94)
    landed_as_expected(target, "evicted/state")


def _set_blob(state: Path, blob: bytes, *, sha: bool) -> str:
    con = sqlite3.connect(state / STORE)
    con.execute("UPDATE session_transcript_archives SET archive_blob = ?" + (", archive_sha256 = ?" if sha else ""),
                (blob, hashlib.sha256(blob).hexdigest()) if sha else (blob,))
    con.commit()
    con.close()
    return f"{state / STORE}#{EVICTED_FILE}"


@pytest.mark.parametrize("damage", ["cut short", "cut short, hash recorded", "not zstd, hash recorded"])
def test_a_store_archive_blob_that_fails_its_hash_or_is_not_a_whole_zstd_frame_is_a_finding(tmp_path, damage):
    state = copy_state("evicted/state", tmp_path / "state")
    published = state / "agents/main/sessions" / EVICTED_FILE
    original = published.read_bytes()
    blob = b"plain text, not zstd" if damage.startswith("not zstd") else original[:2000]
    where = _set_blob(state, blob, sha="hash recorded" in damage)
    why = {"cut short": "failed verification (2000 bytes; SHA-256 differs from its row's archive_sha256)",
           "cut short, hash recorded": "cut short: its zstd frame does not end in its 2000 bytes",
           "not zstd, hash recorded": "not a readable zstd frame (error when determining content size)"}[damage]
    warnings = [f"archive {where}: {why}; not read"]
    if "hash recorded" in damage:   # the published file is the old row's bytes: it no longer matches the row
        warnings.append(f"archive {published}: failed verification (2720 bytes; SHA-256 differs from its store "
                        "row's archive_sha256); not read")
    target = tmp_path / "t.sqlite"
    report = damaged(state, target, warnings)
    assert [(a["where"], a["imported"]) for a in report["extra"]["archives"]] == [
        (str(state / STORE), False), (str(published.parent), "hash recorded" not in damage)]
    landed_as_expected(target, "evicted/state", but=("evicted.telegram.gen1.archive.json",)
                       if "hash recorded" in damage else ())


def test_a_zstd_frame_that_inflates_to_a_gibibyte_is_a_finding_within_bounded_memory(tmp_path):
    state = copy_state("cold/restored", tmp_path / "state")
    z = zstandard.ZstdCompressor(level=3).compressobj()
    zero = b"\0" * (16 << 20)
    bomb = b"".join(z.compress(zero) for _ in range(64)) + z.flush()   # 1 GiB, in a few dozen KB
    con = sqlite3.connect(state / STORE)
    size = len(bomb)
    raw, events = con.execute("SELECT raw_bytes, event_count FROM session_transcript_cold_archives "
                              "WHERE session_id = ?", (PLAIN_CHAT,)).fetchone()
    con.execute("UPDATE session_transcript_cold_archives SET archive_blob = ?, archive_sha256 = ?, archive_bytes = ? "
                "WHERE session_id = ?", (bomb, hashlib.sha256(bomb).hexdigest(), size, PLAIN_CHAT))
    name = con.execute("SELECT archive_name FROM session_transcript_cold_archives WHERE session_id = ?",
                       (PLAIN_CHAT,)).fetchone()[0]
    con.commit()
    con.close()
    limit = 4 * raw + 1024 * events + (64 << 10)
    target = tmp_path / "t.sqlite"
    # the CLI's peak, measured from a small parent of its own (a child's peak starts at its parent's)
    probe = subprocess.run([sys.executable, "-c", "import resource, subprocess, sys; subprocess.run(sys.argv[1:], "
                            "capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
                            str(LCM_ETL), "reconcile", "--sessions", state, "--dest", tmp_path / "probe.sqlite"],
                           capture_output=True, text=True, timeout=120)
    assert int(probe.stdout) < 512 * 1024, probe.stdout   # KiB: far below the GiB the frame inflates to
    damaged(state, target, [f"cold archive {state / STORE}#session_transcript_cold_archives/{name} (window "
                            f"{PLAIN_CHAT}): verified but inflates past the {limit} bytes allowed: not read; OpenClaw "
                            "refuses it too: restore it from a backup"], messages=113 - 8)


def _short_archive(path: Path, keep_to_seq: int) -> bytes:
    """The cold archive's records with the `event` records past `keep_to_seq` left out (an archival cut short)."""
    out = []
    data = zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes())
    for line in data.split(b"\n"):
        record = json.loads(line) if line.strip() else None
        if record is not None and not (record["kind"] == "event" and record["row"]["seq"] > keep_to_seq):
            out.append(line)
    return zstandard.ZstdCompressor(level=1, write_checksum=True).compress(b"\n".join(out) + b"\n")


def test_a_cold_archive_whose_header_names_another_window_is_a_finding_and_the_rest_lands(tmp_path):
    state = copy_state("cold/state", tmp_path / "state")
    good = cold_file(state)
    data = zstandard.ZstdDecompressor().decompressobj().decompress(good.read_bytes())
    other = data.replace(PLAIN_CHAT.encode(), b"0199c01d-0002-7a00-8b00-00000000c002", 1)   # the header's sessionId
    swapped = zstandard.ZstdCompressor(level=1, write_checksum=True).compress(other)
    sha = hashlib.sha256(swapped).hexdigest()
    good.unlink()
    (state / COLD / f"{sha}.jsonl.zst").write_bytes(swapped)
    with sqlite3.connect(state / STORE) as con:   # the row verifies it: only the header says it is another window's
        con.execute("UPDATE session_transcript_cold_archives SET archive_name = ?, archive_sha256 = ?, "
                    "archive_bytes = ? WHERE session_id = ?", (f"{sha}.jsonl.zst", sha, len(swapped), PLAIN_CHAT))
    con.close()
    damaged(state, tmp_path / "t.sqlite", [
        f"cold archive {state / COLD / f'{sha}.jsonl.zst'} (window {PLAIN_CHAT}): verified but its header names window "
        "'0199c01d-0002-7a00-8b00-00000000c002'; OpenClaw refuses it too: restore it from a backup"], messages=113 - 8)


def test_a_cold_archive_holding_fewer_events_than_its_row_is_a_finding_and_the_hole_closes_once_restored(tmp_path):
    state = copy_state("cold/state", tmp_path / "state")
    good = cold_file(state)
    original = good.read_bytes()
    short = _short_archive(good, 9)
    sha = hashlib.sha256(short).hexdigest()
    good.unlink()
    (state / COLD / f"{sha}.jsonl.zst").write_bytes(short)
    con = sqlite3.connect(state / STORE)
    old = con.execute("SELECT archive_name, archive_sha256, archive_bytes FROM session_transcript_cold_archives "
                      "WHERE session_id = ?", (PLAIN_CHAT,)).fetchone()
    con.execute("UPDATE session_transcript_cold_archives SET archive_name = ?, archive_sha256 = ?, archive_bytes = ? "
                "WHERE session_id = ?", (f"{sha}.jsonl.zst", sha, len(short), PLAIN_CHAT))
    con.commit()
    target = tmp_path / "t.sqlite"
    first = damaged(state, target, [f"cold archive {state / COLD / f'{sha}.jsonl.zst'} (window {PLAIN_CHAT}): holds "
                                    "10 event records up to seq 9, its row records 16 up to seq 15; its events are "
                                    "read; the window is read whole again by the next run"])
    path = expected("cold/state")["cold.plain-chat.json"][1:]
    held = [i for i, _, _ in session_entries(target, PLAIN_CHAT)]
    assert 0 < len(held) < len(path) and held == [i for i, _ in path[:len(held)]]
    assert first["messages"]["inserted"] == 113 - len(path) + len(held)
    recorded = sqlite3.connect(target).execute("SELECT count(*) FROM lcm_etl_transcript_files WHERE path LIKE ?",
                                               (f"%#{PLAIN_CHAT}",)).fetchone()[0]
    assert recorded == 0   # never recorded at the row's last seq: the next run reads it whole
    (state / COLD / f"{sha}.jsonl.zst").unlink()   # restored from a backup
    good.write_bytes(original)
    con.execute("UPDATE session_transcript_cold_archives SET archive_name = ?, archive_sha256 = ?, archive_bytes = ? "
                "WHERE session_id = ?", (*old, PLAIN_CHAT))
    con.commit()
    con.close()
    again = reconcile(state, target)
    assert again["messages"]["inserted"] == len(path) - len(held) and again["warnings"] == []
    landed_as_expected(target, "cold/state")
    assert audit(state, target)[0] == 0


def test_a_window_none_of_whose_rows_parses_is_a_finding_naming_it_and_inspect_lists_it(tmp_path):
    state = copy_state("pending/state", tmp_path / "state")
    agenda = json.loads((HIDDEN / "expected" / "pending.agenda.json").read_text())["sessionId"]
    con = sqlite3.connect(state / STORE)
    con.create_function("octet_length", 1, lambda v: None if v is None else len(str(v).encode()))
    con.execute("PRAGMA ignore_check_constraints = ON")   # damage, not OpenClaw: its CHECKs do not hold
    con.execute("UPDATE transcript_events SET event_json = 'not json', event_zstd = NULL WHERE session_id = ?",
                (agenda,))
    con.commit()
    con.close()
    target = tmp_path / "t.sqlite"
    damaged(state, target, [f"window {state / STORE}#{agenda}: not an OpenClaw transcript (holds no session header "
                            "and no message entry); not read"])
    landed_as_expected(target, "pending/state", but=("pending.agenda.json",))
    proc = run_cli("inspect", "--src", state / STORE, "--json")
    assert proc.returncode == 0, proc.stderr
    (window,) = [w for w in json.loads(proc.stdout)["windows"] if w["session_id"] == agenda]
    assert (window["messages_on_path"], window["projection"]) == (0, "unreadable")


# --------------------------------------------------------------------------------------------------------------------
# pending inputs, unknown tables, --watch

PENDING = json.loads((HIDDEN / "expected" / "pending.pending-inputs.json").read_text())["rows"][0]


def _pending_json(state: Path, message_json: str) -> None:
    con = sqlite3.connect(state / STORE)
    con.execute("UPDATE session_pending_inputs SET message_json = ?", (message_json,))
    con.commit()
    con.close()


def test_a_pending_input_with_a_lone_surrogate_escape_is_read_as_a_transcript_line_is(tmp_path):
    state = copy_state("pending/state", tmp_path / "state")
    message = {**PENDING["message"], "content": "PLACEHOLDER"}
    _pending_json(state, json.dumps(message).replace("PLACEHOLDER", "half an emoji \\ud83d, then more"))
    report = reconcile(state, tmp_path / "t.sqlite")
    assert report["messages"]["inserted"] == 15 and report["warnings"] == []
    last = session_entries(tmp_path / "t.sqlite", PENDING["session_id"])[-1]
    assert last[1:] == ("user", "half an emoji \ufffd, then more")   # as lossless-claw keeps a transcript line's
    line = tmp_path / "line" / "0199d0a1-dead-7a00-8b00-000000000002.jsonl"
    line.parent.mkdir()
    line.write_text('{"type":"session","version":3,"id":"0199d0a1-dead-7a00-8b00-000000000002"}\n'
                    '{"type":"message","id":"m1","parentId":null,"message":'
                    + json.dumps(message).replace("PLACEHOLDER", "half an emoji \\ud83d, then more") + "}\n")
    reconcile(line, tmp_path / "line.sqlite")
    assert session_entries(tmp_path / "line.sqlite", "0199d0a1-dead-7a00-8b00-000000000002")[0][2] == last[2]


def test_a_100_mb_pending_input_lands_within_the_default_memory_limit(tmp_path):
    state = copy_state("pending/state", tmp_path / "state")
    _pending_json(state, json.dumps({**PENDING["message"], "content": "y" * 100_000_000}))
    report = reconcile(state, tmp_path / "t.sqlite")
    assert report["messages"]["inserted"] == 15
    con = sqlite3.connect(tmp_path / "t.sqlite")
    assert con.execute("SELECT max(length(content)) FROM lcm_messages").fetchone()[0] == 100_000_000
    con.close()


@pytest.mark.parametrize("ddl, columns", [
    ("CREATE TABLE transcript_events_content (session_id TEXT, seq INTEGER, event_json TEXT)", "event_json, session_id"),
    ("CREATE TABLE session_outbox (sessionId TEXT, msgId TEXT, payload TEXT)", "msgId, sessionId")])
def test_an_unknown_table_named_like_a_shadow_or_with_camel_case_ids_is_a_finding(tmp_path, ddl, columns):
    state = copy_state("pending/state", tmp_path / "state")
    con = sqlite3.connect(state / STORE)
    con.execute(ddl)
    con.commit()
    con.close()
    table = ddl.split()[2]
    damaged(state, tmp_path / "t.sqlite", [f"session store table {state / STORE}#{table}: unknown, holds session "
                                           f"rows: not read; columns {columns}; a newer OpenClaw's (user_version 23): "
                                           "lcm-etl does not know it"], messages=15)


def test_a_watch_in_text_shows_each_warning_its_sync_counts(tmp_path):
    from watchlib import Watcher

    state = copy_state("archive-tier/state", tmp_path / "state")
    bad = state / TIER / TIER_FILE
    bad.write_bytes(b"\0" * 8192)
    w = Watcher("reconcile", "--sessions", state, "--dest", tmp_path / "t.sqlite", "--interval", "0.2",
                tmp=tmp_path / "tmp", as_json=False)
    try:
        first = w.next_sync()
        warnings = [w.next_sync() for _ in range(int(first.split(", ")[-1].split(" ")[0]))]
        code, err = w.stop()
    finally:
        w.kill()
    assert code == 0, err
    assert first.split(" ", 1)[1].startswith("sync 1: +76 messages, ") and ", 2 warnings (" in first
    assert f"  warning: archive {bad}: not an OpenClaw transcript (holds no session header and no message entry); " \
           "not read" in warnings
