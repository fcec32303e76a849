"""A JSONL transcript read from where the last complete reconcile stopped, or whole, as
lcm_etl/read/sessions/transcript_decision.py decides. Its record (transcripts.Mark) holds the bytes a run read, up to the end
of the last complete line, and their SHA-256: the next run hashes that prefix again and parses only the lines after
it (transcript_decision.prefix_proved, continue_path); a file that is not the recorded prefix plus an append to its
active branch is read whole, which is always correct. Hashing costs a sequential read at SHA-256 speed, a small
fraction of parsing the same bytes (docs/benchmarks.md).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from lcm_etl.read.findings import Unreadable, open_regular
from lcm_etl.read.sessions.transcript_decision import PREFIX_CHANGED, FileRecord, continue_path, prefix_proved
from lcm_etl.read.transcript.transcripts import Mark, Transcript, TranscriptReport, _lines, read_transcript


def read(path: Path, start: FileRecord | str, strict: bool) -> Transcript:
    """The file from its record (`start`, transcript_decision.Records.start) when the record proves the prefix
    unchanged and the rest an append, else whole, with the cause in `why_whole`."""
    if isinstance(start, FileRecord):
        appended = read_appended(path, start)
        if isinstance(appended, Transcript):
            return appended
        cause = appended
    else:
        cause = start
    return replace(read_transcript(path, strict=strict), why_whole=cause)


def read_appended(path: Path, rec: FileRecord) -> Transcript | str:
    """The messages appended after the recorded bytes, or why the file is not the recorded prefix plus an append to
    its active branch (then it is read whole)."""
    was = rec.mark
    try:
        with open(open_regular(path), "rb") as f:   # a FIFO or a device is never opened: the whole read says why
            digest = prefix_proved(f, was)
            if digest is None:
                return PREFIX_CHANGED
            tail = f.read()
    except (OSError, Unreadable):
        return PREFIX_CHANGED   # not read again: the whole read reports why
    tail = tail[:tail.rfind(b"\n") + 1]   # a line still being written is read next time
    report = TranscriptReport()
    lines = ((was.lines + i, raw) for i, raw in enumerate(_lines(tail), 1))
    appended = continue_path(lines, was.tip, report)
    if isinstance(appended, str):
        return appended
    messages, tip = appended
    digest.update(tail)
    lines_read = tail.count(b"\n")
    mark = Mark(was.lines + lines_read, was.messages + len(messages), was.parts + sum(len(m.parts) for m in messages),
                tip, (was.size or 0) + len(tail), digest.hexdigest())
    return Transcript(path, rec.header_id, None, rec.version, messages, report, [], mark, was.size or 0, lines_read)

