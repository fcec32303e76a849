"""Corrupted inputs: either a correct import or exit 2 with one line on stderr - never a
traceback, never a partial target."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from faultlib import ROOT, assert_sound, connect, run

pytestmark = pytest.mark.slow

SESSIONS = ROOT / "fixtures" / "sessions"
TRANSCRIPTS = ("plain-chat.jsonl", "tool-heavy.jsonl", "branched.jsonl", "compaction.jsonl", "unicode.jsonl")
DATABASES = sorted(p.name for p in (ROOT / "fixtures" / "lossless-claw").glob("*.db"))
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    print_blob=True)


def check_outcome(proc, target: Path) -> None:
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 2), f"exit {proc.returncode}: {proc.stderr}"
    if proc.returncode == 2:
        lines = proc.stderr.strip("\n").split("\n")
        assert len(lines) == 1 and lines[0].startswith("lcm-etl: error:"), proc.stderr
        assert not target.exists(), "a failed run left a target behind"
        assert not target.parent.exists() or not any(target.parent.iterdir()), list(target.parent.iterdir())
    elif target.exists():
        assert_sound(target)


# --------------------------------------------------------------------------------------------------
# JSONL transcripts

op = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1), st.floats(0, 1)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.floats(0, 1), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.floats(0, 1), st.integers(1, 255)),
    st.tuples(st.just("duplicate"), st.floats(0, 1)),
    st.tuples(st.just("remove"), st.floats(0, 1)),
)


def corrupt(lines: list[bytes], ops) -> list[bytes]:
    lines = list(lines)
    for o in ops:
        if not lines:
            break
        i = min(int(o[1] * len(lines)), len(lines) - 1)
        line = lines[i]
        at = min(int(o[2] * len(line)), len(line)) if len(o) > 2 else 0
        if o[0] == "truncate":
            lines[i] = line[:at]
        elif o[0] == "insert":
            lines[i] = line[:at] + o[3] + line[at:]
        elif o[0] == "flip" and line:
            at = min(at, len(line) - 1)
            lines[i] = line[:at] + bytes([line[at] ^ o[3]]) + line[at + 1:]
        elif o[0] == "duplicate":
            lines.insert(i, line)
        elif o[0] == "remove":
            del lines[i]
    return lines


def entry_ids(data: bytes) -> set[str]:
    """Ids of the message entries that survived as JSON in the corrupted file."""
    out = set()
    for raw in data.split(b"\n"):
        try:
            obj = json.loads(raw.decode("utf-8").strip("\ufeff\r"))
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(obj, dict) and obj.get("type") == "message" and isinstance(obj.get("id"), str):
            out.add(obj["id"])
    return out


@SETTINGS
@given(name=st.sampled_from(TRANSCRIPTS), ops=st.lists(op, min_size=1, max_size=6))
def test_a_corrupted_transcript_is_imported_correctly_or_refused_with_one_line(name, ops):
    lines = (SESSIONS / name).read_bytes().split(b"\n")
    data = b"\n".join(corrupt(lines, ops))
    with tempfile.TemporaryDirectory(prefix="lcm-faults-") as tmp:
        tmp = Path(tmp)
        transcript = tmp / "sessions" / name
        transcript.parent.mkdir()
        transcript.write_bytes(data)
        target = tmp / "remnic" / "lcm.sqlite"
        proc = run("reconcile", "--sessions", transcript, "--dest", target, "-q", tmp=tmp / "tmp")
        check_outcome(proc, target)
        assert transcript.read_bytes() == data
        if proc.returncode == 0 and target.exists():
            con = connect(target)
            try:
                got = [json.loads(r[0]) for r in con.execute("SELECT metadata FROM lcm_messages")]
            finally:
                con.close()
            ids = [m["transcript_entry_id"] for m in got if m.get("transcript_entry_id")]   # a flip can eat "id"
            assert set(ids) <= entry_ids(data), "an imported entry is not in the file"
            assert len(set(ids)) == len(ids), "an entry was imported twice"


# --------------------------------------------------------------------------------------------------
# lossless-claw databases


@SETTINGS
@given(name=st.sampled_from(DATABASES),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=20))
# found by CI: a page DuckDB meets while merely attaching the source (it escaped as an internal error)
@example(name="shared-session-newest.db", flips=[(0.9955358681264229, 1)])
# found by the fault suite: a flipped bit in an index's page, which quick_check passes and the write meets as
# "malformed" (exit 1, blaming the target)
@example(name="basic-0.1.0.db", flips=[(0.05078125, 1)])
def test_a_source_database_with_flipped_bytes_is_imported_correctly_or_refused_with_one_line(name, flips):
    fixture = ROOT / "fixtures" / "lossless-claw" / name
    with tempfile.TemporaryDirectory(prefix="lcm-faults-") as tmp:
        tmp = Path(tmp)
        src = tmp / "openclaw" / name
        src.parent.mkdir()
        files = [src] + [Path(str(src) + s) for s in ("-wal",) if Path(str(fixture) + s).exists()]
        blobs = [bytearray((Path(str(fixture) + f.name[len(name):])).read_bytes()) for f in files]
        total = sum(len(b) for b in blobs)
        for where, mask in flips:               # anywhere in the main file or its -wal
            at = int(where * total)
            for b in blobs:
                if at < len(b):
                    b[at] ^= mask
                    break
                at -= len(b)
        for f, b in zip(files, blobs):
            f.write_bytes(bytes(b))
        target = tmp / "remnic" / "lcm.sqlite"
        proc = run("migrate", "--src", src, "--dest", target, "-q", tmp=tmp / "tmp")
        check_outcome(proc, target)


def test_a_source_whose_schema_text_is_not_utf8_is_refused_with_one_line(tmp_path):
    fixture = ROOT / "fixtures" / "lossless-claw" / "multiparent-newest.db"
    data = bytearray(fixture.read_bytes())
    assert data[103488:103489] == b"c"            # inside a CREATE statement stored in sqlite_master
    data[103488] ^= 0x80
    src = tmp_path / "openclaw" / "lcm.db"
    src.parent.mkdir()
    src.write_bytes(bytes(data))
    target = tmp_path / "remnic" / "lcm.sqlite"
    proc = run("migrate", "--src", src, "--dest", target, "-q", tmp=tmp_path / "tmp")
    check_outcome(proc, target)
    assert proc.returncode == 2
