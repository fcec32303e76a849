"""Read OpenClaw JSONL session transcripts (docs/mapping.md, JSONL transcripts).

``read_transcript`` returns the messages on a transcript's *active path* as OpenClaw itself computes
it, plus a report of everything it skipped; each message carries lossless-claw's content, token count
(transcript/transcript_tokens.py), identity hash (transcript/transcript_identity.py), creation time
(transcript/transcript_time.py) and its Remnic parts
(transcript/transcript_blocks.py). transcript/transcript_files.py finds the files and their session keys. Pure Python, no I/O
besides reading the named file.

Reading rules: bytes split on ``b"\\n"`` only (raw U+2028/U+2029/U+0085 stay inside their line), a
trailing ``\\r`` and a BOM are stripped, blank lines are ignored, and a line that does not parse as a
JSON object is skipped and reported with its 1-based number (``strict=True`` raises instead).

Lone surrogates: a ``\\ud83d`` escape has no UTF-8 form. ``orjson`` rejects such lines, so they are
re-parsed with ``json.loads``, which keeps the surrogate in the ``str``. ``TranscriptMessage.content``
replaces each one with U+FFFD (what lossless-claw's rows hold); ``lc_content`` keeps them (identity
hashing encodes them as U+FFFD, like Node); part payloads and metadata keep them too, so serialise those
with ``transcript_blocks.js_stringify`` (writes ``\\udXXX`` escapes like JSON.stringify), never orjson.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable, Protocol

import orjson

from lcm_etl.read.findings import Unreadable, read_regular
from lcm_etl.read.transcript.transcript_blocks import build_parts, extract_content, reject_constant, without_surrogates
from lcm_etl.read.transcript.transcript_files import file_stem
from lcm_etl.read.transcript.transcript_identity import identity_hash
from lcm_etl.read.transcript.transcript_time import created_at
from lcm_etl.read.transcript.transcript_tokens import lc_token_count

PERSISTABLE_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "tool",
                     "toolResult": "tool"}
CANONICAL_TYPES = frozenset({"message", "thinking_level_change", "model_change", "compaction", "branch_summary",
                             "custom", "custom_message", "label", "session_info"})
_BLANK = re.compile(rb"[ \t\r]*\Z")


class TranscriptError(Exception):
    """A file that is not a readable transcript (or, in strict mode, holds a bad line)."""

    def __init__(self, path: Path | str, message: str):
        self.path, self.message = Path(path), message
        super().__init__(f"{path}: {message}")


@dataclass
class TranscriptMessage:
    entry_id: str | None
    parent_id: str | None
    line_no: int
    role: str
    content: str
    lc_content: str
    token_count: int
    identity_hash: str
    created_at: str | None
    created_at_lc: str | None
    inner_timestamp: Any
    metadata: dict[str, Any]
    parts: list[dict[str, Any]]
    sender_metadata: dict[str, str] | None = None


@dataclass(slots=True)   # one per transcript read
class TranscriptReport:
    lines_total: int = 0
    skipped_lines: list[tuple[int, str]] = field(default_factory=list)
    abandoned_entries: int = 0
    gaps: list[str] = field(default_factory=list)
    replays: list[int] = field(default_factory=list)
    unknown_types: int = 0
    extra_headers: list[int] = field(default_factory=list)
    non_persistable: dict[str, int] = field(default_factory=dict)
    cycles: list[str] = field(default_factory=list)
    projection: str = ""   # a store window: how OpenClaw's materialized path compares (store_reads._projection)


@dataclass(frozen=True, slots=True)   # one per transcript read
class Mark:
    """What a read of a transcript leaves for the next run to continue from: the record's columns (the target's
    lcm_etl_transcript_files, the run file's `transcripts`, r95_record_offsets.sql; tests/test_transcript_record.py).
    A file or an archive is read by its bytes, a session store window by its rows' seqs."""
    lines: int                    # lines (a window: rows) read
    messages: int                 # messages on the active path in them
    parts: int                    # those messages' parts (the report's parts already present)
    tip: str | None               # the entry an append continues from (the leaf, last and with an id); None: whole
    size: int | None = None       # a file's bytes read (up to the end of the last complete line); an archive's bytes
    sha256: str | None = None     # of those bytes
    seq: int | None = None        # a window's last seq read
    watermark: str | None = None  # a window's rewrite watermark (OpenClaw moves it when it rewrites rows in place)


