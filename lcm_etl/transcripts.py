"""Read OpenClaw JSONL session transcripts (SPEC section 6).

``read_transcript`` returns the messages on a transcript's *active path* as OpenClaw itself computes
it, plus a report of everything it skipped. ``discover_transcripts`` and ``load_session_keys`` find the
files and their session keys. Pure Python, no I/O besides reading the named files.

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
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson

from .transcript_blocks import (FILE_TYPES, REASONING_TYPES, TOOL_CALL_TYPES, TOOL_RESULT_TYPES, extract_content,
                                identity_hash, lc_token_count, without_surrogates)

PERSISTABLE_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "tool": "tool",
                     "toolResult": "tool"}
CANONICAL_TYPES = frozenset({"message", "thinking_level_change", "model_change", "compaction", "branch_summary",
                             "custom", "custom_message", "label", "session_info"})
_SESSION_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$", re.IGNORECASE)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_BLANK = re.compile(rb"[ \t\r]*\Z")
_ARCHIVE_RE = re.compile(r"\.jsonl\.(reset|deleted|bak)\.[^/]+$")


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


@dataclass
class TranscriptReport:
    lines_total: int = 0
    skipped_lines: list[tuple[int, str]] = field(default_factory=list)
    abandoned_entries: int = 0
    gaps: list[str] = field(default_factory=list)
    replays: list[int] = field(default_factory=list)
    unknown_types: int = 0
    extra_headers: list[int] = field(default_factory=list)
    title: str | None = None
    non_persistable: dict[str, int] = field(default_factory=dict)
    cycles: list[str] = field(default_factory=list)


@dataclass
class ReadMark:
    """How far a read of the file went, for the next run to continue from (lcm_etl/transcript_offsets.py)."""
    size: int              # bytes read: up to the end of the last complete line
    sha256: str            # of those bytes
    lines: int             # lines in them
    messages: int          # messages on the active path in them
    tip: str | None        # the entry an append must continue from (the leaf, when it is the last entry and
                           # has an id); None: the next run reads the file whole
    read_from: int = 0     # where this read started (0: the whole file)
    lines_read: int = 0


@dataclass
class Transcript:
    path: Path
    header_id: str
    header: dict[str, Any] | None
    version: int | None
    messages: list[TranscriptMessage]
    report: TranscriptReport
    abandoned: list[tuple[str, str | None, Any]] = field(default_factory=list)   # (entry id, role, inner ts)
    mark: ReadMark | None = None


@dataclass
class _Node:
    key: str               # entry id, or a synthetic "#<line>" for an id-less entry
    parent: str | None     # resolved parent key (None = root)
    prev: str | None       # previous indexed entry in file order
    line_no: int
    entry: dict[str, Any]
    has_id: bool


def _parse_line(raw: bytes) -> tuple[Any, str | None]:
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        first_error = str(exc)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:  # orjson rejects lone-surrogate escapes; the stdlib keeps them
        return json.loads(text, parse_constant=_no_constant), None
    except (ValueError, RecursionError):
        return None, "not JSON: " + first_error.split(":")[0]


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid constant {name}")


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


def _file_stem(path: Path) -> str:
    name = path.name
    return name[: name.index(".jsonl")] if ".jsonl" in name else path.stem


def read_transcript(path: Path | str, strict: bool = False) -> Transcript:
    """Parse one transcript file; see the module docstring for the rules."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise TranscriptError(path, "is a directory, not a transcript file") from None
    except OSError as exc:
        raise TranscriptError(path, f"cannot be read ({exc.strerror or exc})") from None
    report = TranscriptReport()
    complete = data.rfind(b"\n") + 1   # a last line without its newline may still be being written
    digest = hashlib.sha256(memoryview(data)[:complete]).hexdigest()
    line_count = data.count(b"\n", 0, complete)
    whole_lines = complete == len(data)
    entries: list[tuple[int, dict[str, Any]]] = []
    undecodable = 0
    for no, raw in enumerate(_lines(data), 1):
        report.lines_total = no
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if _BLANK.match(raw):   # not raw.strip(): that copies a line of any size to see it is not blank
            continue
        value, reason = _parse_line(raw)
        if reason is None and not isinstance(value, dict):
            reason = f"not a JSON object ({type(value).__name__})"
        if reason is not None:
            undecodable += reason == "not UTF-8"
            if strict:
                raise TranscriptError(path, f"line {no}: unparsable line ({reason})")
            report.skipped_lines.append((no, reason))
            continue
        entries.append((no, value))
    del data   # the parsed entries are all that is needed from here on
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
    header_id = hid.strip() if isinstance(hid, str) and hid.strip() else _file_stem(path)
    version = (header.get("version") if isinstance(header.get("version"), int) else 1) if header else None
    on_path, nodes = _active_path(body, report)
    messages: list[TranscriptMessage] = []
    for node in on_path:
        e = node.entry
        if e.get("type") != "message" or not isinstance(e.get("message"), dict):
            continue
        msg = e["message"]
        role = PERSISTABLE_ROLES.get(msg.get("role")) if isinstance(msg.get("role"), str) else None
        if role is None:
            label = str(msg.get("role"))
            report.non_persistable[label] = report.non_persistable.get(label, 0) + 1
            continue
        try:
            messages.append(_to_message(node, msg, role))
        except RecursionError:  # JSON nested deeper than Python can walk: treat the line as unusable
            if strict:
                raise TranscriptError(path, f"line {node.line_no}: message nested too deeply") from None
            report.skipped_lines.append((node.line_no, "message nested too deeply"))
    path_keys = {n.key for n in on_path}
    off_path = [n for n in nodes.values() if n.entry.get("type") == "message" and n.key not in path_keys]
    report.abandoned_entries = len(off_path)
    # (entry id, DB role, inner timestamp) of abandoned messages: a copy-on-write rewrite re-issues a
    # message under a new id but keeps its inner timestamp, which lets reconcile recognise the copy.
    abandoned = [(n.key, PERSISTABLE_ROLES.get(n.entry["message"].get("role")), n.entry["message"].get("timestamp"))
                 for n in off_path if n.has_id and isinstance(n.entry.get("message"), dict)
                 and isinstance(n.entry["message"].get("role"), str)]
    for _, e in body:
        if e.get("type") == "session_info" and isinstance(e.get("name"), str):
            report.title = e["name"]
    last = next(reversed(nodes), None)
    tip = on_path[-1].key if on_path and on_path[-1].has_id and on_path[-1].key == last and whole_lines else None
    return Transcript(path, header_id, header, version, messages, report, abandoned,
                      ReadMark(complete, digest, line_count, len(messages), tip, 0, report.lines_total))


