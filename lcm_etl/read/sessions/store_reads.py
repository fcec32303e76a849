"""A session store's windows and the transcripts' archives, read into Transcripts (lcm_etl/read/transcript/transcripts.py).

A window is read whole, or on a re-run only past the seq the last complete run recorded for it (its record in
`lcm_etl_transcript_files`, the one a JSONL file gets too), as lcm_etl/read/sessions/transcript_decision.py decides: the
record made under this run's options, the window's rewrite watermark the recorded one and the recorded seq still
in it (`window_start`), and every row past it extending the active branch from the recorded tip (`continue_path`).
Otherwise the window is read whole, which is always correct. A cold window is read the same way, from its archive
(store_hidden.cold_rows). An archive is read whole once, and then from its record while its bytes are unchanged
(`archive_start`); a pending input is read whole every run.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import orjson

from lcm_etl.file_identity import real_path
from lcm_etl.read.findings import Unreadable, finding, read_regular
from lcm_etl.read.openclaw.openclaw_store import OpenStore, StoreArchive, StoreWindow
from lcm_etl.read.openclaw.store_hidden import PendingInput, decompress
from lcm_etl.read.openclaw.openclaw_state import archive_kind, archive_session_id
from lcm_etl.read.sessions.transcript_decision import NOT_APPEND, PENDING, FileRecord, archive_start, continue_path, window_start
from lcm_etl.read.transcript.transcripts import (Mark, Transcript, TranscriptError, TranscriptReport, parse_transcript,
                                      transcript_of_bytes)


@dataclass(frozen=True)
class ArchiveOrigin:
    """An archived transcript: a store's `session_transcript_archives` row or an archive file."""
    name: str
    kind: str                   # deleted / reset / bak / imported (the doctor's original of an imported file)
    session_id: str
    session_key: str | None
    store: Path | None = None
    agent_id: str | None = None

    @property
    def record_key(self) -> str | None:   # a store's archive row: `<store's real path>#<archive name>`
        return real_path(self.store, self.name) if self.store is not None else None

    @property
    def window_form(self) -> bool:
        """A store window's archive (its row, or the `.zst` file published from it): the window's own messages,
        named by their window as a live read names them; else a legacy JSONL archive, named by its file."""
        return self.store is not None or (self.kind in ("deleted", "reset") and self.name.endswith(".zst"))

    def metadata(self) -> dict:
        out = ({"agent_id": self.agent_id, "session_window": self.session_id} if self.window_form
               else {"archive": self.name, "archive_reason": self.kind})
        return {k: v for k, v in out.items() if v is not None}


def read_window(store: OpenStore, w: StoreWindow, start: FileRecord | str, strict: bool) -> Transcript:
    """The window past its record (`start`, transcript_decision.Records.start) when the record still holds,
    else whole, with the cause in `why_whole`."""
    if isinstance(start, FileRecord):
        held = window_start(start.mark, w)
        appended = _read_appended(store, w, start) if held is None else held
        if isinstance(appended, Transcript):
            return appended
        cause = appended
    else:
        cause = start
    bad: list[tuple[int, str]] = []
    unread = False   # a cold window's archive not (wholly) read: its finding is in store.findings, said once

    def lines():
        nonlocal unread
        for seq, raw, why in store.events(w.session_id):
            if raw is None and w.cold:
                unread = True
            elif raw is None:
                if strict:
                    raise TranscriptError(store.where(w), f"window {w.session_id} seq {seq}: {why}")
                bad.append((seq, why or "unreadable row"))
            else:
                yield seq, raw

    try:
        t = parse_transcript(store.where(w), lines(), strict, store_rules=True)
    except TranscriptError as exc:   # named by its window: a store holds many
        raise TranscriptError(f"{store.where(w)}#{w.session_id}", exc.message) from None
    assert t.mark is not None
    report = replace(t.report, skipped_lines=sorted(t.report.skipped_lines + bad), projection=_projection(store, w, t))
    # a cold window whose archive is a finding is not recorded: once it is restored, a later run reads it whole
    mark = None if unread else replace(t.mark, lines=w.events, seq=w.max_seq, watermark=w.watermark)
    return replace(t, header_id=w.session_id, origin=w, mark=mark, report=report, lines_read=w.events, why_whole=cause)