MARK_COLUMNS = tuple(f.name for f in fields(Mark))


class Origin(Protocol):
    """Where a transcript was read from besides a file: a store window (openclaw_store.StoreWindow), an archive or a
    pending input (store_reads.ArchiveOrigin, PendingOrigin); its facts go into its messages' metadata."""
    @property
    def session_key(self) -> str | None: ...

    @property
    def record_key(self) -> str | None: ...   # where its record is kept (transcript_decision.transcript_key)

    @property
    def window_form(self) -> bool: ...   # a store window's, in any form: its messages name the window, not the file

    def metadata(self) -> dict: ...


@dataclass(slots=True)   # one per transcript read
class Transcript:
    path: Path
    header_id: str
    header: dict[str, Any] | None
    version: int | None
    messages: list[TranscriptMessage]
    report: TranscriptReport
    abandoned: list[tuple[str, str | None, Any]] = field(default_factory=list)   # (entry id, role, inner ts)
    mark: Mark | None = None
    read_from: int = 0     # where this read started: a file's byte, a window's seq (0: whole)
    lines_read: int = 0    # lines (rows) this read parsed
    origin: Origin | None = None
    why_whole: str | None = None   # why it was read whole (transcript_decision.CAUSES); None: from its record


@dataclass
class _Node:
    key: str               # entry id, or a synthetic "#<line>" for an id-less entry
    parent: str | None     # resolved parent key (None = root)
    prev: str | None       # previous indexed entry in file order
    line_no: int
    entry: dict[str, Any]
    has_id: bool


def parse_line(raw: bytes) -> tuple[Any, str | None]:
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        first_error = str(exc)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:  # orjson rejects lone-surrogate escapes; the stdlib keeps them
        return json.loads(text, parse_constant=reject_constant), None
    except (ValueError, RecursionError):
        return None, "not JSON: " + first_error.split(":")[0]


def _lines(data: bytes):
    """The file's lines, split on b"\n" only (one trailing newline ends the last line), one at a time:
    a split of the whole file would hold a second copy of it while the lines are parsed."""
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    start = 0
    while end:
        stop = data.find(b"\n", start, end)
        if stop < 0:
            yield data[start:end]
            return
        yield data[start:stop]
        start = stop + 1


def read_transcript(path: Path | str, strict: bool = False) -> Transcript:
    """Parse one transcript file; see the module docstring for the rules."""
    path = Path(path)
    try:
        data = read_regular(path)
    except Unreadable as exc:
        raise TranscriptError(path, exc.problem) from None
    return transcript_of_bytes(path, data, strict)


def transcript_of_bytes(path: Path, data: bytes, strict: bool = False) -> Transcript:
    """Parse a transcript's bytes (a file's, or an archive's once decompressed); `path` names it in reports."""
    complete = data.rfind(b"\n") + 1   # a last line without its newline may still be being written
    digest = hashlib.sha256(memoryview(data)[:complete]).hexdigest()
    line_count = data.count(b"\n", 0, complete)
    whole_lines = complete == len(data)
    t = parse_transcript(path, enumerate(_lines(data), 1), strict, whole_lines=whole_lines)
    assert t.mark is not None
    return replace(t, mark=replace(t.mark, lines=line_count, size=complete, sha256=digest))