def _active_path(body: list[tuple[int, dict]], report: TranscriptReport) -> tuple[list[_Node], dict[str, _Node]]:
    """OpenClaw's leaf selection and parent walk (reference 2.5/2.6), with SPEC 6's gap and replay rules."""
    nodes: dict[str, _Node] = {}
    prev: str | None = None
    leaf: str | None = None
    for no, e in body:
        typ = e.get("type")
        canonical = typ in CANONICAL_TYPES
        eid = e.get("id", e.get("uuid"))
        has_id = isinstance(eid, str) and bool(eid.strip())
        if not canonical and typ != "leaf":
            report.unknown_types += 1
            if not has_id:
                continue
        key = eid.strip() if has_id else f"#{no}"
        if key in nodes:
            report.replays.append(no)
            continue
        pkey = "parentId" if "parentId" in e else "parentUuid" if "parentUuid" in e else None
        if pkey is None or not has_id:
            parent = prev              # id-less (v1) or raw-append entries continue the file's chain
        else:
            p = e[pkey]
            parent = p.strip() if isinstance(p, str) and p.strip() else None
        if typ == "leaf":
            target = e.get("targetId")
            if target is None or (isinstance(target, str) and target in nodes):
                parent, leaf = target, target      # a valid leaf record selects its target
        nodes[key] = _Node(key, parent, prev, no, e, has_id)
        prev = key
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


def _iso(ts: Any) -> datetime | None:
    if isinstance(ts, bool):
        return None
    if isinstance(ts, (int, float)):
        try:
            return _EPOCH + timedelta(milliseconds=int(ts))
        except (OverflowError, ValueError):
            return None
    if isinstance(ts, str) and ts.strip():
        s = ts.strip().replace(" ", "T", 1)
        if s.endswith(("Z", "z")):
            s = s[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            return None
        return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)
    return None


def _created_at(msg: dict, envelope: dict) -> datetime | None:
    for value in (msg.get("timestamp"), msg.get("createdAt"), msg.get("created_at"), envelope.get("timestamp")):
        dt = _iso(value)
        if dt is not None:
            return dt
    return None


def _to_message(node: _Node, msg: dict, role: str) -> TranscriptMessage:
    e = node.entry
    lc = extract_content(msg.get("content")) if "content" in msg else ""
    dt = _created_at(msg, e)
    created = dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z" if dt else None
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
        created_at=created, created_at_lc=dt.strftime("%Y-%m-%d %H:%M:%S") if dt else None,
        inner_timestamp=msg.get("timestamp"), metadata=metadata, parts=build_parts(msg, created),
        sender_metadata=sender)


_PATH_KEYS = ("file_path", "filePath", "path", "filename", "fileName")


