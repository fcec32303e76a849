"""A reconcile re-run reads each transcript from where the previous complete run stopped.

A complete reconcile records, per file it planned (the target's `lcm_etl_transcript_files`, lcm_etl/store/ledger.py):
how many bytes it read (up to the end of the last complete line), their SHA-256, their lines and path
messages, and the entry an append must continue from. The next run reads the file from that offset when:

- the recording run is `complete` and no `undo` ran after it (an undo may have removed what it imported),
  and it ran with the same --key-by and the same --src (what counted as held);
- the first `size` bytes still hash to the recorded SHA-256 — the whole prefix is hashed, never assumed:
  OpenClaw rewrites files in place (v1→v3 migration, header normalisation, removeTrailingEntries,
  rewriteFile) without changing their name, and can do so at the same size. Hashing costs a sequential
  read at SHA-256 speed, a small fraction of parsing the same bytes (docs/benchmarks.md);
- every appended line is a canonical entry with an id whose parentId is the previous one (the recorded tip
  first): an append to the active branch. Anything else — a branch, a `leaf` record, a side-mode entry, an
  id-less or unknown entry, an unparsable line, a second header — is not an append, and the file is read
  whole, as is a file without entry ids (v1), whose messages are matched by identity along the whole path.

Otherwise the file is read whole (lcm_etl/read/transcripts.py), which is always correct.
"""
from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from lcm_etl.read.transcripts import (_BLANK, CANONICAL_TYPES, ReadMark, Transcript, TranscriptReport, _lines,
                                      _Node, _parse_line, message_of, read_transcript)

_RECORDED = """
SELECT f.path, f.size, f.sha256, f.lines, f.messages, f.tip, f.header_id, f.version, f.session_id, f.key_by, f.held_by
FROM lcm_etl_transcript_files f JOIN lcm_etl_runs r ON r.run_id = f.run_id
WHERE r.status = 'complete'
  AND NOT EXISTS (SELECT 1 FROM lcm_etl_runs u WHERE u.command = 'undo' AND u.rowid > r.rowid)"""


@dataclass(frozen=True)
class FileRecord:
    """What the last complete reconcile read of one file."""
    path: str
    size: int
    sha256: str
    lines: int
    messages: int
    tip: str | None
    header_id: str
    version: int | None
    session_id: str
    key_by: str
    held_by: str


def file_key(path: Path) -> str:
    return str(path.absolute())


def transcript_key(t: Transcript) -> str:
    """A transcript's record key: a file's absolute path; a store window's `<store's absolute path>#<session id>`
    (lcm_etl/read/store_reads.py reads a window from its record)."""
    record_key = getattr(t.origin, "record_key", None)
    return record_key() if record_key is not None else file_key(t.path)


def recorded(target: Path | None, hint: bool = False) -> dict[str, FileRecord]:
    """The usable records of a target (none when there is no target or no such table).

    `hint`: read before the run lock, touching no file (a dry run creates none): the main file alone, as
    immutable, when no -wal exists beside it — a -wal may hold newer commits, and then there is no hint. A
    hint only says which files to try from an offset; the run checks each record it used against the
    records it reads under the lock (reconcile._settle)."""
    if target is None or not target.exists():
        return {}
    if hint and Path(f"{target}-wal").exists():
        return {}
    try:
        with closing(sqlite3.connect(f"{target.absolute().as_uri()}?{'immutable=1' if hint else 'mode=ro'}",
                                     uri=True)) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"lcm_etl_transcript_files", "lcm_etl_runs"} <= names:
                return {}
            return {r[0]: FileRecord(*r) for r in con.execute(_RECORDED)}
    except sqlite3.Error:   # not readable now: the run reads every file whole, and check_target says why
        return {}


def read(path: Path, record: FileRecord | None, strict: bool) -> Transcript:
    """The file from the recorded offset when the record proves the prefix unchanged, else whole."""
    if record is not None and record.tip is not None:
        appended = read_appended(path, record)
        if appended is not None:
            return appended
    return read_transcript(path, strict=strict)


def read_appended(path: Path, rec: FileRecord) -> Transcript | None:
    """The messages appended after `rec.size`, or None when the file is not the recorded prefix plus an
    append to its active branch (then it is read whole)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            left = rec.size
            while left:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    return None   # shorter than the prefix
                digest.update(chunk)
                left -= len(chunk)
            if digest.hexdigest() != rec.sha256:
                return None
            tail = f.read()
    except OSError:
        return None   # the whole read reports it
    tail = tail[:tail.rfind(b"\n") + 1]   # a line still being written is read next time
    report = TranscriptReport()
    lines = ((rec.lines + i, raw) for i, raw in enumerate(_lines(tail), 1))
    appended = continue_path(lines, rec.tip, report)
    if appended is None:
        return None
    messages, tip = appended
    digest.update(tail)
    lines_read = tail.count(b"\n")
    mark = ReadMark(rec.size + len(tail), digest.hexdigest(), rec.lines + lines_read, rec.messages + len(messages),
                    tip, rec.size, lines_read)
    return Transcript(path, rec.header_id, None, rec.version, messages, report, [], mark)


def continue_path(lines, tip: str | None, report: TranscriptReport) -> tuple[list, str | None] | None:
    """The messages of numbered lines (a file's tail, a window's new rows) that extend the active branch from
    `tip`, each line by one entry, and the new tip; None when any line does not (the caller reads whole)."""
    messages = []
    seen = {tip}
    for no, raw in lines:
        report.lines_total = no
        if raw is None:
            return None
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        raw = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw
        if _BLANK.match(raw):
            continue
        e, reason = _parse_line(raw)
        if reason is not None or not isinstance(e, dict) or not _continues(e, tip, seen):
            return None
        key = e["id"].strip()
        node = _Node(key, tip, tip, no, e, True)
        seen.add(key)
        tip = key
        try:
            message = message_of(node, report)
        except RecursionError:   # read whole, where the line is reported
            return None
        if message is not None:
            messages.append(message)
    return messages, tip


def _continues(e: dict, tip: str | None, seen: set) -> bool:
    """An entry that extends the active branch by one: canonical, with a new id, whose parent is the tip."""
    eid, parent = e.get("id"), e.get("parentId")
    return (e.get("type") in CANONICAL_TYPES and e.get("appendMode") != "side"
            and isinstance(eid, str) and bool(eid.strip()) and eid.strip() not in seen
            and isinstance(parent, str) and parent.strip() == tip)


def rows(transcripts: list[Transcript], sessions, selected: set[str], key_by: str, held_by: str) -> list[tuple]:
    """lcm_etl_transcript_files rows for the files of the sessions this run planned."""
    out = []
    for t, s in zip(transcripts, sessions):
        if t.mark is not None and s.session_id in selected:
            m = t.mark
            out.append((transcript_key(t), m.size, m.sha256, m.lines, m.messages, m.tip, t.header_id, t.version,
                        s.session_id, key_by, held_by))
    return out


def usable(record: FileRecord | None, key_by: str, held_by: str) -> FileRecord | None:
    """A record made under the same --key-by and --src: what counted as held then counts now."""
    return record if record is not None and (record.key_by, record.held_by) == (key_by, held_by) else None