def parse_transcript(path: Path, lines: Iterable[tuple[int, bytes]], strict: bool = False, *,
                     store_rules: bool = False, whole_lines: bool = True) -> Transcript:
    """The active path of a transcript given as numbered lines: a file's (1-based line numbers) or a session
    store window's rows (their seqs, lcm_etl/read/openclaw/openclaw_store.py). `store_rules`: OpenClaw 2026.7.2+'s
    scan for a missing parent and for entries after a `reset` (see _active_path). The returned mark holds
    the lines, the path's messages, parts and tip; what they were read by (bytes, seqs) is the caller's to say."""
    report = TranscriptReport()
    entries: list[tuple[int, dict[str, Any]]] = []
    undecodable = 0
    for no, raw in lines:
        report.lines_total = no
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if _BLANK.match(raw):   # not raw.strip(): that copies a line of any size to see it is not blank
            continue
        value, reason = parse_line(raw)
        if reason is None and not isinstance(value, dict):
            reason = f"not a JSON object ({type(value).__name__})"
        if reason is not None:
            undecodable += reason == "not UTF-8"
            if strict:
                raise TranscriptError(path, f"line {no}: unparsable line ({reason})")
            report.skipped_lines.append((no, reason))
            continue
        entries.append((no, value))
    header: dict[str, Any] | None = None
    body: list[tuple[int, dict[str, Any]]] = []
    for no, e in entries:
        if e.get("type") == "session":
            if header is None and not body:
                header = e
            else:
                report.extra_headers.append(no)
            continue
        body.append((no, e))
    if header is None and not any(e.get("type") == "message" and isinstance(e.get("message"), dict)
                                  for _, e in body):
        if entries or report.skipped_lines:
            why = "is not UTF-8 text" if undecodable and not entries else "holds no session header and no message entry"
            raise TranscriptError(path, f"not an OpenClaw transcript ({why})")
    hid = header.get("id") if header else None
    header_id = hid.strip() if isinstance(hid, str) and hid.strip() else file_stem(path)
    version = (header.get("version") if isinstance(header.get("version"), int) else 1) if header else None
    # a v4 header is written by OpenClaw 2026.7.2+ (a store window, or an archive it published): its scan rules
    on_path, nodes = _active_path(body, report, store_rules or (version or 0) >= 4)
    messages: list[TranscriptMessage] = []
    for node in on_path:
        try:
            message = message_of(node, report)
        except RecursionError:  # JSON nested deeper than Python can walk: treat the line as unusable
            if strict:
                raise TranscriptError(path, f"line {node.line_no}: message nested too deeply") from None
            report.skipped_lines.append((node.line_no, "message nested too deeply"))
            continue
        if message is not None:
            messages.append(message)
    path_keys = {n.key for n in on_path}
    off_path = [n for n in nodes.values() if n.entry.get("type") == "message" and n.key not in path_keys]
    report.abandoned_entries = len(off_path)
    # (entry id, DB role, inner timestamp) of abandoned messages: a copy-on-write rewrite re-issues a
    # message under a new id but keeps its inner timestamp, which lets reconcile recognise the copy.
    abandoned = [(n.key, PERSISTABLE_ROLES.get(n.entry["message"].get("role")), n.entry["message"].get("timestamp"))
                 for n in off_path if n.has_id and isinstance(n.entry.get("message"), dict)
                 and isinstance(n.entry["message"].get("role"), str)]
    last = next(reversed(nodes), None)
    tip = on_path[-1].key if on_path and on_path[-1].has_id and on_path[-1].key == last and whole_lines else None
    return Transcript(path, header_id, header, version, messages, report, abandoned,
                      Mark(report.lines_total, len(messages), sum(len(m.parts) for m in messages), tip),
                      lines_read=report.lines_total)