def _part_kind(typ: Any, tool_message: bool) -> str:
    if typ in FILE_TYPES:
        return "file"
    if tool_message:
        return "tool_result"
    if typ == "text":
        return "text"
    if typ in REASONING_TYPES:
        return "reasoning"
    if typ in TOOL_CALL_TYPES:
        return "tool_call"
    if typ in TOOL_RESULT_TYPES:
        return "tool_result"
    return typ if isinstance(typ, str) and typ else "unknown"


def build_parts(msg: dict, created_at: str | None) -> list[dict[str, Any]]:
    """Flatten a message's content into Remnic part dicts; every block field is kept in ``payload``."""
    content = msg.get("content")
    if content is None:
        return []
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else \
        content if isinstance(content, list) else [content]
    tool_message = msg.get("role") in ("toolResult", "tool")
    msg_tool = msg.get("toolName") if isinstance(msg.get("toolName"), str) else None
    parts = []
    for ordinal, block in enumerate(blocks):
        payload = dict(block) if isinstance(block, dict) else {"value": block}
        typ = block.get("type") if isinstance(block, dict) else ("text" if isinstance(block, str) else None)
        if isinstance(block, str):
            payload = {"type": "text", "text": block}
        if tool_message:
            for k in ("toolCallId", "toolName", "isError"):
                if k in msg and k not in payload:
                    payload[k] = msg[k]
        tool_name = payload.get("name") if typ in TOOL_CALL_TYPES else msg_tool if tool_message else None
        tool_name = tool_name if isinstance(tool_name, str) else None
        file_path = next((payload[k] for k in _PATH_KEYS if isinstance(payload.get(k), str)), None)
        args = payload.get("arguments", payload.get("input"))
        if file_path is None and typ in TOOL_CALL_TYPES and isinstance(args, dict):
            file_path = next((args[k] for k in _PATH_KEYS if isinstance(args.get(k), str)), None)
        parts.append({"ordinal": ordinal, "kind": _part_kind(typ, tool_message), "payload": payload,
                      "tool_name": tool_name, "file_path": file_path, "created_at": created_at})
    return parts


def classify_file_name(name: str) -> str:
    """'live', 'archive', or the reason a file in a sessions folder is not a transcript."""
    if name == "sessions.json" or name.startswith("sessions.json."):
        return "session store"
    if ".checkpoint." in name:
        return "compaction checkpoint copy"
    if name.endswith(".trajectory.jsonl") or ".trajectory-path." in name:
        return "trajectory file"
    if ".corrupt-" in name:
        return "corrupt-header backup"
    if _ARCHIVE_RE.search(name):
        return "archive"
    if name.endswith(".jsonl") and _SESSION_ID_RE.match(name[:-6]):
        return "live"
    return "not a transcript file name"


def discover_transcripts(paths: list[Path], explicit: set) -> tuple[list[Path], list[tuple[Path, str]]]:
    """Transcript files to read, and (path, reason) for what was left out.

    A folder is scanned non-recursively for live ``<id>.jsonl`` / ``<id>-topic-<t>.jsonl`` files.
    Archives (``.reset.``/``.deleted.``/``.bak.``) are taken only when named explicitly as a file;
    checkpoint copies, trajectories and ``.corrupt-`` backups never are. An explicitly named file with
    any other name is taken (``read_transcript`` then decides whether it is a transcript).
    """
    explicit_resolved = {Path(p).expanduser().resolve() for p in explicit}
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    seen: set[Path] = set()

    def consider(p: Path, named: bool) -> None:
        kind = classify_file_name(p.name)
        ok = kind == "live" or (named and kind in ("archive", "not a transcript file name"))
        if not ok:
            reason = "archive (name the file explicitly to import it)" if kind == "archive" else kind
            skipped.append((p, reason))
        elif p.resolve() not in seen:
            seen.add(p.resolve())
            files.append(p)

    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            for child in sorted(p.iterdir()):
                if child.is_file():
                    consider(child, False)
        elif p.exists():
            consider(p, p.resolve() in explicit_resolved)
        else:
            skipped.append((p, "no such file or directory"))
    return files, skipped


def load_session_keys(folder: Path | str) -> dict[str, str]:
    """session id -> session key from ``<folder>/sessions.json``; malformed entries are ignored."""
    try:
        store = orjson.loads(Path(folder, "sessions.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    keys: dict[str, str] = {}
    if not isinstance(store, dict):
        return keys
    for key, value in store.items():
        if not isinstance(value, dict) or not key.strip():
            continue
        sid = value.get("sessionId")
        if isinstance(sid, str) and sid.strip():
            keys.setdefault(sid.strip(), key)
        sfile = value.get("sessionFile")
        if isinstance(sfile, str) and sfile.strip():
            keys.setdefault(_file_stem(Path(sfile.strip())), key)
    return keys