def _projection(store: OpenStore, w: StoreWindow, t: Transcript) -> str:
    """Whether OpenClaw's own materialized path agrees with the path read (only where it says it is fresh)."""
    if w.projection != "fresh":
        return w.projection
    ids = store.projection(w.session_id)
    if ids is None:
        return "absent"
    return "fresh, agrees" if ids == [m.entry_id for m in t.messages] else "fresh, differs"


def _read_appended(store: OpenStore, w: StoreWindow, rec: FileRecord) -> Transcript | str:
    report, was = TranscriptReport(), rec.mark
    # nothing past the record: no rows to ask for (a cold window's would be its archive verified and decoded again)
    rows = [] if w.max_seq == was.seq else list(store.events(w.session_id, was.seq or 0))
    if any(raw is None for _, raw, _why in rows):   # an unreadable row (a cold archive's finding): read whole, said
        return NOT_APPEND
    appended = continue_path([(seq, raw) for seq, raw, _why in rows], was.tip, report)
    if isinstance(appended, str):
        return appended
    messages, tip = appended
    report.lines_total = w.max_seq
    report.projection = "not compared (read from the recorded seq)"
    mark = Mark(was.lines + len(rows), was.messages + len(messages), was.parts + sum(len(m.parts) for m in messages),
                tip, seq=w.max_seq, watermark=w.watermark)
    return Transcript(store.where(w), w.session_id, None, rec.version, messages, report, [], mark, was.seq or 0,
                      len(rows), origin=w)


def read_store_archive(store: OpenStore, a: StoreArchive, start: FileRecord | str, strict: bool) -> Transcript:
    """A store's archive row: from its record (not read) while its `archive_sha256` is the recorded one, else whole."""
    label = Path(f"{store.path}#{a.name}")
    origin = ArchiveOrigin(a.name, a.reason or "archive", a.session_id, a.session_key, store.path, a.agent_id)
    blob = store.archive_blob(a) if a.sha256 is None else None
    proof = a.sha256 or hashlib.sha256(blob or b"").hexdigest()
    start = archive_start(start, proof)
    if isinstance(start, FileRecord):
        return _unchanged(label, origin, start)
    blob = store.archive_blob(a) if blob is None else blob
    _verify(label, blob, a.sha256, "its row's archive_sha256")
    try:
        text = store.archive_text(a, blob)
    except Unreadable as exc:
        raise TranscriptError(label, exc.problem) from None
    return _archive_read(transcript_of_bytes(label, text, strict), origin, a.session_id, (len(blob or b""), proof), start)


def _verify(label: Path, data: bytes, sha256: str | None, whose: str, digest: str | None = None) -> None:
    """An archive's bytes are the ones its store row declares (OpenClaw's archive_sha256), else a finding.
    `digest`: the bytes' SHA-256 when the caller has it already."""
    if sha256 is not None and (digest or hashlib.sha256(data).hexdigest()) != sha256:
        raise TranscriptError(label, f"failed verification ({len(data)} bytes; SHA-256 differs from {whose})")


def read_archive_file(path: Path, session_key: str | None, start: FileRecord | str, strict: bool,
                      declared: str | None = None) -> Transcript:
    """An archive file (a published `.deleted.`/`.reset.` copy, the doctor's original or archive-tier file): from its
    record (hashed, not parsed) while its bytes are the recorded ones, else whole. `declared`: the archive_sha256 of
    the store row it was published from (its bytes are the row's)."""
    try:
        data = read_regular(path)
        size, proof = len(data), hashlib.sha256(data).hexdigest()
        start = archive_start(start, proof)
        if isinstance(start, FileRecord):
            return _unchanged(path, ArchiveOrigin(path.name, archive_kind(path), start.header_id, session_key), start)
        _verify(path, data, declared, "its store row's archive_sha256", proof)
        if path.name.endswith(".zst"):
            data = decompress(data)
    except Unreadable as exc:
        raise TranscriptError(path, exc.problem) from None
    t = transcript_of_bytes(path, data, strict)
    sid = t.header_id if t.header is not None else archive_session_id(path)
    # a published file sits in its agent's folder (agents/<id>/sessions/): its agent, as its store row would say
    agent = path.parent.parent.name if path.parent.name == "sessions" and path.parent.parent.parent.name == "agents" else None
    return _archive_read(t, ArchiveOrigin(path.name, archive_kind(path), sid, session_key, agent_id=agent), sid,
                         (size, proof), start)