def _active_path(body: list[tuple[int, dict]], report: TranscriptReport,
                 store_rules: bool = False) -> tuple[list[_Node], dict[str, _Node]]:
    """OpenClaw's leaf selection and parent walk, with the gap and replay rules of docs/mapping.md.

    Every canonical entry becomes the leaf unless it is `appendMode: "side"`; a valid `leaf` control moves
    the leaf to its target (an entry whose parent is the control continues from the target). The path is the
    parent chain from the final leaf. A JSONL-era file (OpenClaw 2026.7.1's reader): a parent that is missing
    continues with the entry before it in file order. `store_rules` (OpenClaw 2026.7.2+'s transcript-tree scan,
    used for session store windows and their archives): a missing parent falls back to the leaf at the time
    the entry was written, and after a `reset` entry, an entry whose parent is not the reset or a descendant of
    it is re-parented to that leaf."""
    nodes: dict[str, _Node] = {}
    prev: str | None = None
    leaf: str | None = None
    since_reset: set[str] | None = None   # the last reset and its descendants (store_rules)
    for no, e in body:
        typ = e.get("type")
        canonical = typ in CANONICAL_TYPES or (store_rules and typ == "reset")
        eid = e.get("id", e.get("uuid"))
        stripped_id = eid.strip() if isinstance(eid, str) else ""
        has_id = bool(stripped_id)
        if not canonical and typ != "leaf":
            report.unknown_types += 1
            if not has_id:
                continue
        key = stripped_id if has_id else f"#{no}"
        if key in nodes:
            report.replays.append(no)
            continue
        pkey = "parentId" if "parentId" in e else "parentUuid" if "parentUuid" in e else None
        if pkey is None or not has_id:
            parent = prev              # id-less (v1) or raw-append entries continue the file's chain
        else:
            p = e[pkey]
            parent = p.strip() if isinstance(p, str) and p.strip() else None
        if store_rules and typ != "leaf":
            if parent is not None and parent not in nodes:
                report.gaps.append(key)
                parent = leaf          # OpenClaw's scan: a stale or missing parent continues from the leaf
            elif since_reset is not None and typ != "reset" and parent not in since_reset:
                parent = leaf          # written after a reset, but hung below what the reset closed
        if typ == "leaf":
            target = e.get("targetId")
            if target is None or (isinstance(target, str) and target in nodes):
                parent = target        # a valid leaf record selects its target ...
                if e.get("appendMode") != "side":
                    leaf = target      # ... and moves the leaf there, unless it is a side record
        nodes[key] = _Node(key, parent, prev, no, e, has_id)
        prev = key
        if store_rules:
            if typ == "reset":
                since_reset = {key}
            elif since_reset is not None and parent in since_reset:
                since_reset.add(key)
        if canonical and e.get("appendMode") != "side":
            leaf = key
    path: list[_Node] = []
    seen: set[str] = set()
    cur = leaf
    while cur is not None:
        if cur in seen:
            report.cycles.append(cur)
            break
        seen.add(cur)
        node = nodes[cur]
        path.append(node)
        if node.parent is not None and node.parent not in nodes:
            report.gaps.append(node.key)
            cur = node.prev            # dangling parent: continue with the previous entry in file order
        else:
            cur = node.parent
    path.reverse()
    return path, nodes


def message_of(node: _Node, report: TranscriptReport) -> TranscriptMessage | None:
    """The entry's message if it is one lossless-claw persists; a message of another role is counted in the
    report. RecursionError: JSON nested deeper than Python can walk (the caller decides what that costs)."""
    e = node.entry
    msg = e.get("message")
    if e.get("type") != "message" or not isinstance(msg, dict):
        return None
    raw_role = msg.get("role")
    role = PERSISTABLE_ROLES.get(raw_role) if isinstance(raw_role, str) else None
    if role is None:
        label = str(raw_role)
        report.non_persistable[label] = report.non_persistable.get(label, 0) + 1
        return None
    lc = extract_content(msg.get("content")) if "content" in msg else ""
    created, created_lc = created_at(msg, e)
    metadata = {k: v for k, v in msg.items() if k not in ("role", "content", "timestamp")}
    for k, v in e.items():
        if k in ("type", "id", "parentId", "message"):
            continue
        name = "envelope_timestamp" if k == "timestamp" else f"envelope_{k}" if k in metadata else k
        metadata[name] = v
    sender = None
    oc = msg.get("__openclaw")
    if role == "user" and isinstance(oc, dict):
        sender = {k: oc[k] for k in ("senderId", "senderName", "senderUsername")
                  if isinstance(oc.get(k), str) and oc[k].strip()} or None
    parent = e.get("parentId") if node.has_id and isinstance(e.get("parentId"), str) else None
    return TranscriptMessage(
        entry_id=node.key if node.has_id else None, parent_id=parent, line_no=node.line_no, role=role,
        content=without_surrogates(extract_content(msg.get("content"), strip_binary=True)) if "content" in msg else "",
        lc_content=lc, token_count=lc_token_count(msg, lc), identity_hash=identity_hash(role, lc),
        created_at=created, created_at_lc=created_lc,
        inner_timestamp=msg.get("timestamp"), metadata=metadata, parts=build_parts(msg, created),
        sender_metadata=sender)