def _archive_read(t: Transcript, origin: ArchiveOrigin, session_id: str, stored: tuple[int, str],
                  why: str) -> Transcript:
    """An archive read whole: its record is its stored bytes' size and SHA-256 (archive_start), its messages and tip."""
    assert t.mark is not None
    return replace(t, origin=origin, header_id=t.header_id if t.header is not None else session_id,
                   mark=replace(t.mark, size=stored[0], sha256=stored[1]), why_whole=why)


def _unchanged(path: Path, origin: ArchiveOrigin, rec: FileRecord) -> Transcript:
    """An archive the last run read, unchanged since: nothing read, its messages counted from the record."""
    return Transcript(path, rec.header_id, None, rec.version, [], TranscriptReport(), [], rec.mark,
                      rec.mark.size or 0, origin=origin)


@dataclass(frozen=True)
class PendingOrigin:
    """A pending input read as a transcript of one user message, landing at the end of its window's session."""
    input: PendingInput
    window_form = True

    @property
    def session_key(self) -> str | None:
        return self.input.session_key

    record_key = None   # its path's

    def metadata(self) -> dict:
        p = self.input
        out = {"pending_input": p.input_id, "pending_state": p.state, "pending_accepted_at": p.accepted_at,
               "agent_id": p.agent_id, "session_window": p.session_id}
        return {k: v for k, v in out.items() if v is not None}


def read_pending(store: OpenStore, p: PendingInput, _strict: bool) -> Transcript | None:
    """The input as its window would have held it: a message entry after the window's header. It has no entry id
    (OpenClaw gives one when it writes the entry): the plan matches it by identity, so the entry OpenClaw may write
    later, with the same content, is the same message (r20_match.sql), never a second one. Its message_json goes
    into the entry's line as it is, fetched and parsed once, as lines are; one that is not a message is a finding
    (None: nothing read)."""
    when = (datetime.fromtimestamp(p.accepted_at / 1000, timezone.utc).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z") if p.accepted_at is not None else None)
    lines = [(1, orjson.dumps({"type": "session", "version": 3, "id": p.session_id})),
             (2, b'{"type":"message","timestamp":' + orjson.dumps(when) + b',"message":' +
              store.pending_message(p) + b"}")]
    where = Path(f"{p.store}#session_pending_inputs/{p.input_id}")
    t = parse_transcript(where, lines, False)   # a bad line is this input's finding, --strict or not
    if not t.messages:
        store.findings.append(finding("pending input", where, "message_json is not a message", p.session_id))
        return None
    return replace(t, header_id=p.session_id, origin=PendingOrigin(p), mark=None, why_whole=PENDING)


def where_kind(t: Transcript) -> str:
    """Where a transcript's history lives, in the words audit names missing history by."""
    o = t.origin
    if isinstance(o, StoreWindow):
        return f"cold window ({'file' if o.cold == 'file' else 'blob in the store'})" if o.cold else "live window"
    if isinstance(o, PendingOrigin):
        return "pending input"
    if isinstance(o, ArchiveOrigin):
        if o.kind == "imported":
            return "archive-tier file" if o.name.startswith("archive-tier.") else "the doctor's original"
        return f"{o.kind} archive" + (" (store row)" if o.store is not None else " (file)")
    return "JSONL file"


def archive_listing(origin: ArchiveOrigin, where: str, read: bool, alive: bool) -> dict:
    """One line of the report's archive list."""
    return {"archive": origin.name, "where": where, "reason": origin.kind, "session_id": origin.session_id,
            "session_key": origin.session_key, "imported": read,
            "session_still_held": alive}
